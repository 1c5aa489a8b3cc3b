"""`verispec check-decoder` on SmolLM2: our decoders pass, every mutant decoder is rejected.

The target law of the first m = 3 tokens after a prompt comes from the reference forward
(memoized by prefix, so the whole module costs a few dozen forwards); each decoder is sampled N
times, N from the power analysis: any deviation of total variation >= TV = 0.2 on the cell law
(sequences of probability >= 0.01, plus a tail cell) is detected with probability >= 0.99.
alpha: the "check_decoder" line of spec.statistics.ALPHA_BUDGET, split over the six tests that must
pass (a false alarm can only happen there); N is the power analysis' minimum of 1,000 at these
alphas (two-sample: 2,000 per arm), so the split costs no draws. The mutants must fail; each moves
the law by more than TV (their chi-square p-values are printed), so a pass of a mutant is a miss of
the test, not bad luck at rate alpha.

Three target laws (``--target-law``): our reference forward; the engine's OWN reported logits
(the mutants report their target's correct plain logits: their loops are broken, not their
forward); and two-sample, the engine's speculation on against its speculation off.

Sampling params: temperature 1, top-k 4, repeat penalty 1.5 for the target; the draft (the same
model) samples at temperature 2, top-k 4, so drafts are often rejected and repairs, bonus tokens,
rollbacks and penalties all shape the law; k = 2 drafts per cycle, m = 3.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.check import (
    EngineLogits,
    LawCase,
    ReferenceDecoder,
    ReferenceLogits,
    check_greedy,
    check_law,
)
from verispec.spec.decoder.first_tokens import MemoLaw, first_tokens_law
from verispec.spec.decoder.mutants import EOG_MUTANT, MUTANT_BUGS, DecoderBugs, LoopDecoder
from verispec.spec.decoder.two_sample import check_two_sample, homogeneity
from verispec.spec.statistics import ALPHA_BUDGET, POWER

pytestmark = pytest.mark.model

TV = 0.2
MUST_PASS = 6  # tests below that assert a pass: the budget line is split over them
ALPHA = ALPHA_BUDGET["check_decoder"] / MUST_PASS
PARAMS = SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5)
DRAFT = SamplingParams(temperature=2.0, top_k=4)
PROMPT = "The cat sat on the"


@pytest.fixture(scope="module")
def logits(smollm2_model: Any) -> ReferenceLogits:
    return ReferenceLogits(smollm2_model)


@pytest.fixture(scope="module")
def case(smollm2_tokenizer: Any) -> LawCase:
    return LawCase(tuple(smollm2_tokenizer.encode(PROMPT)), PARAMS, m=3)


@pytest.fixture(scope="module")
def our_loop(logits: ReferenceLogits, smollm2_tokenizer: Any) -> Recorded:
    """Our decode loop, its samples recorded: judged against our forward and against its own
    reported logits on the same draws (one run; each verdict a test of its own at its alpha)."""
    return Recorded(ReferenceDecoder(logits, smollm2_tokenizer, DRAFT, k=2))


def test_our_decode_loop_passes(logits: ReferenceLogits, case: LawCase, our_loop: Recorded) -> None:
    verdict = check_law(our_loop, logits, case, alpha=ALPHA, tv=TV)
    print(f"verispec.reference.decode: {verdict.detail} N={verdict.n} power={verdict.power:.4f}")
    assert verdict.power >= POWER
    assert verdict.passed, verdict.detail


def test_the_mutant_loop_without_bugs_passes(logits: ReferenceLogits, case: LawCase) -> None:
    verdict = check_law(LoopDecoder(logits, DRAFT, k=2), logits, case, alpha=ALPHA, tv=TV)
    assert verdict.passed, verdict.detail


@dataclass
class Recorded:
    """An engine whose samples are memoized by request: the same draws judged against two target
    laws (our forward and the engine's own logits) at the cost of one run."""

    engine: Any
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> Any:
        key = (tuple(prompt_ids), params, m, n, seed)
        if key not in self.memo:
            self.memo[key] = self.engine.sample(prompt_ids, params, m, n, seed)
        return self.memo[key]

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> Any:
        return self.engine.logits(prefix_ids, split_at)


# --- the engine's own logits ---------------------------------------------------------------------


def test_engine_logits_mode_our_loop_passes(case: LawCase, our_loop: Recorded) -> None:
    """The draws of :func:`test_our_decode_loop_passes` (the same engine, case and seed: the
    module's :func:`our_loop` records them), judged against the loop's own reported logits."""
    verdict = check_law(our_loop, EngineLogits(our_loop), case, alpha=ALPHA, tv=TV)
    print(f"reference.decode, engine-logits: {verdict.detail} N={verdict.n} power={verdict.power:.4f}")
    assert verdict.power >= POWER
    assert verdict.passed, verdict.detail


@dataclass(frozen=True)
class ScaledLogits:
    """A target of OTHER numerics: our logits times ``scale`` (as a model whose last layer differs)."""

    logits: ReferenceLogits
    scale: float

    def __call__(self, prefix: tuple[int, ...]) -> Any:
        return np.asarray(self.logits(prefix) * np.float32(self.scale), dtype=np.float32)

    def split_row(self, prefix: tuple[int, ...], split_at: int) -> Any:
        return np.asarray(self.logits.split_row(prefix, split_at) * np.float32(self.scale), dtype=np.float32)


def test_engine_of_other_numerics_fails_our_law_and_passes_its_own(logits: ReferenceLogits, case: LawCase) -> None:
    """A correct decode loop on a target whose logits are ours x 2: its law is TV >= 0.2 away from
    our forward's on our cells (computed exactly below, so rejecting it against our law is the power
    guarantee, not luck), and its own reported logits give the law it does follow."""
    other = ScaledLogits(logits, 2.0)
    ours_law = first_tokens_law(logits, case.prompt_ids, case.params, case.m, case.min_mass)
    rows = MemoLaw(other, case.params)
    theirs = np.array(
        [math.prod(float(rows.row(case.prompt_ids + c[:j])[c[j]]) for j in range(len(c))) for c in ours_law.cells]
    )
    theirs = np.append(theirs, 1.0 - math.fsum(theirs))  # the other law on our cells and tail
    distance = 0.5 * float(np.abs(theirs - ours_law.probs).sum())
    print(f"TV between the two laws on our cells: {distance:.3f}")
    assert distance >= TV
    engine = Recorded(LoopDecoder(other, DRAFT, 2))
    against_ours = check_law(engine, logits, case, alpha=ALPHA, tv=TV)
    against_own = check_law(engine, EngineLogits(engine), case, alpha=ALPHA, tv=TV)
    print(f"other numerics: ours {against_ours.detail}; own {against_own.detail}")
    assert not against_ours.passed
    assert against_own.passed, against_own.detail


# --- two-sample: speculation on vs off ------------------------------------------------------------


def test_homogeneity_statistic() -> None:
    """The 2 x C statistic on a table worked by hand: a = [30, 10], b = [10, 30]: pooled 20 each,
    chi2 = 4 * 10^2 / 20 = 20, df = 1."""
    test = homogeneity(np.array([30, 10]), np.array([10, 30]))
    assert test.statistic == pytest.approx(20.0, rel=1e-12) and test.df == 1


def test_two_sample_the_loop_without_bugs_passes(
    logits: ReferenceLogits, case: LawCase, plain_memo: dict[tuple[Any, ...], Any]
) -> None:
    """The mutant loop with no bug (reference.decode costs about 2x more per draw through its session:
    5,000 draws here, the law mode's test of it covers its law)."""
    engine = SharedPlain(LoopDecoder(logits, DRAFT, 2), plain_memo)
    verdict = check_two_sample(engine, case.prompt_ids, case.params, case.m, alpha=ALPHA, tv=TV)
    print(f"loop without bugs, two-sample: {verdict.detail} N={verdict.n}/arm power={verdict.power:.4f}")
    assert verdict.power >= POWER
    assert verdict.passed, verdict.detail


@dataclass
class SharedPlain:
    """A mutant whose plain decoding (k = 0) is memoized across the module: with no drafts none of
    the bug switches acts (no q, no bonus row, nothing to roll back, no drafted tokens), so every
    mutant's plain samples equal the bug-free loop's for the same seed; sharing them saves the
    recomputation, not a draw."""

    engine: LoopDecoder
    memo: dict[tuple[Any, ...], Any]

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> Any:
        return self.engine.sample(prompt_ids, params, m, n, seed)

    def sample_plain(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> Any:
        key = (tuple(prompt_ids), params, m, n, seed)
        if key not in self.memo:
            self.memo[key] = replace(self.engine, bugs=DecoderBugs()).sample_plain(prompt_ids, params, m, n, seed)
        return self.memo[key]


@pytest.fixture(scope="module")
def plain_memo() -> dict[tuple[Any, ...], Any]:
    return {}


@dataclass
class Pooled(SharedPlain):
    """A mutant whose speculative draws come from ONE stream per (prompt, params, m): ``sample(n,
    seed)`` returns the stream's first n draws whatever the seed, so the law-mode checks (our
    forward, the mutant's own logits) and the two-sample check of one mutant share their draws
    (the two-sample arm needs the most; the law mode's 1,000 come free). Valid: LoopDecoder's runs
    are independent decodes from one generator, so any n of the stream are n i.i.d. draws of the
    mutant's law, and each verdict stays a test of its own; that the three verdicts share draws
    does not matter here, since a mutant must fail every one."""

    draws: dict[tuple[Any, ...], list[list[int]]] = field(default_factory=dict)
    streams: dict[tuple[Any, ...], np.random.Generator] = field(default_factory=dict)

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> Any:
        key = (tuple(prompt_ids), params, m)
        stream = self.streams.setdefault(key, np.random.default_rng(20_261_130))
        pool = self.draws.setdefault(key, [])
        while len(pool) < n:
            pool.append(self.engine.first_tokens(prompt_ids, params, m, stream))
        return pool[:n]

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> Any:
        return self.engine.logits(prefix_ids, split_at)


@pytest.mark.parametrize("name", sorted(MUTANT_BUGS))
def test_every_mutant_decoder_is_rejected(
    name: str, logits: ReferenceLogits, case: LawCase, plain_memo: dict[tuple[Any, ...], Any]
) -> None:
    """Against our forward, against the mutant's own reported (correct) logits, and two-sample
    (its speculation on vs off), on one pool of draws (:class:`Pooled`)."""
    engine = Pooled(LoopDecoder(logits, DRAFT, 2, MUTANT_BUGS[name][1]), plain_memo)
    for target in (logits, EngineLogits(engine)):
        verdict = check_law(engine, target, case, alpha=ALPHA, tv=TV)
        print(f"{name} ({target.source}): {verdict.detail}")
        assert not verdict.passed, f"{name} ({MUTANT_BUGS[name][0]}) passed against {target.source}: {verdict.detail}"
    verdict = check_two_sample(engine, case.prompt_ids, case.params, case.m, alpha=ALPHA, tv=TV)
    print(f"{name}, two-sample: {verdict.detail}")
    assert not verdict.passed, f"{name} ({MUTANT_BUGS[name][0]}) passed two-sample: {verdict.detail}"


# --- end of generation within the first m tokens ----------------------------------------------------

EOG_BIAS = 10.0  # a logit bias on <|im_end|> (id 2): EOG gets real probability at the second token


@pytest.fixture(scope="module")
def eog_case(case: LawCase, smollm2_tokenizer: Any, logits: ReferenceLogits) -> LawCase:
    eog = frozenset(smollm2_tokenizer.eog_ids)
    params = replace(PARAMS, logit_bias={2: EOG_BIAS})
    eog_case = LawCase(case.prompt_ids, params, 3, case.min_mass, eog)
    law = first_tokens_law(logits, eog_case.prompt_ids, params, 3, eog_case.min_mass, eog)
    short = sum(float(p) for c, p in zip(law.cells, law.probs) if len(c) < 3)
    print(f"mass of cells ending at EOG before 3 tokens: {short:.3f}")
    assert 2 in eog and short >= 0.1, "the case must give early EOG real probability"
    return eog_case


def test_our_loop_ending_at_eog_passes(logits: ReferenceLogits, eog_case: LawCase, smollm2_tokenizer: Any) -> None:
    verdict = check_law(ReferenceDecoder(logits, smollm2_tokenizer, DRAFT, k=2), logits, eog_case, alpha=ALPHA, tv=TV)
    print(f"reference.decode, early EOG: {verdict.detail}")
    assert verdict.passed, verdict.detail


def test_a_loop_running_past_eog_is_rejected(
    logits: ReferenceLogits, eog_case: LawCase, smollm2_tokenizer: Any
) -> None:
    name, bugs = EOG_MUTANT
    engine = LoopDecoder(logits, DRAFT, 2, bugs, eog=eog_case.eog)
    verdict = check_law(engine, logits, eog_case, alpha=ALPHA, tv=TV)
    print(f"{name}: {verdict.detail}")
    assert not verdict.passed and verdict.impossible > 0, verdict.detail


def test_greedy_mode(logits: ReferenceLogits, smollm2_tokenizer: Any) -> None:
    prompt = tuple(smollm2_tokenizer.encode(PROMPT))
    ours = check_greedy(ReferenceDecoder(logits, smollm2_tokenizer, DRAFT, k=2), logits, prompt, 8)
    assert ours.passed and ours.divergence is None, ours.detail()
    broken = LoopDecoder(logits, DRAFT, 2, MUTANT_BUGS["rows_without_drafted_history"][1])
    verdict = check_greedy(broken, logits, prompt, 8)
    print(verdict.detail())
    assert verdict.divergence is not None and not verdict.passed, verdict.detail()
    # the engine's own logits and batch-shape noise (through its logits op), named in the verdict
    own = check_greedy(broken, EngineLogits(broken), prompt, 8)
    print(own.detail())
    assert own.noise_source == EngineLogits.source and own.divergence == verdict.divergence and not own.passed
    assert own.margin == verdict.margin  # the mutant reports our forward's rows: the same margin


@pytest.fixture(scope="module")
def hf_target(smollm2_path: Any) -> Any:
    """SmolLM2 loaded by transformers from the GGUF once for the transformers tests (the load is
    most of their cost). Loaded under :func:`tests.support.hf_oracle.memoized_gguf`: gguf-py's
    name map and metadata parse built once per load instead of ~400 and 2 times (the same tensors
    and config, so the same model; about three quarters of the load's CPU saved)."""
    from examples.transformers_decoder import load_target
    from tests.support.hf_oracle import memoized_gguf

    with memoized_gguf():
        return load_target(smollm2_path)


@pytest.mark.slow
@pytest.mark.oracle
def test_transformers_prompt_lookup_greedy(
    smollm2_path: Any, hf_target: Any, logits: ReferenceLogits, smollm2_tokenizer: Any
) -> None:
    """examples/transformers_decoder.py: transformers' prompt lookup, greedy, against its own plain
    greedy (the law mode needs ~1,000 generate() calls: minutes per prompt on a busy 2-core CPU,
    so it is run by hand: see docs/checking-decoders.md)."""
    from examples.transformers_decoder import TransformersLookupDecoder

    engine = TransformersLookupDecoder(smollm2_path, model=hf_target)
    verdict = check_greedy(engine, logits, tuple(smollm2_tokenizer.encode(PROMPT)), 8)
    print(f"transformers prompt lookup, greedy: {verdict.detail()}")
    assert verdict.passed, verdict.detail()


@pytest.mark.slow
@pytest.mark.oracle
def test_transformers_assistant_greedy(smollm2_path: Any, hf_target: Any, smollm2_tokenizer: Any) -> None:
    """examples/transformers_decoder.py: assisted generation with a same-vocabulary assistant built
    from the GGUF (the target's first six layers), greedy, against its own plain greedy; a
    divergence is judged with transformers' OWN logits and batch-shape noise."""
    from examples.transformers_decoder import ASSISTANT_LAYERS, TransformersLookupDecoder

    engine = TransformersLookupDecoder(smollm2_path, assistant_layers=ASSISTANT_LAYERS, model=hf_target)
    verdict = check_greedy(engine, EngineLogits(engine), tuple(smollm2_tokenizer.encode(PROMPT)), 8)
    print(f"transformers assistant, greedy: {verdict.detail()}")
    assert verdict.passed, verdict.detail()
    own = EngineLogits(engine)  # the adapter's logits op at both batch shapes
    prompt = tuple(smollm2_tokenizer.encode(PROMPT))
    noise = own.batch_shape_noise(prompt + tuple(verdict.plain[:2]), len(prompt))
    print(f"transformers' own batch-shape noise after 2 generated tokens: {noise:.3g}")
    assert np.isfinite(noise) and noise >= 0.0


def _llama_cpp_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _llama_cpp_importable(), reason="llama-cpp-python not installed (the optional `llama` extra)")
def test_llama_cpp_prompt_lookup_greedy(smollm2_path: Any, smollm2_tokenizer: Any) -> None:
    """examples/llama_cpp_decoder.py: llama.cpp's prompt lookup decoding at temperature 0 against its
    own plain greedy output, the margin and batch-shape noise llama.cpp's OWN (its logits_all rows).
    Kept cheap for `make test` (the bench's "repetitive" prompt, 16 tokens: prompt lookup's drafts
    are accepted there); the five bench prompts at 48 tokens took ~13 min at load ~14 and are run by
    hand (docs/checking-decoders.md: `check-decoder --engine examples.llama_cpp_decoder:prompt_lookup --greedy`)."""
    from examples.llama_cpp_decoder import prompt_lookup
    from verispec.bench.options import PROMPTS

    engine = prompt_lookup(smollm2_path)
    own = EngineLogits(engine)
    tok = smollm2_tokenizer
    prompt = tuple(tok.encode(dict(PROMPTS)["repetitive"], add_bos=tok.add_bos, parse_special=True))
    verdict = check_greedy(engine, own, prompt, 16)
    print(f"llama.cpp prompt lookup, repetitive: {verdict.detail()}")
    assert verdict.passed, verdict.detail()
    noise = own.batch_shape_noise(prompt + (verdict.plain[0],), len(prompt))  # llama.cpp's own, finite
    assert np.isfinite(noise) and noise >= 0.0


# --- the wire form of the engine ops (a stub program; no model) ------------------------------------

STUB_ENGINE = r"""
import json, sys
offer_logits = sys.argv[1] == "logits"
for line in sys.stdin:
    req = json.loads(line)
    op, inp = req["op"], req["input"]
    if op in ("sample", "sample_plain"):
        out = {"output": {"samples": [[5, 6] if op == "sample" else [5, 7]] * inp["n"]}}
    elif op == "logits" and offer_logits:
        row = [0.0, 1.0, 2.0] if inp["split_at"] is None else [0.0, 1.0, 2.0 + 0.25 * inp["split_at"]]
        out = {"output": {"logits": row if len(inp["prefix_ids"]) < 9 else [0.0, "NaN", 1.0]}}
    else:
        out = {"unsupported": op}
    print(json.dumps({"id": req["id"], **out}), flush=True)
"""


def test_command_engine_speaks_the_engine_ops(tmp_path: Any) -> None:
    """sample / sample_plain / logits through the JSON-lines transport; an engine without the
    logits op is seen as not reporting logits; a non-finite row is rejected with a typed error."""
    import sys

    from verispec.spec.decoder.check import CommandEngine, reports_logits
    from verispec.spec.external import ExternalError

    stub = tmp_path / "engine.py"
    stub.write_text(STUB_ENGINE)
    with_logits = CommandEngine(f"{sys.executable} {stub} logits", timeout=30)
    without = CommandEngine(f"{sys.executable} {stub} none", timeout=30)
    try:
        assert with_logits.sample([1], PARAMS, 2, 3, 0) == [[5, 6]] * 3
        assert with_logits.sample_plain([1], PARAMS, 2, 2, 0) == [[5, 7]] * 2
        assert reports_logits(with_logits) and not reports_logits(without)
        own = EngineLogits(with_logits)
        assert list(own((1, 2))) == [0.0, 1.0, 2.0]
        assert own.batch_shape_noise((1, 2, 3), prompt_length=1) == 0.5  # splits at 1 and 2: the larger
        with pytest.raises(ExternalError, match="not all finite"):
            own(tuple(range(9)))
    finally:
        with_logits.close()
        without.close()


# --- the law memo's shortcuts change no result (no model) ------------------------------------------


def test_cached_law_draws_are_samples_bit_for_bit() -> None:
    """CachedLaw.draw on a memo row keeps the row's running sum; each draw is the id
    reference.sampling.sample gives for the same generator state, on dense rows, rows with zeros
    (top-k), and a row whose total is subnormal (the largest-positive-id fallback); a row the memo
    did not return goes to sample itself."""
    from verispec.reference.sampling import sample
    from verispec.spec.decoder.first_tokens import CachedLaw

    law = CachedLaw()
    rng = np.random.default_rng(7)
    rows = [law(rng.normal(size=64).astype(np.float32), [1, 2], p) for p in (PARAMS, DRAFT, SamplingParams())]
    tiny = np.zeros(8)
    tiny[[2, 5]] = 5e-324  # a subnormal total: u * total can round up to the total
    law._cumulative[id(tiny)] = (tiny, None)  # as if the memo had returned it
    for row in [*rows, tiny, np.array([0.0, 0.25, 0.0, 0.75])]:
        ours, theirs = np.random.default_rng(3), np.random.default_rng(3)
        assert [law.draw(row, ours) for _ in range(500)] == [sample(row, theirs) for _ in range(500)]
        assert ours.random() == theirs.random()  # one uniform a draw, as sample
    with pytest.raises(Exception, match="finite"):
        law.draw(np.array([0.5, np.nan]), np.random.default_rng(0))


def test_cached_law_keys_a_row_by_its_content() -> None:
    """A read-only row owning its bytes is hashed once (its identity then stands for its content);
    a writeable row changed in place, a copy, and a new row at a dead row's address each get the
    law of their own content."""
    from verispec.reference.sampling import target_distribution
    from verispec.spec.decoder.first_tokens import CachedLaw

    law = CachedLaw()
    rng = np.random.default_rng(11)
    for _ in range(3):
        fixed = rng.normal(size=32).astype(np.float32)
        fixed.setflags(write=False)
        first = law(fixed, [4], PARAMS)
        assert law(fixed, [4], PARAMS) is first and law(fixed.copy(), [4], PARAMS) is first
        np.testing.assert_array_equal(first, target_distribution(fixed, [4], PARAMS))
        del fixed  # its address may be reused by the next row: its entry is gone with it
        assert not law._digests
    writeable = rng.normal(size=32).astype(np.float32)
    before = law(writeable, [4], PARAMS)
    writeable[:] = writeable[::-1]
    np.testing.assert_array_equal(law(writeable, [4], PARAMS), target_distribution(writeable, [4], PARAMS))
    assert not np.array_equal(law(writeable, [4], PARAMS), before)
