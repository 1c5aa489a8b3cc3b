"""What ``verispec check-decoder`` found: one outcome per prompt, and the run's verdict.

The typed counterpart of :class:`verispec.spec.check.CheckReport` for whole decoders. Its JSON is
what ``verispec check-decoder --json`` prints: ``{"passed", "model", "seconds", "results": [...]}``,
each result ``{"prompt", "mode", "passed", "detail", "seconds", ...}`` plus the mode's numbers
(law modes: n, alpha, power, tv; greedy: margin, noise, noise_source, divergence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EXIT_PASSED, EXIT_FAILED, EXIT_INCONCLUSIVE = 0, 1, 3  # as `verispec check` (verispec/exit_codes.py)

Json = dict[str, Any]


@dataclass(frozen=True)
class PromptOutcome:
    """One prompt through the decoder: its mode, verdict, what was seen, its own time."""

    prompt: str
    mode: str  # "greedy", "two-sample", "depth", "two-sample depth", "law (<where the target law comes from>)" or "malformed" (a bad answer)
    passed: bool
    detail: str
    seconds: float
    numbers: Json = field(default_factory=dict)  # the mode's own numbers (see the module docstring)
    inconclusive: bool = False  # the depth test's budget ended before its power (and nothing failed)

    def as_json(self) -> Json:
        return {
            "prompt": self.prompt,
            "mode": self.mode,
            "passed": self.passed,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            **self.numbers,
        }

    def line(self) -> str:
        """One line for humans: PASS/FAIL, the prompt, what was seen, N / alpha / power for a law."""
        word = "PASS" if self.passed else "INCONCLUSIVE" if self.inconclusive else "FAIL"
        head = f"{word}  {self.prompt!r}: {self.detail}"
        if self.mode in (
            "greedy",
            "malformed",
            "depth",
            "two-sample depth",
            "batch",
        ):  # depth: its numbers are in the detail
            return head
        per_arm = "/arm" if self.mode == "two-sample" else ""
        n = self.numbers
        return f"{head}  N={n['n']}{per_arm} alpha={n['alpha']:.2g} power={n['power']:.4f} vs TV>={n['tv']}"


# What each mode's verdict speaks for, and what it cannot see (docs/checking-decoders.md, Limits).
REACH = {
    "depth": "sees the law of every token emitted over whole generations (power against a tempering of the "
    "stated TV on the stated fraction of positions); cannot see a deviation that keeps every per-context PIT "
    "and log score, or prompts not tested",
    "two-sample depth": "sees position-binned features of whole generations, speculation on against off; "
    "cannot see the law given the prefix, or a bug that moves plain decoding the same way",
    "two-sample": "sees the first m tokens' law, speculation on against off; cannot see later tokens, or a bug "
    "that moves plain decoding the same way",
    "greedy": "sees speculative greedy output equal to plain greedy on these prompts; cannot see the sampled law",
    "law": "sees the first m tokens' law (deviations of at least the stated TV); cannot see later tokens",
}


@dataclass
class DecoderReport:
    """Every prompt's outcome for one decoder on one model."""

    model: str
    results: list[PromptOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[PromptOutcome]:
        return [r for r in self.results if not r.passed and not r.inconclusive]

    @property
    def inconclusive(self) -> list[PromptOutcome]:
        return [r for r in self.results if r.inconclusive]

    @property
    def passed(self) -> bool:
        """Every prompt passed, and at least one ran."""
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def exit_status(self) -> int:
        """0 passed, 1 a prompt failed (or nothing ran), 3 inconclusive (a budget ended short of power)."""
        if self.failed or not self.results:
            return EXIT_FAILED
        return EXIT_INCONCLUSIVE if self.inconclusive else EXIT_PASSED

    def verdict(self) -> str:
        if not self.results:
            return "NOTHING RAN"
        return {EXIT_PASSED: "PASSED", EXIT_FAILED: "FAILED", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}[self.exit_status]

    def summary(self) -> str:
        """Every prompt's line (failing and undecided ones first; each states its design and power),
        what each mode run can and cannot see, then the verdict (what an assertion message needs)."""
        ordered = [r for r in self.results if not r.passed] + [r for r in self.results if r.passed]
        modes = dict.fromkeys(r.mode for r in self.results)
        reach = [f"{mode}: {REACH[mode]}" for mode in modes if mode in REACH]
        reach += [f"{mode}: {REACH['law']}" for mode in modes if mode.startswith("law")]
        verdict = f"{self.verdict()}  ({len(self.results)} prompts, {self.seconds:.1f}s, {self.model})"
        return "\n".join([*(r.line() for r in ordered), *reach, verdict])

    def as_json(self) -> Json:
        return {
            "passed": self.passed,
            "exit_status": self.exit_status,
            "model": self.model,
            "seconds": round(self.seconds, 3),
            "results": [r.as_json() for r in self.results],
        }
