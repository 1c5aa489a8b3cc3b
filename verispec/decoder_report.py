"""What ``verispec check-decoder`` found: one outcome per prompt, and the run's verdict.

The typed counterpart of :class:`verispec.spec.check.CheckReport` for whole decoders. Its JSON is
what ``verispec check-decoder --json`` prints: ``{"passed", "model", "seconds", "results": [...]}``,
each result ``{"prompt", "mode", "passed", "detail", "seconds", ...}`` plus the mode's numbers
(law modes: n, alpha, power, tv; greedy: margin, noise, noise_source, divergence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EXIT_PASSED, EXIT_FAILED = 0, 1  # as `verispec check` (2: a usage error, verispec/cli.py)

Json = dict[str, Any]


@dataclass(frozen=True)
class PromptOutcome:
    """One prompt through the decoder: its mode, verdict, what was seen, its own time."""

    prompt: str
    mode: str  # "greedy", "two-sample", "law (<where the target law comes from>)" or "malformed" (a bad answer)
    passed: bool
    detail: str
    seconds: float
    numbers: Json = field(default_factory=dict)  # the mode's own numbers (see the module docstring)

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
        head = f"{'PASS' if self.passed else 'FAIL'}  {self.prompt!r}: {self.detail}"
        if self.mode in ("greedy", "malformed"):
            return head
        per_arm = "/arm" if self.mode == "two-sample" else ""
        n = self.numbers
        return f"{head}  N={n['n']}{per_arm} alpha={n['alpha']:.2g} power={n['power']:.4f} vs TV>={n['tv']}"


@dataclass
class DecoderReport:
    """Every prompt's outcome for one decoder on one model."""

    model: str
    results: list[PromptOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[PromptOutcome]:
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
        """Every prompt passed, and at least one ran."""
        return bool(self.results) and not self.failed

    @property
    def exit_status(self) -> int:
        return EXIT_PASSED if self.passed else EXIT_FAILED

    def verdict(self) -> str:
        return "PASSED" if self.passed else ("FAILED" if self.results else "NOTHING RAN")

    def summary(self) -> str:
        """The failing prompts' lines, then the verdict (what an assertion message needs)."""
        lines = [r.line() for r in self.failed]
        return "\n".join([*lines, f"{self.verdict()}  ({len(self.results)} prompts, {self.seconds:.1f}s, {self.model})"])

    def as_json(self) -> Json:
        return {
            "passed": self.passed,
            "exit_status": self.exit_status,
            "model": self.model,
            "seconds": round(self.seconds, 3),
            "results": [r.as_json() for r in self.results],
        }
