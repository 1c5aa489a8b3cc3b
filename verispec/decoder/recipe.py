"""How a ``check-decoder --workers`` worker builds its engine: the recipe the checker hands it.

Its own module so that the checker (verispec/decoder/api.py) and the worker
(verispec/decoder/worker.py, which builds engines through the checker's ``build_engine``) both
import it without importing each other.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verispec.decoder.options import DecoderUnderTest


@dataclass(frozen=True)
class WorkerRecipe:
    """How a worker builds its engine (exactly one of ``engine``, ``ours``, ``mutant``)."""

    model: str
    engine: str | None = None
    ours: bool = False
    mutant: str | None = None
    draft_temperature: float = 2.0
    draft_top_k: int = 4
    k: int = 2
    cwd: str = ""  # the checker's folder: ``module:FACTORY`` may name a module there
    weights: str | None = None  # with ``ours``: the fast engine's decoder in this weights mode
    draft_kind: str | None = None  # with ``ours`` and ``weights``: that decoder's draft (None: auto)

    @staticmethod
    def of(subject: DecoderUnderTest, path: Path, cwd: str) -> WorkerRecipe:
        """The recipe of a Python decoder under test (an ``engine`` string, ``ours`` or a
        ``mutant``) on the model file ``path``, its modules found from ``cwd``."""
        engine = subject.engine if isinstance(subject.engine, str) else None
        return WorkerRecipe(
            str(path),
            engine,
            subject.ours,
            subject.mutant,
            cwd=cwd,
            weights=subject.weights,
            **asdict(subject.draft),  # draft_temperature, draft_top_k, k, draft_kind: the same names
        )

    def subject(self) -> DecoderUnderTest:
        """The decoder under test this recipe builds (checked as the checker's was)."""
        from verispec.decoder.options import DecoderUnderTest, DraftFlags

        draft = DraftFlags(
            draft_temperature=self.draft_temperature, draft_top_k=self.draft_top_k, k=self.k, draft_kind=self.draft_kind
        )
        return DecoderUnderTest(
            self.engine, ours=self.ours, mutant=self.mutant, model=self.model, weights=self.weights, draft=draft
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> WorkerRecipe:
        return WorkerRecipe(**json.loads(text))

    def command(self) -> str:
        """The shell command that starts a worker with this recipe (this interpreter)."""
        import shlex

        return f"exec {shlex.quote(sys.executable)} -m verispec.decoder.worker {shlex.quote(self.to_json())}"  # no shell between
