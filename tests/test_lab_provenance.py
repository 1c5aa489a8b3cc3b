"""lab.provenance: the commit a saved measurement ran at, marked when the tree differs from it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab import provenance


def test_the_commit_is_head_and_marked_when_tracked_files_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {("rev-parse", "--short", "HEAD"): "abc1234", ("rev-parse", "HEAD"): "abc1234" + "0" * 33}
    status = {"text": ""}

    def fake_git(*args: str) -> str:
        if args[0] == "status":
            assert args[-1] == ":(top,exclude)lab/measurements"  # saved measurements are data, not code
            return status["text"]
        return answers[args]

    monkeypatch.setattr(provenance, "git", fake_git)
    assert provenance.commit() == "abc1234"
    assert provenance.commit(full=True) == "abc1234" + "0" * 33
    status["text"] = " M engine/model.py"
    assert provenance.commit() == "abc1234" + provenance.UNCOMMITTED


def test_outside_a_checkout_the_commit_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "git", lambda *args: "")
    assert provenance.commit() == "unknown"


def test_git_reads_this_checkout() -> None:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=root).stdout.strip()
    assert provenance.git("rev-parse", "HEAD") == head
    assert provenance.commit(full=True).startswith(head)
