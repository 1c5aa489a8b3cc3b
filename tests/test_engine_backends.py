"""The matmul seam's backends (engine/matmul.py) and the lossless block repack (engine/blocks.py).

- Repack: for every GGUF block type, :meth:`KernelBlocks.dequantize` equals
  :func:`reference.quants.dequantize` exactly (bit for bit on finite values; NaN where it has NaN).
- The exact backends (numpy, ort) run the differential tests' tiny models at the same derived
  tolerance as tests/test_engine.py (tests/support/tolerances.py: float32 summation order only).
- The int8 kernel (ort-q): its error against the exact product of the SAME weights is bounded by
  int8 rounding of the activations: per block b (the kernel's block, 16 or 32 wide) each x_i moves
  by at most step_b / 2, step_b = max |x over b| / 127, so |y_n - y*_n| <= sum_b step_b / 2 *
  sum_{i in b} |W_ni|, plus float32 accumulation over the blocks: (n_blocks + 4) * 2^-23 * sum |x||W|
  (each block's int32 dot is exact; its scale product and the running sum round once each, a
  factor 2 of margin). A min term computed on the unrounded x breaks this bound (it leaves
  s * sum q (x~ - x) with q ~ 7.5, not sum w (x~ - x)); test_int8_kernel_within_rounding_bound
  checks that the bound is tight enough to see that.
- The int8 mode on the real models is compared with the reference the way llama.cpp is
  (tests/test_golden.py): NMSE per position < 5e-2, mean per prompt < 1e-2, top-1 equal where the
  reference's margin >= 0.05 -- the bars llama.cpp meets against the float32 forward (it also
  rounds activations to 8 bits in blocks of 32).
- The int8 mode's law is row-count invariant (bit for bit), so greedy speculative decoding on it
  equals greedy plain decoding on it (on the default layer path; tests/test_engine_fused.py checks
  the row invariance of both paths). The comparison with the reference runs on both paths (fused
  and per-matrix, engine/fused.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import GOLDEN_KEYS
from tests.support.quant_blocks import random_blocks
from tests.support.tolerances import assert_within, forward_spread
from verispec.engine import load_model
from verispec.engine import matmul as mm
from verispec.engine import sampling as fast_sampling
from verispec.engine.blocks import LOSSLESS_TYPES, NotBlockQuantized, concat, repack
from verispec.engine.fused import FUSED_BY_DEFAULT
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference import quants
from verispec.reference.errors import ModelError
from verispec.reference.generate import GenerationRequest
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams


@pytest.mark.parametrize("ggml_type", sorted(LOSSLESS_TYPES), ids=quants.type_name)
@pytest.mark.parametrize("finite", [True, False])
def test_repack_is_lossless(ggml_type: int, finite: bool) -> None:
    shape = (6, 512)
    raw = random_blocks(ggml_type, shape, seed=ggml_type, finite=finite)
    want = quants.dequantize(raw, ggml_type, shape[0] * shape[1]).reshape(shape)
    got = repack(raw, ggml_type, shape).dequantize()
    assert np.array_equal(got, want, equal_nan=True)
    finite_values = np.isfinite(want)
    assert np.array_equal(got[finite_values].view(np.uint32), want[finite_values].view(np.uint32))


def test_concat_is_lossless_across_widths_and_blocks() -> None:
    q4k = repack(random_blocks(quants.GGMLType.Q4_K, (4, 512), 1), quants.GGMLType.Q4_K, (4, 512))  # 4-bit, 32, mins
    q6k = repack(random_blocks(quants.GGMLType.Q6_K, (3, 512), 2), quants.GGMLType.Q6_K, (3, 512))  # 8-bit, 16
    both = concat([q4k, q6k])
    assert (both.bits, both.block) == (8, 16)
    np.testing.assert_array_equal(both.dequantize(), np.concatenate([q4k.dequantize(), q6k.dequantize()]))


def test_repack_refuses_what_it_cannot_map() -> None:
    with pytest.raises(NotBlockQuantized, match="F16"):
        repack(np.zeros(64, np.uint8), quants.GGMLType.F16, (1, 32), name="w")
    with pytest.raises(ModelError, match="do not hold"):
        repack(np.zeros(17, np.uint8), quants.GGMLType.Q4_0, (1, 32), name="w")


# -- the int8 kernel ----------------------------------------------------------------------------------


def _rounding_bound(x: np.ndarray[Any, Any], w: np.ndarray[Any, Any], block: int) -> np.ndarray[Any, Any]:
    """``[T, N]``: the int8-rounding bound of the module docstring for ``x [T, K]``, ``w [N, K]``."""
    t, k = x.shape
    step = np.abs(x).reshape(t, k // block, block).max(axis=-1) / 127.0  # [T, nb]
    abs_w = np.abs(w).reshape(w.shape[0], k // block, block).sum(axis=-1)  # [N, nb]
    rounding = (step / 2) @ abs_w.T
    accumulation = (k // block + 4) * 2.0**-23 * (np.abs(x) @ np.abs(w).T)
    return np.asarray(rounding + accumulation)


@pytest.mark.parametrize("ggml_type", sorted(LOSSLESS_TYPES), ids=quants.type_name)
def test_int8_kernel_within_rounding_bound(ggml_type: int) -> None:
    shape = (48, 512)
    blocks = repack(random_blocks(ggml_type, shape, seed=3), ggml_type, shape)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, shape[1])).astype(np.float32)
    x[:, 7] *= 30.0  # an outlier channel, as real activations have
    w = blocks.dequantize().astype(np.float64)
    kernel = mm.ort_blocks(blocks, threads=1)
    y = kernel(x)
    err = np.abs(y - x.astype(np.float64) @ w.T)
    assert (err <= _rounding_bound(x.astype(np.float64), w, blocks.block)).all()
    # row-count invariance, bit for bit: one row at a time == all rows at once
    one_by_one = np.concatenate([kernel(x[i : i + 1]) for i in range(x.shape[0])])
    assert np.array_equal(one_by_one, y)


@pytest.mark.parametrize("ggml_type", [quants.GGMLType.Q4_1, quants.GGMLType.Q5_1], ids=quants.type_name)
def test_min_term_is_on_the_rounded_activations(ggml_type: int) -> None:
    """w = s q + m with q ~ uniform over 0..15 (31): a min term on the unrounded x leaves the error
    s sum q (x~ - x) instead of sum w (x~ - x); its rms is sqrt(E[q^2] / Var q) ~ 1.9x (4-bit) larger
    for centred weights. Seen with margin: the naive error's mean exceeds 1.5x ours."""
    rng = np.random.default_rng(5)
    shape = (64, 512)
    raw = quants.quantize(rng.standard_normal(shape).astype(np.float32), ggml_type)
    blocks = repack(raw, ggml_type, shape)
    x = rng.standard_normal((4, shape[1])).astype(np.float32)
    exact = x.astype(np.float64) @ blocks.dequantize().astype(np.float64).T
    ours = np.abs(mm.ort_blocks(blocks, threads=1)(x) - exact).mean()
    assert blocks.mins is not None
    plain = mm.ort_blocks(dataclasses.replace(blocks, mins=None), threads=1)(x)
    naive = plain + x.astype(np.float64).reshape(4, -1, blocks.block).sum(axis=-1) @ blocks.mins.T.astype(np.float64)
    assert np.abs(naive - exact).mean() > 1.5 * ours


def test_exact_backends_on_tiny_models(tiny_gguf: Any) -> None:
    path = tiny_gguf("gemma3", sliding_window=3, softcap=30.0, head_dim=16)
    ref = Model.load(path)
    ids = [3, 17, 5, 9, 40, 2, 11, 63, 0, 8]
    want = ref.forward(ids, ref.new_cache(32)).logits
    spread = forward_spread(ref, tuple(ids)).logits  # the derived tolerance, as tests/test_engine.py
    assert spread is not None
    for backend in mm.EXACT_BACKENDS:
        fast = FastModel.load(path, backend=backend)
        assert fast.backend == backend
        got = fast.forward(ids, fast.new_cache(32)).logits
        assert_within(got, want, spread.tolerance, f"backend {backend}")


def test_backend_choice_is_checked(tiny_gguf: Any) -> None:
    path = tiny_gguf("llama")
    with pytest.raises(ModelError, match="backend 'blas'"):
        FastModel.load(path, backend="blas")
    with pytest.raises(ModelError, match="'quantized' dequantizes per call"):
        FastModel.load(path, weights="quantized", backend="ort")
    with pytest.raises(ModelError, match="'int8' runs on onnxruntime"):
        FastModel.load(path, weights="int8", backend="numpy")
    assert FastModel.load(path).backend == "ort"  # auto: onnxruntime is installed (measured faster)


def test_int8_mode_keeps_float_tensors_float(tmp_path: Path) -> None:
    from tests.support.synthetic import write_synthetic

    path = tmp_path / "tinyllama.gguf"
    types = write_synthetic(path, "tinyllama")
    model = FastModel.load(path, weights="int8")
    floats = {name for name, kind in types.items() if kind in ("F16", "BF16") and name.endswith(".weight")}
    stored = set(model.store.float_matrices)
    assert floats and floats <= stored  # kept float32, never requantized
    # ...and nothing else but the block-typed partners they are fused with (q/k/v, gate/up)
    siblings = {"attn_q": "qkv", "attn_k": "qkv", "attn_v": "qkv", "ffn_gate": "gu", "ffn_up": "gu"}

    def group(name: str) -> str:
        layer, role = name.split(".")[1], name.split(".")[2]
        return f"{layer}.{siblings.get(role, role)}"

    assert {group(n) for n in stored} == {group(n) for n in floats}
    ids = [1, 5, 9, 2, 7, 3]
    assert np.isfinite(model.forward(ids, model.new_cache(8)).logits).all()


# -- the int8 mode on the real models ------------------------------------------------------------------

# llama.cpp's bars against the float32 forward (tests/test_golden.py). Measured, int8 vs reference
# per golden prompt, max / mean NMSE: SmolLM2 2.1e-2 / 4.6e-3 and 1.7e-2 / 5.5e-3, Gemma 3
# 1.6e-3 / 7.7e-4 and 5.3e-3 / 2.1e-3 (llama.cpp's own: 8.8e-3 / 2.5e-3, 4.0e-2 / 6.3e-3,
# 4.6e-3 / 1.8e-3, 1.4e-2 / 6.2e-3). A wrong block mapping (nibble order, zero point, a scale)
# moves logits by NMSE ~1.
MAX_NMSE, MEAN_NMSE, TOP1_MARGIN = 5e-2, 1e-2, 0.05


@pytest.fixture(scope="module")
def int8_models(int8_real_model: Callable[[str, bool | None], FastModel]) -> dict[str, FastModel]:
    """The int8 mode on its default layer path (engine/fused.py: fused); the loads are shared
    with the other files of its shared-load group (tests/conftest.py: int8_real_model)."""
    return {name: int8_real_model(name, None) for name in ("smollm2-135m", "gemma3-270m")}


@pytest.fixture(scope="module")
def int8_other_path_models(int8_real_model: Callable[[str, bool | None], FastModel]) -> dict[str, FastModel]:
    """The int8 mode on the layer path that is not the default (VERISPEC_INT8_FUSED)."""
    return {name: int8_real_model(name, not FUSED_BY_DEFAULT) for name in ("smollm2-135m", "gemma3-270m")}


@pytest.fixture(scope="module")
def reference_golden_logits(
    smollm2_model: Model, gemma3_model: Model, golden: dict[str, Any]
) -> dict[tuple[str, int], np.ndarray[Any, Any]]:
    """The reference's logits ``[T, V]`` of every golden logits prompt, by (model, prompt index):
    one forward each, which both layer paths' comparisons read (a deterministic function of the
    prompt: the same array each would compute)."""
    refs = {"smollm2-135m": smollm2_model, "gemma3-270m": gemma3_model}
    return {
        (name, i): ref.forward(item["prompt_ids"], ref.new_cache(len(item["prompt_ids"]))).logits
        for name, ref in refs.items()
        for i, item in enumerate(golden["models"][GOLDEN_KEYS[name]]["logits"])
    }


@pytest.mark.model
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_int8_mode_compared_with_the_reference_like_llama_cpp(
    request: pytest.FixtureRequest,
    reference_golden_logits: dict[tuple[str, int], np.ndarray[Any, Any]],
    golden: dict[str, Any],
    name: str,
    fused: bool,
) -> None:
    models = request.getfixturevalue("int8_models" if fused == FUSED_BY_DEFAULT else "int8_other_path_models")
    model = models[name]
    assert model.fused is fused
    assert model.store.float_matrices == ()  # Q4_1 / Q8_0 / Q5_0 / Q4_K / Q6_K: all map losslessly
    for i, item in enumerate(golden["models"][GOLDEN_KEYS[name]]["logits"]):
        ids = item["prompt_ids"]
        want = reference_golden_logits[(name, i)]  # [T, V]: the reference's forward of the prompt
        got = model.forward(ids, model.new_cache(len(ids))).logits
        nmse = np.mean((got - want) ** 2, axis=1) / np.var(want, axis=1)
        top2 = np.sort(want, axis=1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        # Top-1 must agree wherever the reference's margin is beyond the int8 noise. An 8-bit
        # activation forward is chaotic (tests/test_golden_emulated.py: a 1-ulp input change moves
        # later logits by NMSE ~1e-2), so a fixed margin such as llama.cpp's 0.05 is a property of
        # one machine's rounding (it failed under OpenBLAS's Haswell kernel). Model the per-logit
        # error at a position as independent with RMS e = sqrt(mean((got - want)^2)): a flip needs
        # the difference of two errors (RMS sqrt(2) e) to exceed the margin, so beyond 6 sqrt(2) e
        # a flip is a < 1e-9 event per position; a wrong block mapping (NMSE ~1) or an error
        # concentrated on a few logits (a bad head row) still fails it.
        rms_error = np.sqrt(np.mean((got - want) ** 2, axis=1))
        sure = margin >= np.maximum(TOP1_MARGIN, 6.0 * np.sqrt(2.0) * rms_error)
        assert np.array_equal(got.argmax(1)[sure], want.argmax(1)[sure]), item["prompt"]
        assert nmse.max() < MAX_NMSE and nmse.mean() < MEAN_NMSE, (item["prompt"], nmse)


@pytest.mark.model
def test_int8_speculative_equals_plain(int8_models: dict[str, FastModel], smollm2_path: Path) -> None:
    from verispec.reference.decode import SpeculativeOptions, speculative_generate
    from verispec.reference.drafts import make_draft, parse_draft_spec
    from verispec.reference.tokenizer import Tokenizer

    model = int8_models["smollm2-135m"]
    tokenizer = Tokenizer.from_file(smollm2_path)
    # bit-for-bit row-count invariance of the whole forward: a 5-row pass == five 1-row passes
    prompt, span = [1, 504, 2365, 6354, 28], [1130, 314, 260, 3465, 30]
    cache = model.new_cache(16)
    model.forward(prompt, cache)
    together = model.forward(span, cache).logits
    cache = model.new_cache(16)
    model.forward(prompt, cache)
    alone = np.concatenate([model.forward([t], cache).logits for t in span])
    assert np.array_equal(together, alone)
    text = "one two three four five six seven eight nine ten. one two three four five six seven eight nine ten. one two"
    ids = tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos))
    request = GenerationRequest(ids, params=SamplingParams(temperature=0.0), max_tokens=24, seed=0)
    plain = fast_generate(model, tokenizer, request)
    spec = speculative_generate(
        model,
        tokenizer,
        request,
        make_draft(parse_draft_spec("ngram"), model, tokenizer),
        SpeculativeOptions(k=4),
        law=fast_sampling.target_distribution,
    )
    assert list(spec.generation.ids) == list(plain.ids)
    assert sum(c.accepted for c in spec.cycles) > 0  # drafts were accepted: rows were verified together


def test_int8_needs_the_fast_engine(tiny_gguf: Any) -> None:
    with pytest.raises(ModelError, match="int8"):
        load_model(tiny_gguf("llama"), engine="reference", weights="int8")
    with GGUFFile.open(tiny_gguf("llama")) as f:
        assert isinstance(load_model(f, weights="int8"), FastModel)


def test_threads_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERISPEC_THREADS", "3")
    assert mm.default_threads() == 3
    for bad in ("two", "0"):
        monkeypatch.setenv("VERISPEC_THREADS", bad)
        with pytest.raises(ModelError, match="VERISPEC_THREADS"):
            mm.default_threads()
    monkeypatch.delenv("VERISPEC_THREADS")
    assert 1 <= mm.default_threads() <= mm.DEFAULT_THREADS


@pytest.mark.model
def test_int8_early_exit_full_depth_tokens_are_the_int8_models(
    int8_models: dict[str, FastModel], smollm2_path: Path
) -> None:
    """Early exit on the int8 mode (reference/early_exit.py's loop): a token served at full depth
    is the int8 model's own greedy choice for that history, although earlier tokens exited and
    their deep-layer KV was filled in later by batched catch-up passes. What it can detect: a
    catch-up that writes wrong or misplaced KV (the argmax moves); not a last-bit difference (the
    bit-for-bit row-count invariance the catch-up relies on is test_int8_speculative_equals_plain's
    first check; with it switched off this test still passes, measured). The exited tokens carry
    the gate's certified (statistical) guarantee, not checked here. A hand-made margin calibration
    (exits at layers 16/22/26 of 30) makes some tokens exit and some run every layer."""
    from fractions import Fraction

    from verispec.reference.calibration import Calibration, DepthCalibration
    from verispec.reference.early_exit import generate_early_exit
    from verispec.reference.tokenizer import Tokenizer

    model = int8_models["smollm2-135m"]
    tokenizer = Tokenizer.from_file(smollm2_path)
    depths = tuple(DepthCalibration(d, 0.0, 0.0, 2.0, 0.5) for d in (16, 22, 26))
    calibration = Calibration("0" * 64, "smollm2", 30, Fraction(99, 100), "margin", "halfrange", 100, 0, depths)
    text = "one two three four five six seven eight nine ten. one two three four five six seven eight nine ten. one two"
    prompt = tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos))
    request = GenerationRequest(prompt, params=SamplingParams(temperature=0.0), max_tokens=16, seed=0)
    result, stats = generate_early_exit(model, tokenizer, request, calibration, backlog_bound=4)
    cache = model.new_cache(len(prompt) + 20)
    logits = model.forward(list(prompt), cache).logits[-1]
    full_depth_choices = []
    for token, depth in zip(result.ids, stats.depths):
        if depth == stats.n_layer:
            full_depth_choices.append((int(np.argmax(logits)), token))
        logits = model.forward([token], cache).logits[-1]
    assert full_depth_choices and len(full_depth_choices) < len(result.ids)  # both kinds happened
    assert all(plain == served for plain, served in full_depth_choices)


@pytest.mark.parametrize("mode", ["native", "pad-single-row", "row-by-row"])
def test_every_row_mode_keeps_rows_invariant_where_the_probe_chose_it(mode: str) -> None:
    """Each way of calling the int8 kernel keeps the k-row == k 1-row contract: the probe's own
    choice on this machine (asserted by the tests above) and, forced, the two fallbacks, which
    must hold by construction (``pad-single-row`` needs the k-row kernel to treat rows alike;
    ``row-by-row`` makes every call out of 1-row calls)."""
    shape = (48, 512)
    blocks = repack(random_blocks(quants.GGMLType.Q4_0, shape, seed=3), quants.GGMLType.Q4_0, shape)
    kernel = mm.ort_blocks(blocks, threads=1)
    chosen = kernel.row_mode
    assert chosen in ("native", "pad-single-row", "row-by-row")
    if mode == "native" and chosen != "native":
        pytest.skip(f"this machine's MatMulNBits needs {chosen!r}: native calls differ by row count here")
    kernel.row_mode = mode  # type: ignore[assignment]
    x = np.random.default_rng(9).standard_normal((5, shape[1])).astype(np.float32)
    whole = kernel(x)
    one_by_one = np.concatenate([kernel(x[i : i + 1]) for i in range(x.shape[0])])
    assert np.array_equal(one_by_one, whole)
