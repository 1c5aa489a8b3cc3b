"""The int8 engine's sparse head mode (engine/sparse_head.py): every decision is the full head's.

Plain decoding (greedy, top-k, full-vocabulary sampling), the speculative verify pass and the
early-exit gates run on a sparse-head view of the same loaded model and must give the same
tokens, the same accept/reject cycles and the same exit depths as the full head -- exact
equality, no tolerance: the claim is bit-identity. Adversarial rows (exact ties at the top-k cut,
a positive bias on a pruned row, a banned top row, a repeat penalty) run on a synthetic Q8_0 head
built as the int8 head builds its chunks. The sparse path must have run (a test of a fallback
alone would test the full head), and a fallback is counted by reason.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.support.quant_blocks import q8_0_bytes
from verispec.engine import matmul
from verispec.engine.blocks import repack
from verispec.engine.generate import generate
from verispec.engine.model import FastModel
from verispec.engine.sampling import sample_from, target_distribution
from verispec.engine.sparse_head import (
    PRUNED_LOGIT,
    Q8_0_TYPE,
    HeadOptions,
    Q8BlockSketch,
    SparseHead,
    candidates_between,
)
from verispec.reference.calibration import Calibration, DepthCalibration
from verispec.reference.certificate import top2
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import NgramDraft
from verispec.reference.early_exit import generate_early_exit
from verispec.reference.errors import ModelError
from verispec.reference.generate import GenerationRequest
from verispec.reference.gguf import GGUFFile
from verispec.reference.sampling import SamplingParams
from verispec.reference.sampling import target_distribution as reference_law
from verispec.reference.seams import law_view
from verispec.reference.tokenizer import Tokenizer

F32 = npt.NDArray[np.float32]
N_IN = 128
CHUNK = 512
MODELS = ("smollm2-135m", "gemma3-270m")

# -- a synthetic Q8_0 head in the int8 head's row chunks ---------------------------------------------


def synthetic_head(rows: int, tied: int, seed: int, max_fraction: float = 0.5) -> tuple[SparseHead, matmul.RowChunks]:
    """A head of ``rows`` rows whose row 3 is strong and copied to ``tied`` rows spread over the first
    two chunks (exact ties: the same bytes give the same kernel bits), so a top-k cut falls in a tie."""
    rng = np.random.default_rng(seed)
    levels = rng.integers(-40, 41, size=(rows, N_IN)).astype(np.int8)
    scales = (rng.uniform(0.5, 2.0, size=(rows, N_IN // 32)) / 127).astype(np.float16)
    levels[3] = 127
    for i, row in enumerate(np.linspace(5, CHUNK * 2 - 1, tied).astype(int)):  # two chunks: the rest prunable
        levels[row], scales[row] = levels[3], scales[3]
        if i % 3 == 0:  # some ties one level down: the cut can fall between two tie groups
            levels[row, 0] = 126
    raw = q8_0_bytes(levels, scales)
    parts: list[matmul.Matmul] = []
    for first in range(0, rows, CHUNK):
        chunk = np.ascontiguousarray(raw[first : first + CHUNK])
        blocks = repack(chunk.reshape(-1), Q8_0_TYPE, (chunk.shape[0], N_IN), name="head")
        parts.append(matmul.ort_blocks(blocks, 1))
    output = matmul.RowChunks(parts)
    sketch = Q8BlockSketch(raw.reshape(-1).copy(), rows, N_IN, chunk_rows=CHUNK)
    return SparseHead(output, sketch, rows, HeadOptions("sparse", max_fraction=max_fraction)), output


def positive_input(seed: int) -> F32:
    """An input that favours row 3 (all levels +127): its copies lead the logits."""
    rng = np.random.default_rng(seed)
    return (np.abs(rng.standard_normal((1, N_IN))) + 0.5).astype(np.float32)


ADVERSARIAL_LAWS = {
    "greedy": SamplingParams(temperature=0.0),
    "top-1": SamplingParams(temperature=0.7, top_k=1),
    "top-5 in a tie": SamplingParams(temperature=0.7, top_k=5),
    "top-64 in a tie": SamplingParams(temperature=1.3, top_k=64, top_p=0.9, min_p=0.01),
    "bias lifts a pruned row": SamplingParams(temperature=0.8, top_k=8, logit_bias={1700: 1e4}),
    "bias bans a leader": SamplingParams(temperature=0.0, logit_bias={3: float("-inf")}),
    "penalty on the leaders": SamplingParams(temperature=0.9, top_k=16, repeat_penalty=1.7, repeat_last_n=8),
}


@pytest.mark.parametrize("law", sorted(ADVERSARIAL_LAWS))
def test_decision_rows_give_the_full_heads_law_on_adversarial_rows(law: str) -> None:
    head, output = synthetic_head(2048, tied=80, seed=0)
    params = ADVERSARIAL_LAWS[law]
    history = [3, 5, 30, 700, 1500, 2047, 5]
    for seed in range(3):
        x = positive_input(seed)
        full = output(x)
        rows = head.decision_rows(x, params, [history])
        assert rows is not None, f"{law}: the sparse path declined ({head.stats.fallbacks})"
        want = target_distribution(full[0], history, params)
        assert target_distribution(rows[0], history, params).tobytes() == want.tobytes()
        assert reference_law(rows[0], history, params).tobytes() == reference_law(full[0], history, params).tobytes()
        if params.greedy and not params.logit_bias:
            assert top2(rows[0]) == top2(full[0])  # the early-exit margin reads the runner-up's value
    assert head.stats.sparse_rows == 3 and head.stats.chunks_evaluated < head.stats.chunks_offered


def test_ties_straddle_the_cut() -> None:
    """The adversarial head really puts the top-64 cut inside a group of equal logits."""
    _, output = synthetic_head(2048, tied=80, seed=0)
    row = output(positive_input(0))[0]
    ordered = np.sort(row)[::-1]
    assert ordered[63] == ordered[64]


def test_lazy_choice_is_the_full_heads_draw_for_every_uniform() -> None:
    head, output = synthetic_head(2048, tied=20, seed=1, max_fraction=1.0)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, logit_bias={9: 2.5})
    history = [3, 9, 100]
    x = positive_input(2)
    probs = target_distribution(output(x)[0], history, params)
    decided = 0
    for u in np.linspace(0.0, 1.0, 401, endpoint=False):
        token = head.lazy_choice(x, history, params, float(u))
        if token is not None:
            decided += 1
            assert token == sample_from(probs, float(u))
    assert decided > 0 and head.stats.lazy_draws == decided
    assert head.stats.fallback_rows == 401 - decided


def test_candidates_between_needs_more_live_rows_than_k() -> None:
    lower = np.array([0.0, 1.0, -np.inf])
    upper = np.array([0.5, 2.0, -np.inf])
    assert candidates_between(lower, upper, 2) is None  # two live rows: top-2 keeps them all
    got = candidates_between(lower, upper, 1)
    assert got is not None and got.tolist() == [False, True, False]


def test_a_law_that_reads_every_logit_falls_back_and_is_counted() -> None:
    head, _ = synthetic_head(1024, tied=4, seed=2)
    x = positive_input(0)
    assert head.decision_rows(x, SamplingParams(temperature=0.8, top_k=0), None) is None
    assert head.decision_rows(x, SamplingParams(temperature=0.8, top_k=8, repeat_penalty=1.2), None) is None
    assert head.stats.fallbacks == {"law": 1, "penalty": 1} and head.stats.sparse_rows == 0


def test_pruned_logit_is_below_every_finite_float32() -> None:
    assert PRUNED_LOGIT == float(np.finfo(np.float32).min)


@pytest.mark.parametrize("options", [{"mode": "sparse-ish"}, {"mode": "sparse", "max_fraction": 0.0}])
def test_head_options_are_checked(options: dict[str, Any]) -> None:
    with pytest.raises(ModelError):
        HeadOptions(**options)


def test_the_sketch_radius_holds_on_every_row() -> None:
    """|K - S| <= radius on every row: the kernel against Q8BlockSketch (no tolerance)."""
    head, output = synthetic_head(2048, tied=8, seed=3)
    rng = np.random.default_rng(4)
    for x in (
        rng.standard_normal((3, N_IN)).astype(np.float32),
        (rng.standard_normal((2, N_IN)) * 1e-30).astype(np.float32),
    ):
        scores, radius = head.sketch.bounds(x)
        assert (np.abs(output(x).astype(np.float64) - scores) <= radius).all()
        # S = fl32(w . x) chunk by chunk, w exact in float32 (a float16 scale times an int8 level)
        sketch = head.sketch
        assert isinstance(sketch, Q8BlockSketch)
        w = (sketch.levels.astype(np.float32) * sketch.scales[:, :, None]).reshape(-1, N_IN)
        for first in range(0, w.shape[0], CHUNK):
            assert np.array_equal(scores[:, first : first + CHUNK], x @ w[first : first + CHUNK].T)


# -- the real models ---------------------------------------------------------------------------------

_SPARSE: dict[str, tuple[FastModel, FastModel, Tokenizer]] = {}


def models(int8_real_model: Any, path: Path, name: str) -> tuple[FastModel, FastModel, Tokenizer]:
    """The shared int8 model (full head), a sparse-head model on its weights, its tokenizer."""
    if name not in _SPARSE:
        full = int8_real_model(name, None)
        with GGUFFile.open(path) as f:
            _SPARSE[name] = (full, full.with_head("sparse", f), Tokenizer.from_gguf(f.metadata))
    full, sparse, tokenizer = _SPARSE[name]
    assert sparse.sparse_head is not None
    sparse.sparse_head.stats.reset()
    return full, sparse, tokenizer


@pytest.fixture(params=MODELS)
def real(request: pytest.FixtureRequest, int8_real_model: Any) -> tuple[FastModel, FastModel, Tokenizer]:
    path: Path = request.getfixturevalue("smollm2_path" if request.param == MODELS[0] else "gemma3_path")
    return models(int8_real_model, path, request.param)


PLAIN_LAWS = {
    "greedy": SamplingParams(temperature=0.0),
    "top-k": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    "full vocabulary": SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0),
    "top-k with penalty": SamplingParams(temperature=0.9, top_k=8, repeat_penalty=1.3, repeat_last_n=16),
}


@pytest.mark.model
def test_plain_decoding_gives_the_full_heads_tokens(real: tuple[FastModel, FastModel, Tokenizer]) -> None:
    full, sparse, tokenizer = real
    prompt = tuple(tokenizer.encode("The capital of France is", add_bos=tokenizer.add_bos))
    for law, params in PLAIN_LAWS.items():
        request = GenerationRequest(prompt, params=params, max_tokens=3, seed=11)
        assert generate(sparse, tokenizer, request).ids == generate(full, tokenizer, request).ids, law
    stats = sparse.sparse_head.stats if sparse.sparse_head else None
    assert stats is not None and stats.rows == 12
    assert stats.sparse_rows >= 6 and stats.sparse_rows + stats.lazy_draws + stats.fallback_rows == 12


@pytest.mark.model
def test_verify_pass_decisions_are_the_full_heads(real: tuple[FastModel, FastModel, Tokenizer]) -> None:
    full, sparse, tokenizer = real
    prompt = tuple(tokenizer.encode("one two three four one two three four one two", add_bos=tokenizer.add_bos))
    for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=0.7, top_k=20)):
        request = GenerationRequest(prompt, params=params, max_tokens=5, seed=5)
        runs = [
            speculative_generate(m, tokenizer, request, NgramDraft(), SpeculativeOptions(k=3)) for m in (full, sparse)
        ]
        want, got = ([(c.drafted, c.accepted, c.kind, c.token) for c in r.cycles] for r in runs)
        assert got == want
        assert runs[0].generation.ids == runs[1].generation.ids
        assert any(c.drafted for c in runs[0].cycles)  # a verify pass over drafts ran
    assert sparse.sparse_head is not None and sparse.sparse_head.stats.sparse_rows > 0


def hand_calibration(n_layer: int, gate: Any, threshold: float) -> Calibration:
    half = float(np.float32(threshold / 2))  # residual quantiles must be float32 values
    depths = tuple(DepthCalibration(d, half, half, threshold, 0.5) for d in (n_layer - 6, n_layer - 3))
    return Calibration("0" * 64, "hand", n_layer, Fraction(99, 100), gate, "halfrange", 100, 0, depths)


@pytest.mark.model
@pytest.mark.parametrize("gate", ["margin", "halfrange"])
def test_early_exit_decisions_are_the_full_heads(real: tuple[FastModel, FastModel, Tokenizer], gate: str) -> None:
    full, sparse, tokenizer = real
    calibration = hand_calibration(full.config.n_layer, gate, 4.0)
    prompt = tuple(tokenizer.encode("The capital of France is", add_bos=tokenizer.add_bos))
    request = GenerationRequest(prompt, params=SamplingParams(temperature=0.0), max_tokens=4, seed=0)
    want, want_stats = generate_early_exit(full, tokenizer, request, calibration, audit=True)
    got, got_stats = generate_early_exit(sparse, tokenizer, request, calibration, audit=True)
    assert got.ids == want.ids and got_stats.depths == want_stats.depths and got_stats.flips == want_stats.flips
    assert len(set(want_stats.depths)) >= 2  # some tokens exit, some run every layer: both branches compared
    assert sparse.sparse_head is not None and sparse.sparse_head.stats.sparse_rows > 0


@pytest.mark.model
def test_a_head_that_cannot_prune_falls_back_with_the_same_tokens(
    real: tuple[FastModel, FastModel, Tokenizer],
) -> None:
    full, sparse, tokenizer = real
    assert sparse.sparse_head is not None
    tight = FastModel(
        full.config,
        full.store,
        sparse_head=SparseHead(
            sparse.sparse_head.output, sparse.sparse_head.sketch, full.config.n_vocab, HeadOptions("sparse", 1e-9)
        ),
    )
    prompt = tuple(tokenizer.encode("Hello", add_bos=tokenizer.add_bos))
    for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=0.8)):
        request = GenerationRequest(prompt, params=params, max_tokens=2, seed=2)
        assert generate(tight, tokenizer, request).ids == generate(full, tokenizer, request).ids
    assert tight.sparse_head is not None
    assert tight.sparse_head.stats.fallbacks == {"fraction": 4} and tight.sparse_head.stats.sparse_rows == 0


@pytest.mark.model
def test_the_sketch_radius_holds_on_real_rows(real: tuple[FastModel, FastModel, Tokenizer]) -> None:
    full, sparse, tokenizer = real
    assert sparse.sparse_head is not None
    cache = full.new_cache(16)
    hidden = full.forward(tokenizer.encode("Paris is a city", add_bos=tokenizer.add_bos), cache, return_hidden=True)
    assert hidden.hidden is not None
    x = full.head_input(hidden.hidden[-1][-2:])
    scores, radius = sparse.sparse_head.sketch.bounds(x)
    assert (np.abs(full.head_from_input(x).astype(np.float64) - scores) <= radius).all()


def test_the_sparse_head_is_an_int8_mode(tiny_gguf: Any) -> None:
    path = tiny_gguf("llama", n_layer=2, n_vocab=64)
    with pytest.raises(ModelError, match="int8"):
        FastModel.load(path, head="sparse")


# -- the CLI and the bench section ---------------------------------------------------------------------


@pytest.mark.model
def test_cli_generate_head_sparse_threads_the_mode_and_reports_its_work(
    monkeypatch: pytest.MonkeyPatch, int8_real_model: Any, smollm2_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from verispec import cli
    from verispec.commands import generate as generate_command
    from verispec.engine_load import EngineLoaded

    full, sparse, tokenizer = models(int8_real_model, smollm2_path, MODELS[0])
    asked: list[str] = []

    def load_engine(source: Any, **kw: Any) -> EngineLoaded:
        asked.append(kw["head"])
        return EngineLoaded(sparse if kw["head"] == "sparse" else full, tokenizer, None)

    monkeypatch.setattr(generate_command, "load_engine", load_engine)
    runs = {}
    for head in ("full", "sparse"):
        flags = ["--prompt", "Hello", "--max-tokens", "3", "--temperature", "0", "--json", "--head", head]
        assert cli.main(["generate", *flags]) == 0
        runs[head] = json.loads(capsys.readouterr().out)
    assert asked == ["full", "sparse"]
    assert runs["sparse"]["ids"] == runs["full"]["ids"] and "head" not in runs["full"]
    assert runs["sparse"]["head"]["rows"] == 3 and runs["sparse"]["head"]["sparse_rows"] == 3


def test_bench_refuses_the_sparse_head_outside_the_int8_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from verispec import cli

    assert cli.main(["bench", "--head", "sparse", "--weights", "exact"]) == 2
    err = capsys.readouterr().err
    assert "int8" in err and err.count("\n") == 1


@pytest.mark.model
def test_bench_head_section_runs_both_heads_on_the_same_tokens(int8_real_model: Any, smollm2_path: Path) -> None:
    from verispec.bench.head import head_section

    full, _, tokenizer = models(int8_real_model, smollm2_path, MODELS[0])
    section = head_section(smollm2_path, full, tokenizer.encode("Hello there", add_bos=tokenizer.add_bos), 2, 2)
    assert section["same_tokens"] is True
    assert section["full"]["steps"] == section["sparse"]["steps"] == 4
    assert 0 < section["full"]["head_share"] < 1 and 0 < section["sparse"]["head_share"] < 1
    assert section["sparse"]["work"]["rows"] == 6 and section["sparse_over_full_tok_s"] > 0


def test_law_view_keeps_a_wrapper_that_delegates_its_attributes() -> None:
    """law_view gives a loop the model's own law view (the sparse head's decision rows) only when
    the model's class defines ``for_law``; a wrapper that hands attribute reads to an inner model
    (the lockstep proxy, a batch mutant rewiring forward_many) stays the model the loop calls: its
    own passes are not bypassed by the inner model's view."""

    class Inner:
        def for_law(self, params: Any, *, exit_head: bool = False) -> Any:
            return ("view of inner", params, exit_head)

    class Wrapper:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    inner = Inner()
    wrapper = Wrapper(inner)
    assert law_view(wrapper, SamplingParams(), exit_head=True) is wrapper  # type: ignore[arg-type]
    assert law_view(inner, "p", exit_head=True) == ("view of inner", "p", True)  # type: ignore[arg-type]
