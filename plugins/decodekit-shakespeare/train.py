"""Train the `tiny-shakespeare` character-level GPT on CPU; resumable, pickle-free checkpoints.

    PYTHONPATH=core python plugins/decodekit-shakespeare/train.py --out runs/shakespeare \
        --export plugins/decodekit-shakespeare/src/decodekit_shakespeare

A checkpoint (written every `--save-every` steps and at the end) is a directory holding
`model.safetensors` (weights, tied embedding stored once), `optimizer.safetensors` (every
tensor of the AdamW state plus the RNG states of the data sampler and of torch) and
`state.json` (step, config, hyper-parameters, the non-tensor optimizer state). `--resume`
continues from it and gives bit-identical weights to an uninterrupted run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import Tensor
from tqdm import tqdm

try:
    from decodekit_shakespeare.lstm import LSTMConfig, LSTMModel
    from decodekit_shakespeare.texts import hamlet
    from decodekit_shakespeare.tokenizer import CharTokenizer
except ImportError:  # running from a checkout without the plugin installed
    sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
    from decodekit_shakespeare.lstm import LSTMConfig, LSTMModel
    from decodekit_shakespeare.texts import hamlet
    from decodekit_shakespeare.tokenizer import CharTokenizer

from decodekit_gpt.gpt import GPT, GPTConfig

# The training text is not shipped: --train-file, or the folder in $DECODEKIT_SHAKESPEARE_DATA. Hamlet is.
DATA_DIR = os.environ.get("DECODEKIT_SHAKESPEARE_DATA", "")
DEFAULT_TRAIN = str(Path(DATA_DIR) / "shakespeare-train.txt") if DATA_DIR else ""
DEFAULT_VAL = str(hamlet())
WEIGHTS_NAME = "tiny_shakespeare.safetensors"
CONFIG_NAME = "config.json"


@dataclass
class TrainArgs:
    arch: str = "gpt"  # "gpt" (decodekit_gpt.gpt) or "lstm" (decodekit_shakespeare.lstm, a draft)
    steps: int = 6000
    batch_size: int = 32
    block_size: int = 256
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 200
    weight_decay: float = 0.1
    beta2: float = 0.99
    grad_clip: float = 1.0
    seed: int = 1337
    threads: int = 2
    n_layer: int = 4
    n_head: int = 8
    n_kv_head: int = 2
    n_embd: int = 192
    dropout: float = 0.0
    position: str = "rope"  # "rope" or "learned" (GPT-2's position embeddings)
    n_input: int = 32  # lstm: the character embedding's width (n_embd is the hidden width)
    distill: str = ""  # a model name: fit its next-character distribution (KL), with its tokenizer
    init: str = ""  # a .safetensors of weights to start from (e.g. an export)
    eval_every: int = 250
    eval_windows: int = 64
    save_every: int = 250
    log_every: int = 25
    amp: str = "none"  # "none" or "bf16" (CPU autocast)
    stop_after: int = 0  # end this session after this step (0: run to --steps); resume later
    train_file: str = DEFAULT_TRAIN
    val_file: str = DEFAULT_VAL
    out: str = "runs/shakespeare"


def parse_args(argv: list[str] | None = None) -> tuple[TrainArgs, bool, str | None]:
    d = TrainArgs()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, value in asdict(d).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--export", default=None, help="write the final weights + config.json into this directory")
    ns = vars(p.parse_args(argv))
    if not ns["train_file"]:
        p.error("--train-file FILE is required (or DECODEKIT_SHAKESPEARE_DATA: a folder with shakespeare-train.txt)")
    resume = bool(ns.pop("resume"))
    export = ns.pop("export")
    return TrainArgs(**ns), resume, export


def model_config(args: TrainArgs, vocab_size: int) -> GPTConfig:
    return GPTConfig(
        vocab_size=vocab_size,
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_kv_head=args.n_kv_head,
        n_embd=args.n_embd,
        bias=True,
        dropout=args.dropout,
        position="rope" if args.position == "rope" else "learned",
    )


def build_model(args: TrainArgs, vocab_size: int) -> GPT:
    """The model `--arch` names: the reference GPT, or an LSTM of `n_layer` x `n_embd` (a draft)."""
    if args.arch == "lstm":
        config = LSTMConfig(vocab_size, args.block_size, args.n_layer, args.n_embd, args.n_input)
        return cast(GPT, LSTMModel(config))  # the loop needs only model(x), .config and the state dict
    return GPT(model_config(args, vocab_size))


def lr_at(step: int, args: TrainArgs) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to `min_lr_ratio * lr` at `steps`."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    ratio = args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return args.lr * ratio


def make_optimizer(model: GPT, args: TrainArgs) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, args.beta2), fused=False, foreach=True)


def sample_batch(data: Tensor, batch_size: int, block_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random contiguous windows of `block_size + 1` tokens: inputs and next-token targets."""
    starts = torch.randint(0, data.numel() - block_size - 1, (batch_size,), generator=gen)
    idx = starts[:, None] + torch.arange(block_size + 1)
    windows = data[idx].long()
    return windows[:, :-1], windows[:, 1:]


def val_windows(data: Tensor, n: int, block_size: int) -> tuple[Tensor, Tensor]:
    """A fixed sample of `n` evenly spaced windows, for the loss printed during training."""
    last = data.numel() - block_size - 1
    n = max(1, min(n, last // block_size))
    starts = torch.linspace(0, last, n).long()
    windows = data[starts[:, None] + torch.arange(block_size + 1)].long()
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def eval_loss(model: GPT, x: Tensor, y: Tensor, batch: int = 16) -> float:
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, x.shape[0], batch):
        logits = model(x[i : i + batch])
        total += F.cross_entropy(logits.flatten(0, 1).float(), y[i : i + batch].flatten(), reduction="sum").item()
    model.train(was_training)
    return total / y.numel()


# -- checkpoints -----------------------------------------------------------------------------------


def _split_optimizer_state(opt: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """`opt.state_dict()` as flat tensors (for safetensors) and JSON for everything else."""
    sd = opt.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, state in sd["state"].items():
        for key, value in state.items():
            if isinstance(value, Tensor):
                tensors[f"state.{pid}.{key}"] = value.detach().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _join_optimizer_state(tensors: dict[str, Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if not name.startswith("state."):
            continue
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    for pid, values in meta["scalars"].items():
        state.setdefault(int(pid), {}).update(values)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    out: Path,
    step: int,
    model: GPT,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    args: TrainArgs,
    alphabet: str,
    history: list[dict[str, float]],
) -> None:
    """Write the checkpoint to `out/tmp` then swap it in, so a kill mid-write keeps the old one."""
    tmp = out / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))
    tensors, meta = _split_optimizer_state(opt)
    tensors["rng.sampler"] = gen.get_state()
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    state = {
        "step": step,
        "args": asdict(args),
        "config": model.config.to_dict(),
        "alphabet": alphabet,
        "optimizer": meta,
        "history": history,
    }
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    final = out / "checkpoint"
    old = out / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(
    out: Path, model: GPT, opt: torch.optim.Optimizer, gen: torch.Generator
) -> tuple[int, list[dict[str, float]], dict[str, Any]]:
    ckpt = out / "checkpoint"
    state = json.loads((ckpt / "state.json").read_text())
    load_model(model, str(ckpt / "model.safetensors"))
    tensors = load_file(str(ckpt / "optimizer.safetensors"))
    opt.load_state_dict(_join_optimizer_state(tensors, state["optimizer"]))
    gen.set_state(tensors["rng.sampler"])
    torch.set_rng_state(tensors["rng.torch"])
    return int(state["step"]), list(state["history"]), state


def export(model: GPT, alphabet: str, directory: Path, extra: dict[str, Any]) -> Path:
    """Weights (fp32, tied embedding once) and `config.json` (GPTConfig fields + alphabet)."""
    directory.mkdir(parents=True, exist_ok=True)
    tied = model.wte.weight is model.lm_head.weight
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    path = directory / WEIGHTS_NAME
    save_file(sd, str(path), metadata={"format": "pt", "model": "tiny-shakespeare"})
    path.chmod(0o644)  # safetensors creates the file owner-only; it ships as package data
    config = {**model.config.to_dict(), "alphabet": alphabet, "training": extra}
    (directory / CONFIG_NAME).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return path


# -- the loop --------------------------------------------------------------------------------------


def train(args: TrainArgs, resume: bool = False, export_dir: str | None = None, quiet: bool = False) -> GPT:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_text = Path(args.train_file).read_text(encoding="utf-8")
    teacher = None
    if args.distill:
        import decodekit as dk

        teacher = dk.load_model(args.distill)
    tok = CharTokenizer.from_text(train_text) if teacher is None else teacher.tokenizer
    data = torch.tensor(tok.encode(train_text), dtype=torch.uint8 if tok.vocab_size < 256 else torch.int32)
    val_text = Path(args.val_file).read_text(encoding="utf-8")
    val = torch.tensor(tok.encode(val_text, errors="replace"), dtype=torch.long)
    vx, vy = val_windows(val, args.eval_windows, args.block_size)

    model = build_model(args, tok.vocab_size)
    if args.init:
        load_model(model, args.init)
    opt = make_optimizer(model, args)
    gen = torch.Generator().manual_seed(args.seed)
    out = Path(args.out)
    step, history = 0, cast(list[dict[str, float]], [])
    if resume:
        step, history, state = load_checkpoint(out, model, opt, gen)
        if state["config"] != model.config.to_dict():
            raise SystemExit(f"--resume: checkpoint config {state['config']} differs from {model.config.to_dict()}")
        if not quiet:
            print(f"resumed from {out / 'checkpoint'} at step {step}", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    log = (lambda *a, **k: None) if quiet else tqdm.write
    log(f"config {model.config.to_dict()} params {n_params:,} tokens {data.numel():,} threads {args.threads}")

    model.train()
    tokens_per_step = args.batch_size * args.block_size
    t0 = time.perf_counter()
    t_last, step_last = t0, step
    losses: list[float] = []
    autocast = args.amp == "bf16"
    bar = tqdm(total=args.steps, initial=step, disable=None if not quiet else True, dynamic_ncols=True)
    end = args.steps if args.stop_after <= 0 else min(args.steps, args.stop_after)
    while step < end:
        lr = lr_at(step, args)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = sample_batch(data, args.batch_size, args.block_size, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
        if teacher is None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        else:  # KL(teacher || model) per character: the draft learns what the target would say
            with torch.no_grad():
                target = teacher(x).float().log_softmax(-1).flatten(0, 1)
            log_q = logits.float().log_softmax(-1).flatten(0, 1)
            loss = F.kl_div(log_q, target, log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        losses.append(loss.item())
        bar.update(1)
        if step % args.log_every == 0 or step == args.steps:
            now = time.perf_counter()
            tps = (step - step_last) * tokens_per_step / max(now - t_last, 1e-9)
            eta = (args.steps - step) * tokens_per_step / max(tps, 1e-9)
            train_loss = sum(losses) / len(losses)
            losses.clear()
            line = (
                f"step {step:6d}/{args.steps} | train {train_loss:.4f} | lr {lr:.2e} | "
                f"{tps:7.0f} tok/s | ETA {eta / 60:5.1f} min"
            )
            record: dict[str, float] = {"step": step, "train_loss": train_loss}
            if step % args.eval_every == 0 or step == args.steps:
                v = eval_loss(model, vx, vy)
                line += f" | val {v:.4f}"
                record["val_loss"] = v
            history.append(record)
            log(line)
            t_last, step_last = time.perf_counter(), step
        if step % args.save_every == 0 or step == end:
            save_checkpoint(out, step, model, opt, gen, args, tok.alphabet, history)
    bar.close()
    wall = time.perf_counter() - t0
    log(f"done: {step} steps, {wall / 60:.1f} min this session")
    if export_dir is not None and step < args.steps:
        log(f"not exporting: stopped at step {step} of {args.steps}; --resume to finish")
    elif export_dir is not None:
        last_train = next((h["train_loss"] for h in reversed(history) if "train_loss" in h), float("nan"))
        last_val = next((h["val_loss"] for h in reversed(history) if "val_loss" in h), float("nan"))
        extra = {
            "steps": step,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "seed": args.seed,
            "final_train_loss": round(last_train, 4),
            "final_val_sample_loss": round(last_val, 4),
        }
        path = export(model, tok.alphabet, Path(export_dir), extra)
        log(f"exported {path} ({path.stat().st_size / 1e6:.2f} MB)")
    model.eval()
    return model


def main(argv: list[str] | None = None) -> None:
    args, resume, export_dir = parse_args(argv)
    train(args, resume=resume, export_dir=export_dir)


if __name__ == "__main__":
    main()
