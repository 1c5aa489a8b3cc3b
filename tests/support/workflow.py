"""The shipped GitHub Actions workflow, read as data (PyYAML) so a test can check its shape and
RUN its commands (tests/test_installed_wheel.py): the commands live in the template only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml  # type: ignore[import-untyped]

_EXPRESSION = re.compile(r"\$\{\{\s*([\w.]+)\s*\}\}")


@dataclass(frozen=True)
class Workflow:
    data: dict[str, Any]

    @classmethod
    def parse(cls, text: str) -> Workflow:
        data = yaml.safe_load(text)
        assert isinstance(data, dict) and "jobs" in data, "not a GitHub Actions workflow"
        return cls(data)

    @property
    def env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.data.get("env", {}).items()}

    def job(self, name: str) -> dict[str, Any]:
        job: dict[str, Any] = self.data["jobs"][name]
        return job

    def steps(self, job: str) -> list[dict[str, Any]]:
        return list(self.job(job)["steps"])

    def matrix(self, job: str, key: str) -> list[Any]:
        return list(self.job(job)["strategy"]["matrix"][key])

    def run_line(self, job: str, step: str) -> str:
        (line,) = [s["run"] for s in self.steps(job) if s.get("name") == step]
        return str(line).strip()


def expand(line: str, values: dict[str, str]) -> str:
    """``${{ matrix.shard }}`` and friends replaced by ``values`` (KeyError for one not given)."""
    return _EXPRESSION.sub(lambda match: values[match.group(1)], line)
