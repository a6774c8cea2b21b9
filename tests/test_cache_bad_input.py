"""Bad input to caches and calibrations: each a ParameterError that names the parameter or file, the value
and what is allowed, raised before anything is allocated and only where it matters."""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import pytest
import torch
from decodekit_cache_window.calibration import Calibration

import decodekit as dk


@pytest.fixture(scope="module")
def spec() -> dk.CacheSpec:
    # a text that can pass the context of 256: a window wider than the context is refused only then
    return dk.CacheSpec.for_model(dk.load_model("tiny-shakespeare").spec, batch_size=1, capacity=300)


@pytest.mark.parametrize(
    ("cache", "message"),
    [
        (
            "window(size=64, slack=100000000)",
            r"window: size=64, sinks=4, slack=100000000 is invalid: the cache would "
            r"allocate [\d,.]+ GiB, more than the [\d,.]+ GiB of memory of device cpu; allowed: values whose cache",
        ),
        (
            "window(size=64, sinks=100000000)",
            r"sinks=100000000 is invalid: queries would reach .*allowed: size \+ sinks <= 256",
        ),
        (
            "h2o(budget=8, recent=8)",
            r"budget=8, recent=8 are invalid together: budget must hold the sinks and the recent",
        ),
        (  # sinks and recent at their defaults: the rule shows their values
            "h2o(budget=8)",
            r"^cache h2o: budget=8 is invalid: budget must hold the sinks and the recent tokens: "
            r"budget >= sinks \+ recent \(8 < 4 \+ 8\)$",
        ),
        (
            "h2o(budget=8, compression=0.5)",
            r"are invalid together: give budget \(tokens\) or compression \(a ratio\), not both",
        ),
        ("h2o(compression=1.5)", r"compression=1.5 is invalid.*allowed: a number 0 <= compression < 1, or None"),
        ("snapkv(kernel=4)", r"kernel must be odd"),
        ("h2o(budget=64, slack=1000000000)", r"h2o: budget=64, slack=1000000000 is invalid: the cache would allocate"),
        ("h2o(sinks=1000000)", r"compression=0.5 \(the default\) keeps 128 of 256 entries, fewer than sinks=1000000"),
        ("h2o(store='nope')", r"store='nope' is invalid; allowed: a storage backend"),
    ],
)
def test_cache_parameters_refused_before_allocating(spec: dk.CacheSpec, cache: str, message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        dk.create_cache(cache, spec)


def test_window_on_learned_positions_is_bounded_by_memory() -> None:
    spec = dk.CacheSpec(n_layers=12, n_heads=12, n_kv_heads=12, head_dim=64, batch_size=1, capacity=16)
    with pytest.raises(dk.ParameterError, match=r"window: size=1000000000, sinks=4, slack=16 is invalid: the cache"):
        dk.create_cache("window(size=1000000000)", spec)  # no context to bound it: memory does


def test_a_cache_that_keeps_all_is_bounded_by_memory() -> None:
    """Named as the user named it (`cache gqa:`, as every other cache error), not by its class (`GQACache:`)."""
    spec = dk.CacheSpec(n_layers=12, n_heads=12, n_kv_heads=12, head_dim=64, batch_size=1, capacity=10**10)
    with pytest.raises(dk.ParameterError, match=r"^cache gqa: capacity=10000000000 is invalid: the cache would"):
        dk.create_cache("gqa", spec)


@pytest.mark.parametrize("spec", [None, "gqa", 3])
def test_create_cache_checks_its_spec(spec: object) -> None:
    with pytest.raises(
        dk.ParameterError, match=rf"cache gqa: spec={spec!r} is invalid; allowed: a decodekit.CacheSpec"
    ):
        dk.create_cache("gqa", spec)  # type: ignore[arg-type]


def test_a_model_folder_without_a_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(dk.ParameterError, match=r"tiny-shakespeare: directory .* has no config.json; allowed:"):
        dk.load_model(f"tiny-shakespeare:{tmp_path}")


BROKEN = {
    "corrupt": (
        "{not json",
        r"not a calibration: Expecting property name enclosed in double quotes: line 1 column 2 \(char 1\)",
    ),
    "a list": ("[1, 2]", r"its top level: Input should be [^;]*"),
    "wrong type": (None, r"layers\.0\.window: Input should be a valid integer[^;]*"),
    "nested": ("[" * 100_000 + "]" * 100_000, r"not a calibration: maximum recursion depth exceeded[^;]*"),
    "empty": ("", r"not a calibration: Expecting value: line 1 column 1 \(char 0\)"),
}


def _broken(kind: str) -> str:
    text, _ = BROKEN[kind]
    if text is not None:
        return text
    shipped = json.loads((resources.files("decodekit_shakespeare") / "calibration.json").read_text(encoding="utf-8"))
    shipped["layers"][0]["window"] = "wide"
    return json.dumps(shipped)


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_calibration_fails_only_where_the_window_needs_it(tmp_path: Path, kind: str) -> None:
    """The model loads and decodes with gqa; window(size="auto") is the error, naming the file and the fault."""
    shipped = Path(str(resources.files("decodekit_shakespeare")))
    for name in ("config.json", "tiny_shakespeare.safetensors"):
        shutil.copy(shipped / name, tmp_path / name)
    (tmp_path / "calibration.json").write_text(_broken(kind), encoding="utf-8")
    model = dk.load_model(f"tiny-shakespeare:{tmp_path}")
    assert len(dk.generate(model, "ROMEO:", cache="gqa", max_new_tokens=3).tokens[0]) == 3
    file = str(tmp_path / "calibration.json")
    with pytest.raises(dk.ParameterError, match=rf"calibration file {file}: {BROKEN[kind][1]}; allowed: the JSON of"):
        dk.generate(model, "ROMEO:", cache='window(size="auto")', max_new_tokens=3)


def test_a_missing_calibration_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(
        dk.ParameterError, match=rf"calibration file {tmp_path}/gone.json: cannot be read \(.*No such file"
    ):
        Calibration.load(tmp_path / "gone.json")


def test_a_calibration_of_another_model_names_both_layer_counts(tmp_path: Path) -> None:
    shipped = json.loads((resources.files("decodekit_shakespeare") / "calibration.json").read_text(encoding="utf-8"))
    shipped["layers"] = shipped["layers"][:3]
    (tmp_path / "c.json").write_text(json.dumps(shipped), encoding="utf-8")
    spec = dk.CacheSpec(
        n_layers=4, n_heads=2, n_kv_heads=1, head_dim=8, batch_size=1, capacity=4, calibration=tmp_path / "c.json"
    )
    with pytest.raises(dk.ParameterError, match=r"c.json: 3 layers, but the model has 4; allowed: the calibration of"):
        dk.create_cache('window(size="auto")', spec)


@pytest.mark.parametrize("cache", ["gqa", "dense", "int8", "window(size=16)", "streaming(budget=16)", "h2o(budget=16)"])
def test_reorder_and_crop_refuse_what_is_not_a_row_index_or_a_length(cache: str) -> None:
    """Each was an IndexError, AttributeError, RuntimeError or TypeError; a float crop was taken by some."""
    spec = dk.CacheSpec.for_model(dk.load_model("tiny-shakespeare").spec, batch_size=2, capacity=64)
    kv = dk.create_cache(cache, spec)
    for index in (
        torch.tensor([0, 5]),
        torch.tensor([-1, 0]),
        [1, 0],
        torch.tensor([0.0, 1.0]),
        torch.tensor([1, 0])[:1],
    ):
        with pytest.raises(
            dk.ParameterError, match=r"reorder: index .* is invalid; allowed: a 1-D integer tensor of 2"
        ):
            kv.reorder(index)  # type: ignore[attr-defined]
    for n in (0.5, None, "0", True):
        with pytest.raises(dk.ParameterError, match=rf"crop: n={n!r} is invalid; allowed: an int"):
            kv.crop(n)  # type: ignore[attr-defined]
    kv.reorder(torch.tensor([1, 0]))  # type: ignore[attr-defined]
    kv.crop(0)  # type: ignore[attr-defined]


class _NoTakeSlots(dk.storage.FloatStorage):
    take_slots = None  # type: ignore[assignment]  # a storage written to the protocol's first five members only


class _NoTakeSlotsCache(dk.cache.PreallocatedKVCache):
    storage = _NoTakeSlots


def test_crop_rows_over_a_storage_without_take_slots_names_the_member_to_add() -> None:
    spec = dk.CacheSpec(n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4, batch_size=2, capacity=8)
    cache = _NoTakeSlotsCache(spec)
    k = torch.zeros(2, 2, 4, 4)
    cache.update(0, k, k)
    with pytest.raises(dk.ParameterError) as refused:
        cache.crop_rows([3, 4], 4)
    assert str(refused.value) == (
        "_NoTakeSlotsCache.crop_rows: its storage _NoTakeSlots has no take_slots; allowed: a storage with "
        "take_slots(source, stop), which moves each row's slots (decodekit.storage.take_slots does it for its "
        "[B, H, slots, ...] buffers), as FloatStorage and Int8Storage have"
    )
