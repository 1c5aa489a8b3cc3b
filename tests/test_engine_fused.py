"""The int8 mode's fused layers (engine/fused.py): two onnxruntime graphs a layer.

- Architecture: the tiny test models are float32, and the int8 mode keeps float matrices float32
  (never requantized), so on them the fused graphs compute the reference's function in float32:
  logits within the derived float32 tolerance of tests/support/tolerances.py (forward_spread), llama
  (RoPE NORM) and gemma3 (NEOX, q/k norms, post-norms, GELU-tanh, sliding window, softcap), as
  the unfused path. What this can detect: a wrong norm, residual, activation, RoPE pairing, split
  of q/k/v or gate/up (O(1) on these models); not an error below the tolerance (~1e-4 here).
  Also with q/k/v/o biases (llama-arch files may carry them; the real models have none).
  The sigmoid / tanh / RMSNorm of onnxruntime are charged as the tolerance model charges NumPy's
  (tanh/exp at 4 ulps), an assumption on MLAS's approximations that this test checks.
- The per-layer API: the hidden states a forward collects equal, bit for bit, those of a layer at
  a time through ``forward_layers`` (early exit and its catch-up use both).
- The law: a 5-row pass gives each row bit for bit what five 1-row passes give, on both real models,
  with 1 and 2 onnxruntime threads (MLAS splits work across threads; every fused op is per row;
  the pool being a process setting, the test process's own count runs in it, any other count in
  a child process), on both layer paths (fused and per-matrix), logits and every layer's hidden state.
- The chain (one graph between two attentions, engine.fused.LayerChain): bit for bit the two
  graphs a layer it fuses (``VERISPEC_INT8_SPLIT_AFTER=all``), logits and every hidden state, on
  the tiny models and on both real models (a prompt, a 5-row span, 64 greedy tokens); passes that
  start and stop inside links (``forward_layers``: the ``Where`` entry, the dropped next half) give
  the full pass's hidden states bit for bit; a step makes L + 1 layer calls (counted), a cut
  chain two at each cut.
- Typed errors for a bad switch value, a mode without fused layers, a matrix of the wrong shape,
  a bad split list.
- A projection split inside a graph (the min term's block sums carried through the split) is the
  per-matrix projection, for every block type, within the float32 bound of one reordered sum.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.quant_blocks import random_blocks
from tests.support.tolerances import assert_within, forward_spread
from verispec.engine import fused as fused_mod
from verispec.engine import matmul as mm
from verispec.engine.blocks import LOSSLESS_TYPES, repack
from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel
from verispec.reference import quants
from verispec.reference.config import Config
from verispec.reference.errors import ModelError
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model

TINY = {"llama": {}, "gemma3": {"sliding_window": 3, "softcap": 30.0, "head_dim": 16}}


@pytest.mark.parametrize("arch", sorted(TINY))
def test_fused_layers_compute_the_reference_function_on_float_models(tiny_gguf: Any, arch: str) -> None:
    path = tiny_gguf(arch, **TINY[arch])
    ref = Model.load(path)
    ids = [3, 17, 5, 9, 40, 2, 11, 63, 0, 8]
    want = ref.forward(ids, ref.new_cache(32)).logits
    spread = forward_spread(ref, tuple(ids)).logits
    assert spread is not None
    for fused in (True, False):
        model = FastModel.load(path, weights="int8", fused=fused)
        assert model.fused is fused and model.store.float_matrices  # float32 kept float32
        got = model.forward(ids, model.new_cache(32)).logits
        assert_within(got, want, spread.tolerance, f"{arch} fused={fused}")


def test_fused_layers_add_the_biases(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-arch files may carry q/k/v/o biases: the tiny llama written with them (gguf-py's
    writer extended here by one hook) against the reference, both paths, the derived tolerance."""
    import gguf

    rng = np.random.default_rng(11)
    write_header = gguf.GGUFWriter.write_header_to_file

    def with_biases(self: Any, *args: Any, **kwargs: Any) -> Any:
        for layer in range(3):  # tiny_gguf's defaults: 3 layers, n_embd 32, 4 heads / 2 kv heads of 8
            for name, n in (("attn_q", 32), ("attn_k", 16), ("attn_v", 16), ("attn_output", 32)):
                self.add_tensor(f"blk.{layer}.{name}.bias", (0.5 * rng.standard_normal(n)).astype(np.float32))
        return write_header(self, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFWriter, "write_header_to_file", with_biases)
    path = tiny_gguf("llama")
    monkeypatch.undo()
    ref = Model.load(path)
    assert ref.weights.layers[0].bq is not None and ref.weights.layers[2].bo is not None
    ids = [3, 17, 5, 9, 40, 2, 11, 63]
    want = ref.forward(ids, ref.new_cache(16)).logits
    spread = forward_spread(ref, tuple(ids)).logits
    assert spread is not None
    for fused in (True, False):
        model = FastModel.load(path, weights="int8", fused=fused)
        got = model.forward(ids, model.new_cache(16)).logits
        assert_within(got, want, spread.tolerance, f"biases, fused={fused}")


def test_collected_hidden_states_equal_a_layer_at_a_time(tiny_gguf: Any) -> None:
    path = tiny_gguf("gemma3", **TINY["gemma3"])
    model = FastModel.load(path, weights="int8", fused=True)
    ids = [3, 17, 5, 9, 40]
    hidden = model.forward(ids, model.new_cache(16), return_hidden=True).hidden
    assert hidden is not None
    cache = model.new_cache(16)
    x = model.embed(ids)
    for layer in range(model.config.n_layer):
        x = model.forward_layers(x, cache, layer, layer, list(range(len(ids))), start=0)
        assert np.array_equal(x, hidden[layer + 1])


def test_fused_switch_is_checked(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tiny_gguf("llama")
    monkeypatch.setenv(fused_mod.ENV, "yes")
    with pytest.raises(ModelError, match=fused_mod.ENV):
        FastModel.load(path, weights="int8")
    monkeypatch.setenv(fused_mod.ENV, "0")
    assert not FastModel.load(path, weights="int8").fused
    monkeypatch.setenv(fused_mod.ENV, "1")
    model = FastModel.load(path, weights="int8")
    assert model.fused
    with pytest.raises(ModelError, match="per-matrix seam"):
        model.store.layer(0)
    with pytest.raises(ModelError, match="fused layers are the int8 mode's"):
        FastModel.load(path, weights="f32", fused=True)
    assert not FastModel.load(path, weights="f32").fused  # the switch is the int8 mode's alone


def test_build_layer_refuses_wrong_shapes(tiny_gguf: Any) -> None:
    with GGUFFile.open(tiny_gguf("llama")) as f:
        cfg = Config.from_gguf(f)
    e, ff = cfg.n_embd, cfg.n_ff
    q, kv = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    rng = np.random.default_rng(0)

    def mat(n: int, k: int) -> np.ndarray[Any, Any]:
        return rng.standard_normal((n, k)).astype(np.float32)

    vectors: dict[str, Any] = {"attn_norm": np.ones(e, np.float32), "ffn_norm": np.ones(e, np.float32)}
    good = fused_mod.LayerMatrices(qkv=mat(q + 2 * kv, e), o=mat(e, q), gu=mat(2 * ff, e), down=mat(e, ff))
    fused_mod.build_layer(cfg, good, vectors, threads=1)  # builds
    raw = np.zeros(e * (e // 32) * 18, dtype=np.uint8)  # Q4_0 blocks of an [e, e] matrix: wrong for gu
    bad = fused_mod.LayerMatrices(qkv=good.qkv, o=good.o, gu=repack(raw, quants.GGMLType.Q4_0, (e, e)), down=good.down)
    with pytest.raises(ModelError, match="matrix gu has shape"):
        fused_mod.build_layer(cfg, bad, vectors, threads=1)
    with pytest.raises(ModelError, match="vector ffn_norm has shape"):
        fused_mod.build_layer(cfg, good, {**vectors, "ffn_norm": np.ones(e + 1, np.float32)}, threads=1)
    with pytest.raises(ModelError, match="vector attn_norm is missing"):
        fused_mod.build_layer(cfg, good, {"ffn_norm": vectors["ffn_norm"]}, threads=1)


def _pass(model: FastModel, ids: list[int], span: list[int]) -> list[Any]:
    """Logits and hidden states of a prompt pass and of a span pass after it."""
    cache = model.new_cache(32)
    first = model.forward(ids, cache, return_hidden=True)
    second = model.forward(span, cache, return_hidden=True)
    return [first.logits, first.hidden, second.logits, second.hidden]


def _load_split(path: Path, split: str, monkeypatch: pytest.MonkeyPatch) -> FastModel:
    monkeypatch.setenv(fused_mod.SPLIT_ENV, split)
    try:
        return FastModel.load(path, weights="int8", fused=True)
    finally:
        monkeypatch.delenv(fused_mod.SPLIT_ENV)


@pytest.mark.parametrize("arch", sorted(TINY))
def test_chain_is_the_two_graphs_a_layer_bit_for_bit(
    tiny_gguf: Any, arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tiny_gguf(arch, **TINY[arch])
    chain = FastModel.load(path, weights="int8", fused=True)
    n = chain.config.n_layer
    links = chain.store.fused_layers
    assert links is not None and sorted(links.link) == list(range(n - 1)) and links.calls(0, n - 1) == n + 1
    two = _load_split(path, "all", monkeypatch)
    assert two.store.fused_layers is not None and not two.store.fused_layers.link
    assert two.store.fused_layers.calls(0, n - 1) == 2 * n
    cut = _load_split(path, "1", monkeypatch)
    assert cut.store.fused_layers is not None and cut.store.fused_layers.calls(0, n - 1) == n + 2
    ids, span = [3, 17, 5, 9, 40], [2, 11, 63]
    want = _pass(two, ids, span)
    for model in (chain, cut):
        assert all(np.array_equal(a, b) for a, b in zip(_pass(model, ids, span), want))


@pytest.mark.parametrize("arch", sorted(TINY))
def test_passes_start_and_stop_inside_links(tiny_gguf: Any, arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every (first, last) range through ``forward_layers``, continued to the last layer, gives the
    full pass's hidden states bit for bit, on the chain and on a chain cut after layer 0; a range
    that starts inside a link runs one call more than its layers' graphs (the entry)."""
    path = tiny_gguf(arch, **TINY[arch])
    ids, span = [3, 17, 5, 9, 40], [2, 11, 63]
    for model in (FastModel.load(path, weights="int8", fused=True), _load_split(path, "0", monkeypatch)):
        n = model.config.n_layer
        full = _pass(model, ids, span)[3]  # [n + 1, T, E]
        for first in range(n):
            for last in range(first - 1, n):
                cache = model.new_cache(32)
                model.forward(ids, cache)
                pos = list(range(len(ids), len(ids) + len(span)))
                x = model.forward_layers(model.embed(span), cache, 0, first - 1, pos)
                assert np.array_equal(x, full[first])
                before = OrtGraph.calls
                x = model.forward_layers(x, cache, first, last, pos)
                chain = model.store.fused_layers
                assert chain is not None and OrtGraph.calls - before == chain.calls(first, last)
                assert np.array_equal(x, full[last + 1]), (first, last)
                x = model.forward_layers(x, cache, last + 1, n - 1, pos)
                assert np.array_equal(x, full[n])


def test_a_decode_step_makes_one_layer_call_between_attentions(tiny_gguf: Any) -> None:
    """Counted: L + 1 layer graphs and the head's, one graph per head chunk (tiny: one)."""
    model = FastModel.load(tiny_gguf("llama"), weights="int8", fused=True)
    cache = model.new_cache(8)
    model.forward([3, 4], cache)
    before = OrtGraph.calls
    model.forward([5], cache, last_only=True)
    assert OrtGraph.calls - before == model.config.n_layer + 1 + 1


def test_split_list_is_checked(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tiny_gguf("llama")  # 3 layers: cuts after 0 or 1
    for text in ("x", "0,x", "2", "-1"):
        monkeypatch.setenv(fused_mod.SPLIT_ENV, text)
        with pytest.raises(ModelError, match=fused_mod.SPLIT_ENV):
            FastModel.load(path, weights="int8", fused=True)
    monkeypatch.setenv(fused_mod.SPLIT_ENV, "all")
    assert fused_mod.chain_splits(3) == (0, 1)
    monkeypatch.setenv(fused_mod.SPLIT_ENV, "1,0,1")
    assert fused_mod.chain_splits(3) == (0, 1)
    monkeypatch.setenv(fused_mod.SPLIT_ENV, "none")
    assert fused_mod.chain_splits(3) == ()
    with GGUFFile.open(path) as f:
        cfg = Config.from_gguf(f)

    def unread(layer: int) -> tuple[fused_mod.LayerMatrices, dict[str, Any]]:
        raise AssertionError("a bad split is refused before any layer is read")

    with pytest.raises(ModelError, match="cannot split after"):
        fused_mod.build_chain(cfg, unread, threads=1, split_after=[2])


@pytest.mark.model
def test_chain_is_the_two_graphs_a_layer_on_the_real_models(
    smollm2_path: Path, gemma3_path: Path, int8_real_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain against the two-graph layout it fuses, both real models: a prompt and a 5-row span
    (logits, every hidden state) and 64 greedy tokens with their logits, bit for bit."""
    prompt, span = [1, 504, 2365, 6354, 28], [1130, 314, 260, 3465, 30]

    def greedy(model: FastModel) -> tuple[list[int], Any]:
        cache = model.new_cache(80)
        logits = model.forward(prompt, cache, last_only=True).logits
        tokens, rows = [], [logits]
        for _ in range(64):
            tokens.append(int(np.argmax(logits[-1])))
            logits = model.forward(tokens[-1:], cache, last_only=True).logits
            rows.append(logits)
        return tokens, np.concatenate(rows)

    for name, path in (("smollm2-135m", smollm2_path), ("gemma3-270m", gemma3_path)):
        chain = int8_real_model(name, True)
        chain_graphs = chain.store.fused_layers
        assert chain_graphs is not None and len(chain_graphs.link) == chain.config.n_layer - 1
        two = _load_split(path, "all", monkeypatch)
        assert all(np.array_equal(a, b) for a, b in zip(_pass(chain, prompt, span), _pass(two, prompt, span))), name
        tokens, logits = greedy(chain)
        want_tokens, want_logits = greedy(two)
        assert tokens == want_tokens and np.array_equal(logits, want_logits), name


# -- the law on the real models ------------------------------------------------------------------------


def rows_are_invariant(path: Path, fused: bool) -> bool:
    """A 5-row pass == five 1-row passes, bit for bit, logits and every layer's hidden state."""
    return model_rows_are_invariant(FastModel.load(path, weights="int8", fused=fused))


def model_rows_are_invariant(model: FastModel) -> bool:
    """:func:`rows_are_invariant` on a loaded int8 model."""
    prompt, span = [1, 504, 2365, 6354, 28], [1130, 314, 260, 3465, 30]  # ids valid in both vocabularies
    cache = model.new_cache(16)
    model.forward(prompt, cache)
    together = model.forward(span, cache, return_hidden=True)
    cache = model.new_cache(16)
    model.forward(prompt, cache)
    alone = [model.forward([t], cache, return_hidden=True) for t in span]
    assert together.hidden is not None
    return bool(
        np.array_equal(together.logits, np.concatenate([r.logits for r in alone]))
        and np.array_equal(together.hidden, np.concatenate([r.hidden for r in alone if r.hidden is not None], axis=1))
    )


def _pool_size_here() -> int | None:
    """The size of this process's shared onnxruntime pool: the first session's count (the
    default thread count, as the engine's loads ask) when none exists yet; None for per-session
    pools (VERISPEC_ORT_POOL), which this test does not run in-process."""
    from verispec.engine import ort_pool

    if ort_pool.pool_mode() != "shared":
        return None
    return ort_pool.pool_threads() or mm.default_threads()


@pytest.mark.model
@pytest.mark.parametrize("threads", [1, 2])
def test_int8_rows_are_invariant_bit_for_bit(
    smollm2_path: Path, gemma3_path: Path, threads: int, request: pytest.FixtureRequest
) -> None:
    """onnxruntime's thread pool is one per process, its size fixed by the first session
    (engine/ort_pool.py), so a count is a process setting: the count this test process's pool
    has runs here, on the real int8 models its shared-load group shares (tests/conftest.py), and any
    other count in a child process of its own. The same four checks either way."""
    import json
    import os
    import subprocess
    import sys

    from verispec.engine import ort_pool

    if _pool_size_here() == threads:
        int8_real_model = request.getfixturevalue("int8_real_model")
        checks = [
            model_rows_are_invariant(int8_real_model(name, fused))
            for name in ("smollm2-135m", "gemma3-270m")
            for fused in (True, False)
        ]
        assert {"threads": ort_pool.pool_threads(), "invariant": checks} == {
            "threads": threads,
            "invariant": [True] * 4,
        }
        return
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "VERISPEC_THREADS": str(threads), "PYTHONPATH": str(root)}
    args = [sys.executable, "-m", "tests.test_engine_fused", str(smollm2_path), str(gemma3_path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=root, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == {"threads": threads, "invariant": [True] * 4}, results


@pytest.mark.parametrize("ggml_type", sorted(LOSSLESS_TYPES), ids=quants.type_name)
def test_split_projection_is_the_projection(ggml_type: int) -> None:
    """``project_split`` (the min term's block-sum columns carried through the split, engine.matmul
    ``wide``) gives what :func:`engine.matmul.ort_blocks` gives: the same kernel call, then per
    output ``Yq + sum_b sums_b mins_b`` summed in some order. Two orders of one (nb + 1)-term float32
    sum differ by at most 2 gamma_{nb+1} sum |terms| (Higham's bound, any order); without mins the
    outputs are the kernel's, bit for bit. Rows stay invariant bit for bit."""
    shape = (48, 512)
    blocks = repack(random_blocks(ggml_type, shape, seed=7), ggml_type, shape)
    x = np.random.default_rng(8).standard_normal((5, shape[1])).astype(np.float32)
    g = fused_mod.FusedGraph()
    first, second = g.project_split(blocks, "x", [20, 28])
    g.op("Concat", [first, second], out=["y"], axis=1)
    split = OrtGraph(g.nodes, g.inits, {"x": ["T", shape[1]]}, {"y": ["T", shape[0]]}, threads=1)
    got = split.run(x)[0]
    want = mm.ort_blocks(blocks, threads=1)(x)
    if blocks.mins is None:
        assert np.array_equal(got, want)
    else:
        raw = mm.ort_blocks(dataclasses.replace(mm.with_block_sums(blocks), mins=None), threads=1)(x)
        yq, sums = raw[:, : shape[0]].astype(np.float64), raw[:, shape[0] :].astype(np.float64)
        terms = np.abs(yq) + np.abs(sums) @ np.abs(blocks.mins.T.astype(np.float64))  # [T, N]
        n = sums.shape[1] + 1
        gamma = n * 2.0**-24 / (1 - n * 2.0**-24)
        assert (np.abs(got.astype(np.float64) - want) <= 2 * gamma * terms).all()
    one_by_one = np.concatenate([split.run(x[i : i + 1])[0] for i in range(x.shape[0])])
    assert np.array_equal(one_by_one, got)


if __name__ == "__main__":  # the child of test_int8_rows_are_invariant_bit_for_bit
    import json
    import sys

    from verispec.engine import ort_pool

    paths = [Path(a) for a in sys.argv[1:]]
    checks = [rows_are_invariant(path, fused) for path in paths for fused in (True, False)]
    print(json.dumps({"threads": ort_pool.pool_threads() or mm.default_threads(), "invariant": checks}))


def test_fused_bench_reports_both_paths(tiny_gguf: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """lab/fused_bench.py on a tiny model: both paths timed, ratios positive and finite; bad
    counts refused by the parser. Never asserts a speed."""
    import json
    import math

    from lab import fused_bench

    path = tiny_gguf("llama", n_vocab=6400)  # the bench prompt ids go up to 6354
    report = fused_bench.compare(path, steps=2, repeats=1)
    for key in ("fused_over_unfused", "fused_over_unfused_median"):
        assert math.isfinite(report[key]) and report[key] > 0
    for name in ("fused", "unfused"):
        assert report[name]["best_step_ms"] > 0 and report[name]["five_rows_over_one_row"] > 0
    with pytest.raises(SystemExit):
        fused_bench.main([str(path), "--steps", "0"])
    fused_bench.main([str(path), "--steps", "1", "--repeats", "1"])
    assert json.loads(capsys.readouterr().out)["model"] == path.name


def test_chain_ab_reports_both_layouts(tiny_gguf: Any) -> None:
    """lab/chain_ab.py on a tiny model: both layouts' counted calls (2 L and L + 1 layer graphs,
    one head graph), the same tokens and logits, ratios positive. Never asserts a speed."""
    import math

    from lab import chain_ab

    path = tiny_gguf("llama", n_vocab=6400)  # the prompt ids go up to 6354
    report = chain_ab.compare(path, steps=2, passes=1)
    n = 3  # tiny_gguf's layers
    assert report["two"]["onnxruntime_calls_per_step"] == 2 * n + 1
    assert report["chain"]["onnxruntime_calls_per_step"] == n + 1 + 1
    assert report["same_tokens"] and report["same_logits"] and report["loaded_first"] == "two"
    assert all(math.isfinite(r) and r > 0 for r in report["two_over_chain"].values())
    with pytest.raises(SystemExit):
        chain_ab.main([str(path), "--passes", "0"])


def test_link_ab_reports_both_layouts_and_rows(tiny_gguf: Any) -> None:
    """lab/link_ab.py on a tiny model: every boundary built both ways, CPU ratios positive and
    finite, the cost by rows relative to one row (1 at one row). Never asserts a speed."""
    import math

    from lab import link_ab

    path = tiny_gguf("llama")
    pairs = link_ab.links_against_pairs(path, repeats=2)
    assert pairs["boundaries"] == 2 and all(math.isfinite(r) and r > 0 for r in pairs["pairs_over_links"].values())
    rows = link_ab.cost_by_rows(path, repeats=1)
    assert rows["relative_to_one_row"]["1"] == {"layers": 1.0, "head": 1.0}
    assert set(rows["relative_to_one_row"]) == {str(r) for r in link_ab.ROWS}
