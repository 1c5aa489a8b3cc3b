"""The int8 chain's graphs through onnxruntime's IO binding (engine.matmul.OrtGraph.run_bound).

What is shown: a bound call gives the plain call's bits (every row mode, forced where the probe
chose another: native, pad-single-row, row-by-row), k rows still give each row what 1-row calls
give, the outputs are buffers reused call after call (no output allocation a call), an input that
is another graph's output stays bound by address, wrong inputs are refused; the model's results
outlive the buffers (logits and hidden states kept from step t equal a plain run's after step
t + 1 ran: no aliasing); and on both real models, 1- and 5-row passes and 64 greedy tokens give the
same logits and hidden states with and without binding, bit for bit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from verispec.engine import matmul as mm
from verispec.engine.model import FastModel
from verispec.reference.errors import ModelError

PROMPT, SPAN = [1, 504, 2365, 6354, 28], [1130, 314, 260, 3465, 30]  # ids valid in both real vocabularies


def _tiny_int8(tiny_gguf: Any, arch: str = "llama") -> FastModel:
    options = {"gemma3": {"sliding_window": 3, "softcap": 30.0, "head_dim": 16}}.get(arch, {})
    return FastModel.load(tiny_gguf(arch, n_vocab=6400, **options), weights="int8", fused=True)


def _feeds(graph: mm.OrtGraph, rows: int, seed: int) -> list[np.ndarray[Any, Any]]:
    """Random inputs of ``rows`` rows for ``graph`` (bool inputs: a random per-row switch)."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray[Any, Any]] = []
    for shape, dtype in zip(graph._input_shapes, graph._dtypes):
        normal = rng.standard_normal([rows if isinstance(n, str) else n for n in shape])
        out.append(normal > 0 if dtype == np.bool_ else normal.astype(dtype))
    return out


def _link(model: FastModel) -> mm.OrtGraph:
    chain = model.store.fused_layers
    assert chain is not None and chain.link
    return chain.link[min(chain.link)]


@pytest.mark.parametrize("mode", ["native", "pad-single-row", "row-by-row"])
def test_bound_calls_give_the_plain_calls_bits_in_every_row_mode(tiny_gguf: Any, mode: str) -> None:
    graph = _link(_tiny_int8(tiny_gguf))
    chosen = graph.row_mode
    if mode == "native" and chosen != "native":
        pytest.skip(f"this machine's MatMulNBits needs {chosen!r}: native calls differ by row count here")
    graph.row_mode = mode  # type: ignore[assignment]
    for rows in (1, 2, 5):
        feeds = _feeds(graph, rows, seed=rows)
        plain = graph.run(*feeds)
        bound = graph.run_bound(*feeds)
        assert len(bound) == len(plain) and all(np.array_equal(b, p) for b, p in zip(bound, plain)), (mode, rows)
    five = _feeds(graph, 5, seed=7)
    together = [out.copy() for out in graph.run_bound(*five)]
    alone = [[out.copy() for out in graph.run_bound(*(a[i : i + 1] for a in five))] for i in range(5)]
    for j, whole in enumerate(together):  # the int8 contract: k rows give each row its 1-row bits
        assert np.array_equal(whole, np.concatenate([parts[j] for parts in alone])), (mode, j)


def test_outputs_are_reused_buffers_and_chained_inputs_stay_bound(tiny_gguf: Any) -> None:
    model = _tiny_int8(tiny_gguf)
    graph = _link(model)
    three = graph.run_bound(*_feeds(graph, 3, seed=3))
    addresses = [out.ctypes.data for out in three]
    first = graph.run_bound(*_feeds(graph, 1, seed=1))
    kept = [out.copy() for out in first]
    assert [out.ctypes.data for out in first] == addresses  # fewer rows: the leading rows of the same buffers
    second = graph.run_bound(*_feeds(graph, 1, seed=2))
    assert [out.ctypes.data for out in second] == addresses  # the same buffers: nothing allocated
    assert not all(np.array_equal(a, b) for a, b in zip(kept, second))  # ... and overwritten: callers copy
    assert [out.ctypes.data for out in graph.run_bound(*_feeds(graph, 3, seed=4))] == addresses
    graph.run_bound(*_feeds(graph, 5, seed=5))
    assert graph._capacity == 5 and set(graph._bindings) == {5}  # grown: the old bindings dropped
    # a decode step's chain: each link's hidden-state input is the previous graph's output buffer,
    # the same object every step, so it stays bound (no rebinding, no copy)
    chain = model.store.fused_layers
    assert chain is not None
    model.io_binding = True
    cache = model.new_cache(16)
    model.forward(PROMPT, cache)
    for token in SPAN[:3]:
        model.forward([token], cache)
    bindings = [chain.link[layer]._bindings[1] for layer in sorted(chain.link)]
    names = chain.link[min(chain.link)].input_names
    x_input, attn_input = names.index("x"), names.index("attn")
    for previous, binding in zip(bindings, bindings[1:]):
        assert binding.bound[x_input] is previous.outputs[0]
        assert binding.bound[attn_input] is binding.own_inputs[attn_input]  # a fresh array each call: copied


def test_threads_calling_one_graph_at_once_get_their_own_results(tiny_gguf: Any) -> None:
    """Threads sharing one model can run its graphs at the same time (the lockstep scheduler keeps
    model work on one thread, but a caller need not): the first thread to make a bound call owns the graph's buffers, every other thread runs
    unbound, so no thread's result is overwritten by another's call (each result equals the plain
    call's on its own inputs, checked while the threads interleave)."""
    graph = _link(_tiny_int8(tiny_gguf))
    graph.run_bound(*_feeds(graph, 1, seed=0))  # the test's thread owns the buffers
    wrong: list[tuple[int, int]] = []
    start = threading.Barrier(3)

    def calls(worker: int) -> None:
        start.wait()
        for i in range(60):
            feeds = _feeds(graph, 1 + (worker + i) % 4, seed=1000 * worker + i)
            expected = graph.run(*feeds)
            got = [out.copy() for out in graph.run_bound(*feeds)]
            if not all(np.array_equal(g, e) for g, e in zip(got, expected)):
                wrong.append((worker, i))

    threads = [threading.Thread(target=calls, args=(worker,)) for worker in (1, 2)]
    for thread in threads:
        thread.start()
    calls(0)
    for thread in threads:
        thread.join()
    assert wrong == []


def test_an_output_fed_back_is_copied_not_bound_in_place(tiny_gguf: Any) -> None:
    """A graph's own output buffer passed back as its input (the same object call after call) is
    copied in, never bound where the call writes: the bits of plain calls on the same values."""
    model = _tiny_int8(tiny_gguf)
    graph = model.store.fused_layers.exit[model.config.n_layer - 1]  # type: ignore[union-attr]
    attn, x = _feeds(graph, 2, seed=8)
    want, got = x, x
    for _ in range(3):
        want = graph.run(attn, want)[0]
        got = graph.run_bound(attn, got)[0]
        assert np.array_equal(got, want)
    assert graph._bindings[2].bound[1] is graph._bindings[2].own_inputs[1]


def test_more_rows_than_the_bound_limit_run_unbound(tiny_gguf: Any) -> None:
    graph = _link(_tiny_int8(tiny_gguf))
    rows = mm.BIND_MAX_ROWS + 1
    feeds = _feeds(graph, rows, seed=5)
    first = graph.run_bound(*feeds)
    assert rows not in graph._bindings and all(np.array_equal(a, b) for a, b in zip(first, graph.run(*feeds)))
    assert graph.run_bound(*feeds)[0] is not first[0]  # fresh arrays, as run gives


def test_bound_inputs_are_checked(tiny_gguf: Any) -> None:
    graph = _link(_tiny_int8(tiny_gguf))
    feeds = _feeds(graph, 2, seed=6)
    with pytest.raises(ModelError, match="has shape"):
        graph.run_bound(feeds[0], feeds[1][:, :-1], *feeds[2:])
    with pytest.raises(ModelError, match="inputs where the graph takes"):
        graph.run_bound(*feeds[:-1])
    graph.row_mode = "pad-single-row"
    one = _feeds(graph, 1, seed=6)
    with pytest.raises(ModelError, match="where a row of"):
        graph.run_bound(one[0], one[1][:, :-1], *one[2:])


def test_binding_switch_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, want in (("1", True), ("0", False), ("", mm.BIND_BY_DEFAULT)):
        monkeypatch.setenv(mm.BIND_ENV, text)
        assert mm.io_binding_default() is want
    monkeypatch.setenv(mm.BIND_ENV, "yes")
    with pytest.raises(ModelError, match="is not 0 or 1"):
        mm.io_binding_default()


def _greedy(model: FastModel, bound: bool, steps: int) -> list[Any]:
    """Logits and hidden states of a prompt pass, a 5-row span pass and ``steps`` greedy 1-row
    steps, every result kept as returned (a result aliasing a reused buffer would change later)."""
    saved = model.io_binding
    model.io_binding = bound
    try:
        cache = model.new_cache(len(PROMPT) + len(SPAN) + steps + 1)
        kept: list[Any] = []
        for tokens in (PROMPT, SPAN):
            result = model.forward(tokens, cache, return_hidden=True)
            kept += [result.logits, result.hidden]
        for _ in range(steps):
            result = model.forward([int(np.argmax(kept[-2][-1]))], cache, return_hidden=True)
            kept += [result.logits, result.hidden]
        x = model.embed(SPAN)
        middle = model.config.n_layer // 2
        early_cache = model.new_cache(8)
        early = model.forward_layers(x, early_cache, 0, middle, list(range(5)))
        late = model.forward_layers(x[::-1], model.new_cache(8), 0, middle, list(range(5)))
        # a pass stopped inside the chain: its hidden state outlives the next pass, and a pass that
        # starts inside a link (early exit's catch-up) continues from it
        rest = model.forward_layers(early, early_cache, middle + 1, model.config.n_layer - 1, list(range(5)))
        kept += [early, late, rest]
        return kept
    finally:
        model.io_binding = saved


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_kept_results_do_not_alias_the_buffers(tiny_gguf: Any, arch: str) -> None:
    model = _tiny_int8(tiny_gguf, arch)
    plain, bound = _greedy(model, False, 6), _greedy(model, True, 6)
    assert len(plain) == len(bound) and all(np.array_equal(p, b) for p, b in zip(plain, bound))


@pytest.mark.model
def test_binding_changes_no_bit_on_the_real_models(int8_real_model: Callable[[str, bool | None], FastModel]) -> None:
    """Both real models: a prompt pass, a 5-row pass and 64 greedy 1-row steps (every logit and
    hidden state kept as returned), with and without binding, bit for bit."""
    for name in ("smollm2-135m", "gemma3-270m"):
        model = int8_real_model(name, True)
        plain, bound = _greedy(model, False, 64), _greedy(model, True, 64)
        assert len(plain) == len(bound) and all(np.array_equal(p, b) for p, b in zip(plain, bound)), name


def test_bind_ab_reports_both_paths(tiny_gguf: Any) -> None:
    """lab/bind_ab.py on a tiny model: the same calls a step, tokens, logits and hidden states on
    both paths, ratios positive. Never asserts a speed."""
    import math

    from lab import bind_ab

    report = bind_ab.compare(tiny_gguf("llama", n_vocab=6400), steps=2, passes=1)
    assert report["plain"]["onnxruntime_calls_per_step"] == report["bound"]["onnxruntime_calls_per_step"]
    assert report["same_tokens"] and report["same_logits_and_hidden"]
    assert all(math.isfinite(r) and r > 0 for r in report["plain_over_bound"].values())
    with pytest.raises(SystemExit):
        bind_ab.main([str(tiny_gguf("llama")), "--steps", "0"])
