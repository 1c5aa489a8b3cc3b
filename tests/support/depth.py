"""The depth test's tiny case and its decode loop, shared by the depth tests
(tests/test_decoder_depth*.py, tests/test_decoder_forcing.py) and the lab's measurements of them
(lab/measure/): the tiny synthetic model, the sampling params, :func:`case`, :class:`Loop` (a
:class:`~spec.decoder.mutants.LoopDecoder` as a generation engine) and :func:`run_mutant`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiny_gguf import one_layer_model
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.law import DepthCase, check_depth, reference_rows
from verispec.spec.decoder.first_tokens import CachedLaw
from verispec.spec.decoder.mutants import DEPTH_MUTANTS, DecoderBugs, LoopDecoder
from verispec.spec.decoder.prefix_rows import PathRows
from verispec.spec.statistics import ALPHA_BUDGET

EOG = 2
BANNED = {t: -math.inf for t in range(40, 48)}
# processors on: top-k, min-p, a ban and a penalty window (a pipeline bug then often emits a token
# the target cannot: caught outright)
WITH_PROCESSORS = SamplingParams(
    temperature=1.0, top_k=12, min_p=0.02, repeat_penalty=1.5, repeat_last_n=32, logit_bias={EOG: 1.0, **BANNED}
)
# full support: every token possible, so only the statistics can catch a bug
FULL_SUPPORT = SamplingParams(temperature=1.0, repeat_penalty=1.5, repeat_last_n=32, logit_bias={EOG: 1.0, 7: 2.0})
DRAFT = SamplingParams(temperature=1.5, top_k=12)
PROMPT = (1, 5, 9, 13)
MAX_TOKENS = 24
MIN_TOKENS = 6
PASS_ALPHA = ALPHA_BUDGET["decoder_depth"] / 4  # a quarter each: three here, one in tests/test_decoder_depth_ties.py
PRODUCT_ALPHA = 1e-3


def tiny_depth_model(path: Path) -> Model:
    """The depth test's model: vocab 64, one layer, 32 wide (written to ``path``, then loaded)."""
    return one_layer_model(path, n_vocab=64)


def case(params: SamplingParams) -> DepthCase:
    return DepthCase(PROMPT, params, MAX_TOKENS, frozenset({EOG}), MIN_TOKENS)


@dataclass
class Loop:
    """A LoopDecoder as a GenerationEngine, its memos fresh per call (bounded memory)."""

    model: Model
    bugs: DecoderBugs = DecoderBugs()
    draft: SamplingParams = DRAFT
    verify: str = "rejection"
    logprobs: bool = False  # pass the loop's reported logprobs on (else the statistics alone judge)

    def positioned(self, ids: tuple[int, ...], positions: Sequence[int]) -> Any:
        return self.model.forward(list(ids), self.model.new_cache(len(ids)), positions=list(positions)).logits[-1]

    def loop(self) -> LoopDecoder:
        return LoopDecoder(
            PathRows(self.model),
            self.draft,
            2,
            self.bugs,
            eog=frozenset({EOG}),
            law=CachedLaw(),
            verify=self.verify,
            positioned=self.positioned,
        )

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[dict[str, Any]]:
        out = self.loop().generate(prompt_ids, params, max_tokens, n, seed, min_tokens)
        return out if self.logprobs else [{k: v for k, v in g.items() if k != "logprobs"} for g in out]

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[dict[str, Any]]:
        return self.loop().generate_plain(prompt_ids, params, max_tokens, n, seed, min_tokens)


def run_mutant(model: Model, name: str, params: SamplingParams, logprobs: bool = False) -> Any:
    """The mutant against the product's design; the EOS-at-max_tokens one with a cap of 8 tokens
    (its bug needs an EOG inside a span that crosses the cap: a short cap makes that common, and
    the cap is where it shows, wherever it is); the top-k/top-p order one with top-p 0.8 on."""
    engine = Loop(model, DEPTH_MUTANTS[name][1], logprobs=logprobs or name == "logprobs_zero_when_speculating")
    if name == "top_k_top_p_in_the_other_order":  # its bug needs both filters on
        params = replace(params, top_p=0.8)
    the_case = (
        case(params) if name != "eos_in_span_at_max_tokens" else replace(case(params), max_tokens=8, min_tokens=0)
    )
    return check_depth(engine, reference_rows(model), the_case, alpha=PRODUCT_ALPHA, pilot=16, block=20)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    """The tiny depth model, written once per test module (a pytest fixture: import it by name)."""
    return tiny_depth_model(tmp_path_factory.mktemp("depth") / "tiny.gguf")


# the correct decoders the depth tests pass: Loop's fields for each
CORRECT: dict[str, dict[str, Any]] = {
    "the loop without bugs": {},
    "greedy draft, one-hot q": {"draft": SamplingParams(temperature=0.0)},
    "sample-and-match verification": {"verify": "match"},
}
