"""Early exit on the engine: the same exit decisions (depth per token) and tokens as on the
reference, for the margin and residual gates, with deferred KV catch-up (reference/early_exit.py's
loop; only the model changes). A hand-made calibration on a tiny random model puts the gate
thresholds where some tokens exit and some run every layer, so both branches are compared.

The int8 layer chain cut at the depths where passes start and stop (``pass_boundaries``, what the
early-exit and layer-skip loaders pass): the same bits as the uncut chain, step by step, for the
deferred decoder and the layer-skip draft; graph runs counted; no pass end inside a link."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, cast

import numpy as np
import pytest

from tests.support.fake_tokenizer import FakeTokenizer
from verispec.commands.speculative import draft_boundaries
from verispec.engine import fused as fused_mod
from verispec.engine import load_model
from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel
from verispec.reference.calibration import Calibration, DepthCalibration
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import make_draft, parse_draft_spec
from verispec.reference.early_exit import DeferredDecoder, exit_logits, generate_early_exit
from verispec.reference.errors import ModelError
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams


def _calibration(n_layer: int, threshold: float, gate: Any) -> Calibration:
    half = float(np.float32(threshold / 2))  # residual quantiles must be float32 values
    depths = tuple(DepthCalibration(d, half, half, threshold, 0.5) for d in (1, 2, 3))
    return Calibration("0" * 64, "tiny", n_layer, Fraction(99, 100), gate, "halfrange", 100, 0, depths)


@pytest.mark.model
@pytest.mark.parametrize("gate", ["margin", "halfrange"])
def test_early_exit_decisions_identical(tiny_gguf: Any, smollm2_tokenizer: Any, gate: str) -> None:
    path = tiny_gguf("llama", n_layer=5, n_vocab=64, context_length=96, weight_scale=1.0)
    ref, fast = Model.load(path), FastModel.load(path)
    request = GenerationRequest((5, 9, 12, 7, 3), params=SamplingParams(temperature=0.0), max_tokens=24, seed=0)
    calibration = _calibration(5, 0.6, gate)
    want, want_stats = generate_early_exit(ref, smollm2_tokenizer, request, calibration, backlog_bound=4)
    got, got_stats = generate_early_exit(fast, smollm2_tokenizer, request, calibration, backlog_bound=4)
    assert got.ids == want.ids
    assert got_stats.depths == want_stats.depths
    assert len(set(want_stats.depths)) >= 2  # some tokens exit early, some run every layer


def test_the_prompt_pass_runs_the_head_on_its_last_row_only(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deferred decoder's prompt pass reads one row of logits: on the engine the head runs on
    that row alone (Gemma 3's head is 262,144 rows; on every prompt row it would cost the prompt's
    length in head passes), with the bits a full pass gives that row in the int8 mode (a k-row pass
    gives each row what a 1-row pass gives); the reference returns its last row too."""
    path = tiny_gguf("llama", n_layer=5, n_vocab=64, context_length=96, weight_scale=1.0)
    prompt = [5, 9, 12, 7, 3]
    fast = FastModel.load(path, weights="int8")
    head_rows: list[int] = []
    pass_logits = FastModel._pass_logits

    def counted(model: FastModel, x: Any) -> Any:
        head_rows.append(len(x))
        return pass_logits(model, x)

    monkeypatch.setattr(FastModel, "_pass_logits", counted)
    got = DeferredDecoder(fast, fast.new_cache(16), (1, 2, 3)).prefill(prompt)
    assert head_rows == [1] and got.shape == (1, 64)
    monkeypatch.undo()
    every_row = fast.forward(prompt, fast.new_cache(16)).logits
    assert np.array_equal(got, every_row[-1:])
    ref = Model.load(path)
    want = ref.forward(prompt, ref.new_cache(16)).logits[-1:]
    assert np.array_equal(DeferredDecoder(ref, ref.new_cache(16), (1, 2, 3)).prefill(prompt), want)


# -- the int8 layer chain cut where early exit's and layer skip's passes start and stop ---------------


class _Passes:
    """Records ``(model, first, last)`` of every ``forward_layers`` pass, and counts the runs of
    onnxruntime graphs (``OrtGraph.calls``, which every run path counts, plain or IO-bound: a
    graph's run is one call, or one a row where its row mode asks for that on this machine, the
    same for every layout), while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.passes: list[tuple[int, int, int]] = []
        self._calls_at_start = OrtGraph.calls
        forward_layers = FastModel.forward_layers

        def recorded(model: FastModel, x: Any, cache: Any, first: int, last: int, *args: Any, **kw: Any) -> Any:
            self.passes.append((id(model), first, last))
            return forward_layers(model, x, cache, first, last, *args, **kw)

        monkeypatch.setattr(FastModel, "forward_layers", recorded)

    @property
    def graph_runs(self) -> int:
        return OrtGraph.calls - self._calls_at_start

    def inside_links(self, model: FastModel) -> int:
        """Pass ends of ``model`` that fall inside a link of its chain (a half computed and dropped)."""
        chain = model.store.fused_layers
        assert chain is not None
        ends = [(first, last) for key, first, last in self.passes if key == id(model) and first <= last]
        return sum(int(first not in chain.entry) + int(last not in chain.exit) for first, last in ends)


def _chain_models(path: Any, boundaries: tuple[int, ...]) -> tuple[FastModel, FastModel]:
    """The fused int8 model with its chain uncut (the default) and cut at ``boundaries``."""
    inside = FastModel.load(path, weights="int8", fused=True)
    cut = FastModel.load(path, weights="int8", fused=True, pass_boundaries=boundaries)
    assert inside.store.fused_layers is not None and cut.store.fused_layers is not None
    assert sorted(inside.store.fused_layers.exit) == [inside.config.n_layer - 1]  # no cut but the end
    assert sorted(cut.store.fused_layers.exit) == sorted({d - 1 for d in boundaries} | {cut.config.n_layer - 1})
    return inside, cut


TINY_ARCH = {"llama": {}, "gemma3": {"sliding_window": 3, "softcap": 30.0, "head_dim": 16}}


@pytest.mark.parametrize("arch", sorted(TINY_ARCH))
def test_early_exit_on_a_chain_cut_at_its_depths_gives_the_same_bits(
    tiny_gguf: Any, arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step by step through the deferred decoder (exits, owed rows caught up in the later tokens'
    passes, forced catch-ups), the chain cut at the candidate depths against the chain whose links
    those depths fall inside: the same depth, hidden state and exit logits each step and the same
    cache after the catch-up, bit for bit. Graph runs, counted: a pass that starts or stops at a
    candidate depth runs as many graphs on either layout (inside a link it runs the link's other
    half and drops it: on the cut chain no pass end falls inside a link, on the uncut one most do);
    a pass that crosses a cut without stopping (the forced catch-up) runs one graph more a cut."""
    path = tiny_gguf(arch, n_layer=5, n_vocab=64, context_length=96, weight_scale=1.0, **TINY_ARCH[arch])
    depths = (1, 2, 3)
    inside, cut = _chain_models(path, depths)
    exit_at = [1, 5, 2, 3, 5, 1, 1, 3]  # a policy's exit depths in turn (5: every layer): each kind of pass
    passes = _Passes(monkeypatch)
    decoders = [DeferredDecoder(m, m.new_cache(64), depths, backlog_bound=4) for m in (inside, cut)]
    first_tokens = [int(np.argmax(d.prefill([5, 9, 12, 7, 3])[-1])) for d in decoders]
    assert first_tokens[0] == first_tokens[1]
    token, served, crossed = first_tokens[0], [], 0
    for step in range(24):
        steps = []
        for decoder in decoders:
            heads: list[Any] = []

            def policy(depth: int, hidden: Any, model: Any = decoder.model, heads: list[Any] = heads) -> bool:
                heads.append(exit_logits(model, depth, hidden))
                return depth == exit_at[step % len(exit_at)]

            runs, begin = passes.graph_runs, len(passes.passes)
            depth, hidden = decoder.step(token, policy)
            ranges = [(first, last) for _, first, last in passes.passes[begin:]]
            steps.append((depth, hidden, heads, passes.graph_runs - runs, ranges))
        (depth, hidden, heads, runs_in, ranges), (depth_cut, hidden_cut, heads_cut, runs_cut, ranges_cut) = steps
        assert depth == depth_cut and np.array_equal(hidden, hidden_cut)
        assert len(heads) == len(heads_cut) and all(np.array_equal(a, b) for a, b in zip(heads, heads_cut))
        assert ranges == ranges_cut  # the same passes; only the layout differs
        # a pass that crosses a cut without stopping there runs two graphs where the link runs one
        # (a forced catch-up); a pass end at a cut runs what the link runs, without the dropped half
        through = sum(1 for first, last in ranges for d in depths if first < d <= last)
        assert runs_cut - runs_in == through
        crossed += through
        served.append(depth)
        token = int(np.argmax((heads[-1] if depth < 5 else inside.head(hidden))[-1]))
    assert set(served) == {1, 2, 3, 5}
    assert decoders[0].counters.forced_catchups >= 1 and crossed >= 1
    for decoder in decoders:
        decoder.settle()
    a, b = cast(Any, decoders[0].cache), cast(Any, decoders[1].cache)  # the engine's caches
    assert a.length == b.length
    assert np.array_equal(a.k[:, :, : a.length], b.k[:, :, : b.length])
    assert np.array_equal(a.v[:, :, : a.length], b.v[:, :, : b.length])
    assert passes.inside_links(cut) == 0
    assert passes.inside_links(inside) >= len(served)  # every step's pass ends in a link, or more


@pytest.mark.parametrize("arch", sorted(TINY_ARCH))
def test_layer_skip_on_a_chain_cut_at_its_exit_layer_gives_the_same_tokens(
    tiny_gguf: Any, arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The self-speculative layer-skip draft (layers 0..M-1 and the exit head, then layers M..L-1
    over the span) on the chain cut at M and on the uncut one: the same cycles, drafts and tokens
    (greedy and sampled); on the cut chain no pass ends inside a link, on the uncut one its passes
    stop and start inside link M - 1."""
    path = tiny_gguf(arch, n_layer=5, n_vocab=64, context_length=96, weight_scale=0.3, **TINY_ARCH[arch])
    spec = parse_draft_spec("layerskip:2")
    inside, cut = _chain_models(path, draft_boundaries(spec))
    passes = _Passes(monkeypatch)
    prompt, tokenizer = (5, 9, 12, 5, 9, 12, 5, 9, 12, 5, 9), cast(Any, FakeTokenizer())
    for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=1.5, top_k=40, top_p=0.95)):
        request = GenerationRequest(prompt, params=params, max_tokens=20, seed=42)
        results = [
            speculative_generate(m, tokenizer, request, make_draft(spec, m), SpeculativeOptions(k=3))
            for m in (inside, cut)
        ]
        assert results[0].generation.ids == results[1].generation.ids
        trace = [[(c.k, c.drafted, c.accepted, c.token, c.emitted) for c in r.cycles] for r in results]
        assert trace[0] == trace[1] and any(cycle[2] > 0 for cycle in trace[0])  # some drafts accepted
    assert passes.inside_links(cut) == 0 and passes.inside_links(inside) > 0


def test_loaders_pass_the_depths_their_passes_stop_at(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load option cuts the chain before each boundary depth, together with the experiments'
    ``VERISPEC_INT8_SPLIT_AFTER``; a depth outside 1..L-1 is a ModelError before any weight is read
    (in every weights mode); the layer-skip loader's boundary is its exit layer."""
    path = tiny_gguf("llama", n_layer=5, n_vocab=64, context_length=96)
    assert fused_mod.chain_splits(5, (4, 1, 4)) == (0, 3)
    monkeypatch.setenv(fused_mod.SPLIT_ENV, "1")  # after layer 1: depth 2
    assert fused_mod.chain_splits(5, (1,)) == (0, 1)
    model = load_model(path, weights="int8", pass_boundaries=(3,))
    assert isinstance(model, FastModel) and model.store.fused_layers is not None
    assert sorted(model.store.fused_layers.exit) == [1, 2, 4]
    monkeypatch.delenv(fused_mod.SPLIT_ENV)
    for weights in ("int8", "f32"):
        for depth in (0, 5, -1):
            with pytest.raises(ModelError, match="pass boundaries"):
                FastModel.load(path, weights=weights, pass_boundaries=(depth,))
    assert FastModel.load(path, weights="f32", pass_boundaries=(2,)).store.fused_layers is None  # nothing to cut
    assert draft_boundaries(parse_draft_spec("layerskip:3")) == (3,)
    assert draft_boundaries(parse_draft_spec("ngram")) == ()
