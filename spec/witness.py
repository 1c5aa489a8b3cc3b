"""The speculative decoding station: serve a toy target with a draft, and show the evidence.

A deterministic toy target law p over V tokens (the same at every position) and a draft law q
that agrees with it by A: q = A * p + (1 - A) * r with r another law (p's weights reversed),
both rounded to multiples of 2^-20 so the float rows the verifier sees ARE the exact rows. The
station serves N speculative steps with the reference verifier and records what happened:
accepted prefixes, first rejections, repairs, bonuses, target and draft passes. Then it compares:

- speed: the predicted speedup (1 - a^{k+1}) / ((1 - a)(kC + 1)), a = sum_x min(p(x), q(x)) the
  acceptance rate and C the draft's cost per pass relative to the target's, beside the measured
  toy speedup (tokens emitted per unit of cost, a plain target pass costing 1);
- correctness: the EXACT total-variation distance between the law of the first m emitted tokens
  of this decoder (Fractions, :mod:`spec.exact`) and the target law p^m, and a chi-square test of
  all emitted tokens against p.

With verification and repair on (the protocol), the exact TV is 0. ``verify=False`` (accept every
draft) or ``repair=False`` (a rejection emits nothing and the next step drafts again) falsify it.

It lives in spec/ (not reference/) because it is a demonstration of the spec: it needs exact laws
and a chi-square test, and reference/ must not depend on spec/.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from verispec.reference.errors import WitnessError as WitnessError
from verispec.reference.sampling import inverse_cdf, inverse_cdf_draws
from verispec.reference.speculative import verify_sampled
from verispec.spec import exact
from verispec.spec.statistics import ALPHA_BUDGET, ChiSquare, chi_square, counts_of

ROW_BITS = 20  # toy rows are multiples of 2^-20: exact in float64
LAW_TOKENS = 2  # the exact law is computed for the first m = 2 emitted tokens
MAX_VOCAB = 64
MAX_K = 16
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class WitnessConfig:
    """Settings of one witness run (the CLI flags)."""

    vocab: int = 8
    agreement: float = 0.8
    k: int = 4
    draft_cost: float = 0.1
    steps: int = 2000
    seed: int = 0
    verify: bool = True
    repair: bool = True
    show: int = 5  # steps whose evidence is printed

    def validate(self) -> None:
        """Raise :class:`WitnessError` naming the first bad setting."""
        if not 2 <= self.vocab <= MAX_VOCAB:
            raise WitnessError(f"--vocab must be an integer in [2, {MAX_VOCAB}], got {self.vocab}")
        if not (math.isfinite(self.agreement) and 0.0 <= self.agreement <= 1.0):
            raise WitnessError(f"--agreement must be in [0, 1], got {self.agreement}")
        if not 1 <= self.k <= MAX_K:
            raise WitnessError(f"--k must be an integer in [1, {MAX_K}], got {self.k}")
        if not (math.isfinite(self.draft_cost) and self.draft_cost >= 0.0):
            raise WitnessError(f"--draft-cost must be a finite number >= 0, got {self.draft_cost}")
        if not 1 <= self.steps <= MAX_STEPS:
            raise WitnessError(f"--steps must be an integer in [1, {MAX_STEPS}], got {self.steps}")
        if self.seed < 0:
            raise WitnessError(f"--seed must be an integer >= 0, got {self.seed}")
        if self.show < 0:
            raise WitnessError(f"--show must be an integer >= 0, got {self.show}")

    @property
    def mode(self) -> str:
        """``protocol``, ``no-repair`` or ``no-verify`` (no-verify makes repair moot)."""
        if not self.verify:
            return "no-verify"
        return "protocol" if self.repair else "no-repair"


# -----------------------------------------------------------------------------------------------
# the toy laws


def _dyadic(weights: Sequence[Fraction]) -> tuple[Fraction, ...]:
    """Round a law to multiples of 2^-ROW_BITS summing to 1 (largest remainder)."""
    scale = 2**ROW_BITS
    total = sum(weights, Fraction(0))
    scaled = [w / total * scale for w in weights]
    counts = [math.floor(s) for s in scaled]
    order = sorted(range(len(weights)), key=lambda i: (-(scaled[i] - counts[i]), i))
    for i in order[: scale - sum(counts)]:
        counts[i] += 1
    return tuple(Fraction(c, scale) for c in counts)


def toy_laws(vocab: int, agreement: float, seed: int) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """(p, q): a Zipf-like target over a seeded permutation of the ids, and the draft
    q = A p + (1 - A) r, r being p's weights in reverse order. Both dyadic (exact in float64)."""
    order = np.random.default_rng(seed).permutation(vocab)
    zipf = [Fraction(1, rank + 1) for rank in range(vocab)]
    p_weights = [Fraction(0)] * vocab
    r_weights = [Fraction(0)] * vocab
    for rank, token in enumerate(order):
        p_weights[int(token)] = zipf[rank]
        r_weights[int(token)] = zipf[vocab - 1 - rank]
    p = _dyadic(p_weights)
    r = _dyadic(r_weights)
    a = Fraction(str(agreement))
    q = _dyadic([a * pi + (1 - a) * ri for pi, ri in zip(p, r)])
    return p, q


def acceptance_rate(p: Sequence[Fraction], q: Sequence[Fraction]) -> Fraction:
    """alpha = sum_x min(p(x), q(x)): the probability that one draft is accepted."""
    return sum((min(a, b) for a, b in zip(p, q)), Fraction(0))


def predicted_speedup(alpha: float, k: int, draft_cost: float) -> float:
    """(1 - alpha^{k+1}) / ((1 - alpha)(kC + 1)); (k + 1) / (kC + 1) at alpha = 1."""
    tokens_per_step = float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
    return tokens_per_step / (k * draft_cost + 1.0)


# -----------------------------------------------------------------------------------------------
# exact law of the first m tokens, per mode


def step_law(p: Sequence[Fraction], q: Sequence[Fraction], k: int, m: int, mode: str) -> exact.Law:
    """Law of one step's emission, truncated to its first m tokens (rows the same at every
    position). ``protocol``: accepted drafts then a repair or bonus; ``no-repair``: a rejection
    emits only the accepted drafts (possibly nothing); ``no-verify``: all k drafts and a bonus."""
    vocab = len(p)
    overlap = [min(a, b) for a, b in zip(p, q)]  # P(draft = x and accepted)
    beta = sum(overlap, Fraction(0))
    repair = exact.repair_law(tuple(p), tuple(q))
    keep = overlap if mode != "no-verify" else list(q)
    reject = Fraction(0) if mode == "no-verify" else 1 - beta
    law: exact.Law = {}
    prefixes: dict[exact.Outcome, Fraction] = {(): Fraction(1)}
    for accepted in range(min(k, m) + 1):
        for prefix, mass in prefixes.items():
            if accepted == m:  # m drafts accepted: whatever follows is past the window
                exact.add_to(law, prefix, mass)
                continue
            if accepted == k:
                for token in range(vocab):
                    exact.add_to(law, prefix + (token,), mass * p[token])
                continue
            if mode == "protocol":
                for token in range(vocab):
                    exact.add_to(law, prefix + (token,), mass * reject * repair[token])
            elif mode == "no-repair":
                exact.add_to(law, prefix, mass * reject)
        prefixes = {prefix + (x,): mass * keep[x] for prefix, mass in prefixes.items() for x in range(vocab) if keep[x]}
    return law


def emitted_law(p: Sequence[Fraction], q: Sequence[Fraction], k: int, mode: str, m: int = LAW_TOKENS) -> exact.Law:
    """Exact law of the first m tokens the decoder emits."""
    law = step_law(p, q, k, m, mode)
    return exact.first_tokens_law(lambda _prefix: law, m)


# -----------------------------------------------------------------------------------------------
# serving


@dataclass
class StepEvidence:
    """What one step did."""

    step: int
    drafts: list[int]
    uniforms: list[float]
    accepted: int
    kind: str  # repair | bonus | dropped (no-repair rejection) | unverified
    token: int | None
    emitted: list[int]
    rejected: int | None = None  # the first rejected draft
    p_x: float | None = None
    q_x: float | None = None


@dataclass
class WitnessReport:
    """Everything the station measured and computed."""

    config: WitnessConfig
    p: list[float]
    q: list[float]
    alpha: float
    evidence: list[StepEvidence]
    target_passes: int
    draft_passes: int
    tokens: int
    accepted_drafts: int
    repairs: int
    bonuses: int
    dropped: int
    predicted_speedup: float
    measured_speedup: float
    tv_exact: Fraction
    law_tokens: int
    chi: ChiSquare
    chi_alpha: float = field(default_factory=lambda: ALPHA_BUDGET["witness_chi_square"])

    @property
    def holds(self) -> bool:
        """The invariant: the exact TV between the emitted law and the target is 0."""
        return self.tv_exact == 0

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (exact TV also as a fraction string)."""
        return {
            "config": asdict(self.config) | {"mode": self.config.mode},
            "p": self.p,
            "q": self.q,
            "acceptance_rate": self.alpha,
            "steps_shown": [asdict(e) for e in self.evidence],
            "totals": {
                "steps": self.config.steps,
                "target_passes": self.target_passes,
                "draft_passes": self.draft_passes,
                "tokens": self.tokens,
                "tokens_per_target_pass": self.tokens / self.target_passes,
                "accepted_drafts": self.accepted_drafts,
                "repairs": self.repairs,
                "bonuses": self.bonuses,
                "dropped_steps": self.dropped,
            },
            "speedup": {"predicted": self.predicted_speedup, "measured": self.measured_speedup},
            "invariant": {
                "holds": self.holds,
                "law_tokens": self.law_tokens,
                "tv_exact": str(self.tv_exact),
                "tv": float(self.tv_exact),
                "chi_square": {
                    "statistic": self.chi.statistic,
                    "df": self.chi.df,
                    "p_value": self.chi.p_value,
                    "n": self.chi.n,
                    "impossible": self.chi.impossible,
                    "alpha": self.chi_alpha,
                    "consistent": self.chi.passed(self.chi_alpha),
                },
            },
        }


def run_witness(config: WitnessConfig) -> WitnessReport:
    """Serve ``config.steps`` steps and compute the evidence (deterministic for a seed)."""
    config.validate()
    p_exact, q_exact = toy_laws(config.vocab, config.agreement, config.seed)
    p = np.array([float(v) for v in p_exact])  # exact: dyadic
    q = np.array([float(v) for v in q_exact])
    k, vocab = config.k, config.vocab
    p_rows, q_rows = np.tile(p, (k + 1, 1)), np.tile(q, (k, 1))
    rng = np.random.default_rng([config.seed, 1])

    evidence: list[StepEvidence] = []
    stream: list[int] = []
    accepted_total = repairs = bonuses = dropped = 0
    for step in range(config.steps):
        drafts = [int(x) for x in inverse_cdf_draws(q, rng.random(k))]
        uniforms = rng.random(k + 1).tolist()
        kind: str
        if config.verify:
            verdict = verify_sampled(p_rows, q_rows, drafts, uniforms)
            accepted, token, kind = verdict.accepted, verdict.token, str(verdict.kind)
        else:  # accept everything, then the bonus
            accepted, kind = k, "unverified"
            token = inverse_cdf(p, uniforms[k])
        emitted = drafts[:accepted] + [token]
        if kind == "repair" and not config.repair:
            emitted, kind, dropped = drafts[:accepted], "dropped", dropped + 1
        repairs += kind == "repair"
        bonuses += kind in ("bonus", "unverified")
        accepted_total += accepted
        stream.extend(emitted)
        if step < config.show:
            rejected = drafts[accepted] if accepted < k else None
            evidence.append(
                StepEvidence(
                    step + 1,
                    drafts,
                    [round(u, 6) for u in uniforms],
                    accepted,
                    kind,
                    None if kind == "dropped" else token,
                    emitted,
                    rejected,
                    None if rejected is None else float(p[rejected]),
                    None if rejected is None else float(q[rejected]),
                )
            )
    alpha = float(acceptance_rate(p_exact, q_exact)) if config.verify else 1.0
    tokens = len(stream)
    cost = config.steps * (1.0 + k * config.draft_cost)
    tv = exact.total_variation(emitted_law(p_exact, q_exact, k, config.mode), exact.product_law([p_exact] * LAW_TOKENS))
    counts = counts_of(np.asarray(stream, dtype=np.int64), vocab)
    return WitnessReport(
        config=config,
        p=p.tolist(),
        q=q.tolist(),
        alpha=float(acceptance_rate(p_exact, q_exact)),
        evidence=evidence,
        target_passes=config.steps,
        draft_passes=config.steps * k,
        tokens=tokens,
        accepted_drafts=accepted_total,
        repairs=repairs,
        bonuses=bonuses,
        dropped=dropped,
        predicted_speedup=predicted_speedup(alpha, k, config.draft_cost),
        measured_speedup=tokens / cost,
        tv_exact=tv,
        law_tokens=LAW_TOKENS,
        chi=chi_square(counts, p),
    )


def format_report(report: WitnessReport) -> str:
    """The human-readable evidence."""
    c = report.config
    lines = [
        f"speculative decoding station: V={c.vocab} k={c.k} agreement A={c.agreement:g} draft cost C={c.draft_cost:g} "
        f"steps={c.steps} seed={c.seed} mode={c.mode} (verify {'on' if c.verify else 'OFF'}, repair {'on' if c.repair else 'OFF'})",
        "target p = [" + ", ".join(f"{v:.4f}" for v in report.p) + "]",
        "draft  q = [" + ", ".join(f"{v:.4f}" for v in report.q) + "]",
        f"acceptance rate alpha = sum_x min(p(x), q(x)) = {report.alpha:.4f}",
        "",
    ]
    for e in report.evidence:
        head = f"step {e.step}: drafts {e.drafts}"
        if e.kind in ("bonus", "unverified"):
            how = "accepted unverified" if e.kind == "unverified" else "all accepted"
            lines.append(f"{head}; {how} {e.drafts}; bonus {e.token} from p (u={e.uniforms[-1]:.4f})")
            continue
        u = e.uniforms[e.accepted]
        test = f"u={u:.4f} * q={e.q_x:.4f} >= p={e.p_x:.4f}"
        prefix = f"accepted {e.accepted} {e.drafts[: e.accepted]}; first rejection: draft {e.rejected} at position {e.accepted + 1} ({test})"
        if e.kind == "dropped":
            lines.append(f"{head}; {prefix}; NO repair: step emits {e.emitted}")
        else:
            lines.append(f"{head}; {prefix}; repair {e.token} from the residual (p - q)+ (u={e.uniforms[-1]:.4f})")
    chi = report.chi
    consistent = chi.passed(report.chi_alpha)
    lines += [
        "",
        f"totals: target passes {report.target_passes}, draft passes {report.draft_passes}, tokens {report.tokens}, "
        f"tokens per target pass {report.tokens / report.target_passes:.3f}",
        f"        accepted drafts {report.accepted_drafts}, repairs {report.repairs}, bonuses {report.bonuses}"
        + (f", steps that emitted no repair {report.dropped}" if report.dropped else ""),
        f"speedup (a target pass costs 1, a draft pass C): predicted (1-a^(k+1))/((1-a)(kC+1)) = {report.predicted_speedup:.3f}"
        f" with a = {report.alpha if c.verify else 1.0:.4f}; measured {report.measured_speedup:.3f}",
        f"invariant: exact TV(law of the first {report.law_tokens} emitted tokens, target p^{report.law_tokens}) = "
        f"{float(report.tv_exact):.6g}"
        + (
            " (exactly 0)"
            if report.holds
            else f" (= {report.tv_exact})"
            if report.tv_exact.denominator < 10**12
            else ""
        ),
        f"           chi-square of {chi.n} emitted tokens against p: chi2={chi.statistic:.2f} df={chi.df} p={chi.p_value:.3g} "
        f"(alpha {report.chi_alpha:g}: {'consistent' if consistent else 'INCONSISTENT'})",
        "verdict: "
        + (
            "HOLDS - the emitted law is the target's"
            if report.holds
            else "FALSIFIED - the emitted law is not the target's"
        ),
    ]
    return "\n".join(lines)
