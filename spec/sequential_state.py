"""The three outcomes of a sequential test with a budget, and their exit statuses.

A depth test (:mod:`spec.decoder.depth.law`, :mod:`spec.decoder.depth.two_sample`) ends ``passed``
after its final look, ``failed`` at the first look that rejects (or on a structural failure), or
``inconclusive`` when its budget ends first; the exit statuses are ``check``'s: 0, 1 and 3.
"""

from __future__ import annotations

from typing import Literal

State = Literal["passed", "failed", "inconclusive"]
EXIT_STATUS: dict[str, int] = {"passed": 0, "failed": 1, "inconclusive": 3}
LABEL: dict[str, str] = {"passed": "PASS", "failed": "FAIL", "inconclusive": "INCONCLUSIVE"}


class StateVerdict:
    """``passed`` and ``exit_status`` of a verdict that has a ``state`` (a dataclass field)."""

    state: State

    @property
    def passed(self) -> bool:
        return self.state == "passed"

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.state]
