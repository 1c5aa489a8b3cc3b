"""The pipeline with processors, exact: toy logits models and the law of their first tokens through
the subject's pipeline and verifier against the processed target law."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.reference.speculative import Probs2D
from verispec.spec import exact
from verispec.spec.pipeline import RowsRequest
from verispec.spec.properties.cases import property_result
from verispec.spec.properties.deterministic import implied_verdict_law
from verispec.spec.subject import PropertyResult, Subject


@dataclass(frozen=True)
class LogitsModel:
    """A toy autoregressive logits model: logits depend on the position and the last token."""

    table: npt.NDArray[np.float64]  # [positions, V + 1, V]; row V + 1 - 1 is "no last token"

    def __call__(self, prefix: exact.Outcome) -> npt.NDArray[np.float64]:
        positions, _, vocab = self.table.shape
        last = prefix[-1] if prefix else vocab
        return np.asarray(self.table[min(len(prefix), positions - 1), last], dtype=np.float64)


@dataclass(frozen=True)
class ProcessorScenario:
    """A toy decoding situation with processors: who samples how, from which context."""

    name: str
    target_params: SamplingParams
    draft_params: SamplingParams
    history: tuple[int, ...] = ()
    k: int = 2
    m: int = 2


PROCESSOR_SCENARIOS = (
    ProcessorScenario(
        "top_k_on_both", SamplingParams(temperature=0.9, top_k=2), SamplingParams(temperature=0.9, top_k=2)
    ),
    ProcessorScenario("greedy_draft", SamplingParams(temperature=1.0, top_p=0.9), SamplingParams(temperature=0.0)),
    ProcessorScenario(
        "processed_target",
        SamplingParams(temperature=0.7, top_k=3, min_p=0.05, logit_bias={0: -1.5}),
        SamplingParams(temperature=0.7, top_k=3, min_p=0.05, logit_bias={0: -1.5}),
    ),
    ProcessorScenario(
        "repeat_penalty_with_drafts",
        SamplingParams(temperature=1.0, repeat_penalty=3.0, repeat_last_n=-1),
        SamplingParams(temperature=1.0),
        history=(1,),
    ),
    ProcessorScenario("greedy_target", SamplingParams(temperature=0.0), SamplingParams(temperature=1.2)),
    ProcessorScenario(
        "top_p_min_p_draft_sampled_plain",
        SamplingParams(temperature=0.8, top_p=0.8, min_p=0.1),
        SamplingParams(temperature=1.0),
        k=1,
    ),
)


def pipeline_law(
    subject: Subject, scenario: ProcessorScenario, target: LogitsModel, draft: LogitsModel
) -> tuple[exact.Law, exact.Law, str]:
    """(law of the first m emitted tokens through the subject, processed target law, error)."""
    tp, dp, history = scenario.target_params, scenario.draft_params, scenario.history

    def law_of(model: LogitsModel, params: SamplingParams) -> exact.Model:
        def row(prefix: exact.Outcome) -> exact.Row:
            return exact.exact_row(target_distribution(model(prefix), list(history + prefix), params))

        return row

    true_target, true_draft = law_of(target, tp), law_of(draft, dp)
    errors: list[str] = []
    mode = subject.pipeline.mode(tp, dp)

    def rows_fn(prefix: exact.Outcome, drafts: exact.Outcome) -> tuple[list[exact.Row], list[exact.Row]]:
        k = len(drafts)
        t_logits = np.stack([target(prefix + drafts[:i]) for i in range(k + 1)])
        d_logits = np.stack([draft(prefix + drafts[:i]) for i in range(k)])
        request = RowsRequest(
            target_logits=t_logits,
            draft_logits=d_logits,
            history=tuple(history) + tuple(prefix),
            drafts=tuple(drafts),
            target_params=tp,
            draft_params=dp,
        )
        p, q = subject.pipeline.rows(request)
        return _fraction_rows(p), _fraction_rows(q)

    def rule(p_rows: Sequence[exact.Row], q_rows: Sequence[exact.Row], drafts: exact.Outcome) -> exact.VerdictLaw:
        if mode == "greedy":
            return exact.greedy_verdict_law(p_rows, q_rows, drafts)
        implied = implied_verdict_law(subject.batch, _float_rows(p_rows), _float_rows(q_rows), drafts)
        if implied.errors:
            errors.append(implied.errors[0])
            return {(len(drafts), 0, "bonus"): Fraction(1)}
        return implied.law

    def step(prefix: exact.Outcome) -> exact.Law:
        return exact.speculative_step_law(true_target, true_draft, scenario.k, prefix, rows=rows_fn, rule=rule)

    got = exact.first_tokens_law(step, scenario.m)
    want = exact.target_sequence_law(true_target, scenario.m)
    return got, want, (errors[0] if errors else "")


def _fraction_rows(rows: npt.ArrayLike) -> list[exact.Row]:
    """Float rows as exact Fractions, NOT renormalized (the verifier sees the floats)."""
    return [exact.exact_row(row, normalize=False) for row in np.asarray(rows, dtype=np.float64)]


def _float_rows(rows: Sequence[exact.Row]) -> Probs2D:
    """Back to float64: exact, since the Fractions came from floats."""
    return np.array([[float(v) for v in row] for row in rows], dtype=np.float64)


PIPELINE_TOLERANCE = Fraction(1, 10**9)  # float rows sum to 1 only up to rounding


def prop_pipeline_processors(subject: Subject) -> PropertyResult:
    """Processors: the law through the pipeline equals the processed target law (TV <= 1e-9)."""
    rng = subject.rng("pipeline_processors")
    vocab = 4
    failures: list[str] = []
    for scenario in PROCESSOR_SCENARIOS:
        target = LogitsModel(rng.normal(0.0, 1.5, size=(3, vocab + 1, vocab)))
        draft = LogitsModel(target.table + rng.normal(0.0, 1.0, size=target.table.shape))
        try:
            got, want, error = pipeline_law(subject, scenario, target, draft)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{scenario.name}: raised {type(exc).__name__}: {exc}")
            continue
        if error:
            failures.append(f"{scenario.name}: {error}")
            continue
        tv = exact.total_variation(got, want)
        if tv > PIPELINE_TOLERANCE:
            failures.append(
                f"{scenario.name}: law of the first {scenario.m} tokens is off the processed target by TV {float(tv):.6g}"
            )
    return property_result("pipeline_processors", failures, len(PROCESSOR_SCENARIOS))
