"""`verispec check-decoder` on SmolLM2: our decoders pass, every mutant decoder is rejected.

The target law of the first m = 3 tokens after a prompt comes from the reference forward
(memoized by prefix, so the whole module costs a few dozen forwards); each decoder is sampled N
times, N from the power analysis: any deviation of total variation >= TV = 0.2 on the cell law
(sequences of probability >= 0.01, plus a tail cell) is detected with probability >= 0.99.
alpha: the "check_decoder" line of spec.statistics.ALPHA_BUDGET, split over the two decoders that
must pass. The mutants must fail; each moves the law by more than TV (their chi-square p-values
are printed), so a pass of a mutant is a miss of the test, not bad luck at rate alpha.

Sampling params: temperature 1, top-k 4, repeat penalty 1.5 for the target; the draft (the same
model) samples at temperature 2, top-k 4, so drafts are often rejected and repairs, bonus tokens,
rollbacks and penalties all shape the law; k = 2 drafts per cycle, m = 3.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference.sampling import SamplingParams
from spec.decoder_check import LawCase, ReferenceDecoder, ReferenceLogits, check_greedy, check_law
from spec.decoder_mutants import MUTANT_BUGS, LoopDecoder
from spec.statistics import ALPHA_BUDGET, POWER

pytestmark = pytest.mark.model

TV = 0.2
ALPHA = ALPHA_BUDGET["check_decoder"] / 2
PARAMS = SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5)
DRAFT = SamplingParams(temperature=2.0, top_k=4)
PROMPT = "The cat sat on the"


@pytest.fixture(scope="module")
def logits(smollm2_model: Any) -> ReferenceLogits:
    return ReferenceLogits(smollm2_model)


@pytest.fixture(scope="module")
def case(smollm2_tokenizer: Any) -> LawCase:
    return LawCase(tuple(smollm2_tokenizer.encode(PROMPT)), PARAMS, m=3)


def test_our_decode_loop_passes(logits: ReferenceLogits, case: LawCase, smollm2_tokenizer: Any) -> None:
    verdict = check_law(ReferenceDecoder(logits, smollm2_tokenizer, DRAFT, k=2), logits, case, alpha=ALPHA, tv=TV)
    print(f"reference.decode: {verdict.detail} N={verdict.n} power={verdict.power:.4f}")
    assert verdict.power >= POWER
    assert verdict.passed, verdict.detail


def test_the_mutant_loop_without_bugs_passes(logits: ReferenceLogits, case: LawCase) -> None:
    verdict = check_law(LoopDecoder(logits, DRAFT, k=2), logits, case, alpha=ALPHA, tv=TV)
    assert verdict.passed, verdict.detail


@pytest.mark.parametrize("name", sorted(MUTANT_BUGS))
def test_every_mutant_decoder_is_rejected(name: str, logits: ReferenceLogits, case: LawCase) -> None:
    verdict = check_law(LoopDecoder(logits, DRAFT, 2, MUTANT_BUGS[name][1]), logits, case, alpha=ALPHA, tv=TV)
    print(f"{name}: {verdict.detail}")
    assert not verdict.passed, f"{name} ({MUTANT_BUGS[name][0]}) passed: {verdict.detail}"


def test_greedy_mode(logits: ReferenceLogits, smollm2_tokenizer: Any) -> None:
    prompt = tuple(smollm2_tokenizer.encode(PROMPT))
    ours = check_greedy(ReferenceDecoder(logits, smollm2_tokenizer, DRAFT, k=2), logits, prompt, 8)
    assert ours.passed and ours.divergence is None, ours.detail()
    broken = LoopDecoder(logits, DRAFT, 2, MUTANT_BUGS["rows_without_drafted_history"][1])
    verdict = check_greedy(broken, logits, prompt, 8)
    print(verdict.detail())
    assert verdict.divergence is not None and not verdict.passed, verdict.detail()


@pytest.mark.slow
@pytest.mark.oracle
def test_transformers_prompt_lookup_greedy(smollm2_path: Any, logits: ReferenceLogits, smollm2_tokenizer: Any) -> None:
    """examples/transformers_decoder.py: transformers' prompt lookup, greedy, against its own plain
    greedy (the law mode needs ~1,000 generate() calls: minutes per prompt on a busy 2-core CPU,
    so it is run by hand: see README)."""
    from examples.transformers_decoder import prompt_lookup

    engine = prompt_lookup(smollm2_path)
    verdict = check_greedy(engine, logits, tuple(smollm2_tokenizer.encode(PROMPT)), 8)
    print(f"transformers prompt lookup, greedy: {verdict.detail()}")
    assert verdict.passed, verdict.detail()
