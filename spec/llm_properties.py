"""The LLM-scale properties of the spec (registered in :data:`spec.properties.PROPERTIES`).

- ``full_vocab_protocol`` / ``full_vocab_law``: the exact probes of :mod:`spec.full_vocab` on the
  LLM-shaped rows of :mod:`spec.llm_rows` (V = 9 .. 262,144, k up to 8, every edge shape) and on
  the stored real-model rows; two verdicts from one run of the probes (cached per verifier).
- ``stat_strata_tail_v4099`` / ``stat_strata_deep_k8`` / ``stat_strata_tail_v262144``: the
  stratified chi-square tests of :mod:`spec.strata`, N from the power analysis against their
  design TV (``STRATA_TV``; 0.1 at V = 262,144, for cost) at their alpha share.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from verispec.spec import full_vocab, strata
from verispec.spec.llm_rows import LlmCase, default_cases, real_cases
from verispec.spec.statistics import ALPHA_BUDGET, power_of, required_sample_size
from verispec.spec.subject import PropertyResult, Subject

MAX_REPORTED = 2


def gate_cases(seed: int) -> tuple[LlmCase, ...]:
    """Synthetic LLM-shaped cases, then the real-model ones."""
    return default_cases(seed) + real_cases(seed)


# one resumable run of the probes serves both verdicts: (verifier object, seed, verdicts so far)
_cache: list[tuple[object, int, full_vocab.Verdicts]] = []


def _verdicts(subject: Subject, verdict: str) -> full_vocab.Verdicts:
    """The probes' verdicts, run (or resumed) until ``verdict`` is decided or every case is done."""
    found = next((v for batch, seed, v in _cache if batch is subject.batch and seed == subject.seed), None)
    if found is None:
        found = full_vocab.Verdicts()
        _cache[:] = [(subject.batch, subject.seed, found)]  # keeps the object alive: its id is not reused
    return full_vocab.judge(subject.batch, gate_cases(subject.seed), subject.seed, verdict, found)


def _summary(found: list[str]) -> str:
    more = f" (+{len(found) - MAX_REPORTED} more)" if len(found) > MAX_REPORTED else ""
    return "; ".join(found[:MAX_REPORTED]) + more


def prop_full_vocab_protocol(subject: Subject) -> PropertyResult:
    """At every probe (cell boundaries and midpoints at full V), the verdict is the protocol's."""
    v = _verdicts(subject, "protocol")
    found = v.errors + v.protocol
    detail = _summary(found) if found else f"{v.probes} probes in {v.cases} cases (V up to 262,144) agree"
    return PropertyResult("full_vocab_protocol", not found, v.probes, 0.0, 1.0, detail)


def prop_full_vocab_law(subject: Subject) -> PropertyResult:
    """No probe proves the verdict law off the protocol's by more than float64 rounding."""
    v = _verdicts(subject, "law")
    found = v.errors + v.law
    if found:
        detail = _summary(found)
    else:
        judged = "" if not v.not_judged else f"; {len(v.not_judged)} non-monotone draws not judged (left to stat_*)"
        detail = f"{v.cases} cases: acceptance and CDF bounds within float rounding{judged}"
    return PropertyResult("full_vocab_law", not found, v.probes, 0.0, 1.0, detail)


def _stat_strata(name: str) -> Callable[[Subject], PropertyResult]:
    def prop(subject: Subject) -> PropertyResult:
        alpha = ALPHA_BUDGET[name]
        p, q = strata.rows_for(name)
        df = strata.design_df(p, q)
        tv = strata.design_tv(name)
        n = max(1000, int(math.ceil(required_sample_size(df, alpha, tv) * subject.scale)))
        test, _ = strata.run_test(subject.batch, name, n, subject.seed)
        power = power_of(n, df, alpha, tv)
        detail = (
            f"chi2={test.statistic:.1f} df={test.df} p={test.p_value:.3g} impossible={test.impossible} "
            f"pooled={test.pooled_cells} max|freq-prob|={test.max_abs_error:.2g} V={p.shape[1]} k={q.shape[0]} "
            f"power vs strata TV >= {tv}"
        )
        return PropertyResult(name, test.passed(alpha), n, alpha, power, detail, tv)

    prop.__name__ = name
    return prop


# deterministic ones run with the other deterministic properties, the statistical ones last
LLM_EXACT = (
    ("full_vocab_protocol", prop_full_vocab_protocol),
    ("full_vocab_law", prop_full_vocab_law),
)
LLM_STATISTICS = (
    ("stat_strata_tail_v4099", _stat_strata("stat_strata_tail_v4099")),
    ("stat_strata_deep_k8", _stat_strata("stat_strata_deep_k8")),
    ("stat_strata_tail_v262144", _stat_strata("stat_strata_tail_v262144")),
)
