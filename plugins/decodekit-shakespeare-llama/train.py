"""Train `tiny-shakespeare-llama`, a character-level `LlamaForCausalLM`, on CPU; resumable, pickle-free.

    python plugins/decodekit-shakespeare-llama/train.py --data DATA_DIR --out runs/shakespeare-llama \
        --export plugins/decodekit-shakespeare-llama/src/decodekit_shakespeare_llama/tiny-shakespeare-llama

Data: `--data DIR` holds `shakespeare-train.txt` (trained on) and `shakespeare-val.txt` (Hamlet, only
scored); default `$DECODEKIT_SHAKESPEARE_DATA`, else required. A checkpoint (every
`--save-every` steps and at the end) is `--out/checkpoint/`: `model.safetensors`, `optimizer.safetensors`
(the AdamW tensors and the RNG states) and `state.json` (step, arguments, the rest of the optimizer
state, the loss history). `--resume` continues from it bit for bit. `--export DIR` writes the
`save_pretrained` folder (model + tokenizer) when the run reaches `--steps`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, load_model, save_file, save_model
from tokenizers import Regex, Tokenizer, decoders, models, normalizers
from torch import Tensor, nn
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

DATA_DIR = os.environ.get("DECODEKIT_SHAKESPEARE_DATA", "")  # the training text is not shipped
TRAIN_NAME = "shakespeare-train.txt"
VAL_NAME = "shakespeare-val.txt"


@dataclass
class TrainArgs:
    steps: int = 6000
    batch_size: int = 32
    block_size: int = 256  # trained context, saved as max_position_embeddings
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 200
    weight_decay: float = 0.1
    beta2: float = 0.99
    grad_clip: float = 1.0
    seed: int = 1337
    threads: int = 1
    n_layer: int = 4
    n_head: int = 8
    n_kv_head: int = 2
    hidden: int = 192
    intermediate: int = 512  # SwiGLU width
    rope_theta: float = 10000.0
    eval_every: int = 250
    eval_windows: int = 64
    save_every: int = 250
    log_every: int = 25
    stop_after: int = 0  # end this session after this step (0: run to --steps); --resume later
    data: str = DATA_DIR
    out: str = "runs/shakespeare-llama"


def parse_args(argv: list[str] | None = None) -> tuple[TrainArgs, bool, str | None]:
    d = TrainArgs()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, value in asdict(d).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--export", default=None, help="write the save_pretrained folder (model + tokenizer) here")
    ns = vars(p.parse_args(argv))
    if not ns["data"]:
        p.error("--data DIR is required (or DECODEKIT_SHAKESPEARE_DATA): a folder with shakespeare-train/-val.txt")
    resume = bool(ns.pop("resume"))
    export_dir = ns.pop("export")
    return TrainArgs(**ns), resume, export_dir


# -- tokenizer and model ---------------------------------------------------------------------------


def build_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """One id per character of `alphabet` (sorted), no special tokens, no BOS.

    A BPE model with no merges splits text into characters; `Fuse` decodes by concatenation, so
    `decode(encode(text)) == text` for text in the alphabet. A character outside it becomes a space
    (the normaliser), keeping one id per character instead of silently dropping it.
    """
    vocab = {c: i for i, c in enumerate(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    outside = "[^" + "".join(f"\\x{{{ord(c):X}}}" for c in alphabet) + "]"  # Oniguruma code-point escapes
    tok.normalizer = normalizers.Replace(Regex(outside), " ")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False)  # type: ignore[no-untyped-call]


def model_config(args: TrainArgs, vocab_size: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.n_layer,
        num_attention_heads=args.n_head,
        num_key_value_heads=args.n_kv_head,
        max_position_embeddings=args.block_size,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta},
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=None,  # no special tokens: the vocabulary is the alphabet
        eos_token_id=None,
        pad_token_id=None,
    )


def lr_at(step: int, args: TrainArgs) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to `min_lr_ratio * lr` at `steps`."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, args: TrainArgs) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices and the embedding, none on the RMSNorm gains."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, args.beta2), foreach=True)


def sample_batch(data: Tensor, batch_size: int, block_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random contiguous windows of `block_size + 1` characters: inputs and next-character targets."""
    starts = torch.randint(0, data.numel() - block_size - 1, (batch_size,), generator=gen)
    windows = data[starts[:, None] + torch.arange(block_size + 1)].long()
    return windows[:, :-1], windows[:, 1:]


def val_windows(data: Tensor, n: int, block_size: int) -> tuple[Tensor, Tensor]:
    """A fixed sample of `n` evenly spaced windows, for the loss printed during training."""
    last = data.numel() - block_size - 1
    starts = torch.linspace(0, last, max(1, min(n, last // block_size))).long()
    windows = data[starts[:, None] + torch.arange(block_size + 1)].long()
    return windows[:, :-1], windows[:, 1:]


def batch_loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    logits = model(input_ids=x, use_cache=False).logits  # [B, T, V]
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


@torch.no_grad()
def eval_loss(model: nn.Module, x: Tensor, y: Tensor, batch: int = 16) -> float:
    model.train(False)
    total = sum(
        batch_loss(model, x[i : i + batch], y[i : i + batch]).item() * y[i : i + batch].numel()
        for i in range(0, x.shape[0], batch)
    )
    model.train()
    return total / y.numel()


# -- checkpoints -----------------------------------------------------------------------------------


def _split_optimizer_state(opt: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """`opt.state_dict()` as flat tensors (for safetensors) and JSON for everything else."""
    sd = opt.state_dict()
    tensors = {
        f"state.{pid}.{key}": value.detach().contiguous()
        for pid, state in sd["state"].items()
        for key, value in state.items()
    }
    return tensors, {"param_groups": sd["param_groups"]}


def _join_optimizer_state(tensors: dict[str, Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("state."):
            _, pid, key = name.split(".", 2)
            state.setdefault(int(pid), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    out: Path,
    step: int,
    model: LlamaForCausalLM,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    args: TrainArgs,
    alphabet: str,
    history: list[dict[str, float]],
) -> None:
    """Write `out/checkpoint.tmp`, then swap it in: a kill mid-write keeps the previous checkpoint."""
    tmp, final, old = out / "checkpoint.tmp", out / "checkpoint", out / "checkpoint.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))  # the tied embedding is stored once
    tensors, meta = _split_optimizer_state(opt)
    tensors["rng.sampler"] = gen.get_state()
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    state = {"step": step, "args": asdict(args), "alphabet": alphabet, "optimizer": meta, "history": history}
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(
    out: Path, model: LlamaForCausalLM, opt: torch.optim.Optimizer, gen: torch.Generator
) -> tuple[int, list[dict[str, float]], dict[str, Any]]:
    ckpt = out / "checkpoint"
    state: dict[str, Any] = json.loads((ckpt / "state.json").read_text())
    load_model(model, str(ckpt / "model.safetensors"))
    tensors = load_file(str(ckpt / "optimizer.safetensors"))
    opt.load_state_dict(_join_optimizer_state(tensors, state["optimizer"]))
    gen.set_state(tensors["rng.sampler"])
    torch.set_rng_state(tensors["rng.torch"])
    return int(state["step"]), list(state["history"]), state


def export(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, directory: Path) -> None:
    """The `save_pretrained` folder: config, safetensors weights, generation config, tokenizer."""
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    for path in directory.iterdir():
        path.chmod(0o644)  # safetensors writes owner-only files; these ship as package data


# -- the loop --------------------------------------------------------------------------------------


def train(args: TrainArgs, resume: bool = False, export_dir: str | None = None, log: Any = print) -> LlamaForCausalLM:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_text = (Path(args.data) / TRAIN_NAME).read_text(encoding="utf-8")
    alphabet = "".join(sorted(set(train_text)))
    tokenizer = build_tokenizer(alphabet)
    data = torch.tensor(tokenizer.encode(train_text), dtype=torch.uint8)
    val = torch.tensor(tokenizer.encode((Path(args.data) / VAL_NAME).read_text(encoding="utf-8")))
    vx, vy = val_windows(val, args.eval_windows, args.block_size)

    model = LlamaForCausalLM(model_config(args, len(alphabet)))
    opt = make_optimizer(model, args)
    gen = torch.Generator().manual_seed(args.seed)
    out = Path(args.out)
    step, history = 0, cast(list[dict[str, float]], [])
    if resume:
        step, history, state = load_checkpoint(out, model, opt, gen)
        if state["alphabet"] != alphabet:
            raise SystemExit("--resume: the checkpoint's alphabet differs from this training text's")
        log(f"resumed from {out / 'checkpoint'} at step {step}")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"params {n_params:,} | tokens {data.numel():,} | threads {args.threads} | {asdict(args)}")

    model.train()
    tokens_per_step = args.batch_size * args.block_size
    t0 = t_last = time.perf_counter()
    step_last = step
    losses: list[float] = []
    end = args.steps if args.stop_after <= 0 else min(args.steps, args.stop_after)
    while step < end:
        lr = lr_at(step, args)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = sample_batch(data, args.batch_size, args.block_size, gen)
        loss = batch_loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        losses.append(loss.item())
        if step % args.log_every == 0 or step == end:
            now = time.perf_counter()
            tps = (step - step_last) * tokens_per_step / max(now - t_last, 1e-9)
            record: dict[str, float] = {"step": step, "train_loss": sum(losses) / len(losses)}
            losses.clear()
            line = (
                f"step {step:6d}/{args.steps} | train {record['train_loss']:.4f} | lr {lr:.2e} | "
                f"{tps:6.0f} tok/s | ETA {(args.steps - step) * tokens_per_step / max(tps, 1e-9) / 60:5.1f} min"
            )
            if step % args.eval_every == 0 or step == args.steps:
                record["val_loss"] = eval_loss(model, vx, vy)
                line += f" | val {record['val_loss']:.4f}"
            history.append(record)
            log(line)
            t_last, step_last = time.perf_counter(), step
        if step % args.save_every == 0 or step == end:
            save_checkpoint(out, step, model, opt, gen, args, alphabet, history)
    log(f"done: step {step}, {(time.perf_counter() - t0) / 60:.1f} min this session")
    model.train(False)
    if export_dir is not None and step < args.steps:
        log(f"not exporting: stopped at step {step} of {args.steps}; --resume to finish")
    elif export_dir is not None:
        export(model, tokenizer, Path(export_dir))
        log(f"exported {export_dir}")
    return model


def main(argv: list[str] | None = None) -> None:
    args, resume, export_dir = parse_args(argv)
    train(args, resume=resume, export_dir=export_dir, log=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
