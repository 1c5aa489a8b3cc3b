"""Speculative decoding on the real models means plain decoding.

Greedy: for every draft source, on the golden prompts of both models, the speculative output is
plain greedy's token for token. A difference is tolerated only at a near-tie, where batched and
single-row matmuls may legitimately round the other way; it is printed and counted, and the
comparison stops there. Any other difference fails. Near-tie is derived, not picked: two float32
evaluations of a logit differ by at most its tolerance t (tests/support/tolerances.py, 2 lambda sigma), so
two runs can order the top two tokens differently only if their margin is < t1 + t2 in each run,
and a third evaluation (the check's fresh pass) sees a margin < 2 (t1 + t2).

Sampling (temperature 0.8, top-p 0.95): the law of the first two emitted tokens with speculation
equals the law without it, P(t1, t2) = p(t1 | prompt) p(t2 | prompt t1), computed exactly from
the model's logits through THE target law. Chi-square over the most likely pairs plus a tail bin
(spec.statistics.chi_square; cells expected < 5 pooled). The target's logits are memoized by token
prefix (:class:`spec.decoder.check.MemoTargetModel`, a TargetModel), and the law by (prefix, params), so tens of
thousands of speculative runs cost a handful of forwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.conftest import GOLDEN_KEYS
from tests.support.equivalence import SAMPLED, compare, first_two_tokens_law, near_ties
from tests.support.shared_decodes import memo_target, plain_greedy
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import DraftSource, ModelDraft, make_draft, parse_draft_spec
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer
from verispec.spec.statistics import ALPHA_BUDGET, chi_square, power_of, required_sample_size

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

GREEDY = SamplingParams(temperature=0.0)
SMOLLM2_TOKENS = 10  # new tokens per golden prompt (reference forwards cost ~0.1-0.3 s each)
GEMMA3_TOKENS = 8
K = 4


def draft_specs(model_path: Path, exit_layer: int) -> list[str]:
    return ["auto", "ngram", f"layerskip:{exit_layer}", "self", f"model:{model_path}"]  # auto: the default


def run_greedy(
    model: Model, tokenizer: Tokenizer, path: Path, exit_layer: int, prompts: list[dict[str, Any]], n: int, name: str
) -> None:
    totals: dict[str, list[int]] = {}
    drafts = {spec: make_draft(parse_draft_spec(spec), model, tokenizer) for spec in draft_specs(path, exit_layer)}
    for entry in prompts:
        prompt = tuple(int(t) for t in entry["prompt_ids"])
        request = GenerationRequest(prompt, GREEDY, max_tokens=n)
        plain = plain_greedy(model, tokenizer, prompt, n)  # shared with tests/test_tree_decode.py
        for spec, draft in drafts.items():
            result = speculative_generate(model, tokenizer, request, draft, SpeculativeOptions(k=K))
            compare(model, prompt, plain, result.generation.ids, f"{name} {spec} {entry['prompt']!r}")
            acc = totals.setdefault(spec.split(":")[0], [0, 0, 0])
            acc[0] += sum(len(c.drafted) for c in result.cycles)
            acc[1] += sum(c.accepted for c in result.cycles)
            acc[2] += len(result.cycles)
    for spec, (drafted, accepted, passes) in totals.items():
        print(f"{name} {spec}: alpha {accepted / max(1, drafted):.3f} ({accepted}/{drafted}), {passes} target passes")
    if near_ties:
        print(f"near-ties tolerated: {len(near_ties)}: " + "; ".join(near_ties))


@pytest.mark.model
def test_greedy_equivalence_smollm2(
    smollm2_model: Model, smollm2_tokenizer: Tokenizer, smollm2_path: Path, golden: dict[str, Any]
) -> None:
    prompts = golden["models"][GOLDEN_KEYS["smollm2-135m"]]["greedy"]
    run_greedy(smollm2_model, smollm2_tokenizer, smollm2_path, 22, prompts, SMOLLM2_TOKENS, "smollm2")


@pytest.mark.model
def test_greedy_equivalence_gemma3(
    gemma3_model: Model, gemma3_tokenizer: Tokenizer, gemma3_path: Path, golden: dict[str, Any]
) -> None:
    tokenizer = gemma3_tokenizer
    prompts = golden["models"][GOLDEN_KEYS["gemma3-270m"]]["greedy"]
    short = [e for e in prompts if e["prompt"] == "The capital of France is"]
    assert short, "golden prompt missing"
    run_greedy(gemma3_model, tokenizer, gemma3_path, gemma3_model.config.n_layer // 2, short, GEMMA3_TOKENS, "gemma3")


# -- the sampling law ------------------------------------------------------------------------------


DRAFT = SamplingParams(temperature=5.0, top_k=3)  # far from p: half the drafts are rejected, repairs matter


PROMPT = "The history of the printing press begins"
# Statistical budget: N runs, alpha for this test, and the worst-case power against ANY bias of
# total variation >= TV (spec.statistics.power_of). ALPHA is this test's share of the suite's false-
# alarm budget (spec/statistics.py ALPHA_BUDGET["decode_first_two_tokens"]).
ALPHA = ALPHA_BUDGET["decode_first_two_tokens"]
TV = 0.05
N_CELLS = 12  # most likely (t1, t2) pairs; the rest is one tail cell (df = N_CELLS before pooling)
N = required_sample_size(N_CELLS, ALPHA, TV)  # power >= 0.99 against any TV bias >= 0.05


@pytest.mark.model
def test_first_two_tokens_law(smollm2_model: Model, smollm2_tokenizer: Tokenizer, golden: dict[str, Any]) -> None:
    entry = next(e for e in golden["models"][GOLDEN_KEYS["smollm2-135m"]]["greedy"] if e["prompt"] == PROMPT)
    prompt = tuple(int(t) for t in entry["prompt_ids"])
    target, law = memo_target(smollm2_model)  # the memo tests/test_tree_decode.py's law test reads too

    exact, pairs, probs = first_two_tokens_law(target, law, prompt, N_CELLS)  # the exact law without speculation
    index = {pair: i for i, pair in enumerate(pairs)}

    drafts: list[DraftSource] = [ModelDraft(target, "model", params=DRAFT)]
    for draft in drafts:
        counts = np.zeros(len(pairs) + 1, dtype=np.int64)
        rng = np.random.default_rng(20251129)
        kinds = {"bonus": 0, "repair": 0, "plain": 0}
        for _ in range(N):
            request = GenerationRequest(prompt, SAMPLED, max_tokens=2, seed=int(rng.integers(2**63)))
            result = speculative_generate(target, smollm2_tokenizer, request, draft, SpeculativeOptions(k=1), law=law)
            ids = result.generation.ids
            assert len(ids) == 2 and (ids[0], ids[1]) in exact, f"impossible pair {ids}"
            counts[index.get((ids[0], ids[1]), len(pairs))] += 1
            kinds[result.cycles[0].kind] += 1
        test = chi_square(counts, probs)
        power = power_of(N, test.df, ALPHA, TV)
        print(
            f"{draft.name}: N={N} chi2={test.statistic:.2f} df={test.df} p={test.p_value:.4f} alpha={ALPHA} "
            f"power={power:.3f} vs TV>={TV}; first cycles {kinds}; target forwards {target.forwards}"
        )
        assert kinds["repair"] > N // 50 and kinds["bonus"] > N // 50, f"the draft law is not exercised: {kinds}"
        assert test.passed(ALPHA), f"{draft.name}: law of the first two tokens differs (p={test.p_value:.2e})"
