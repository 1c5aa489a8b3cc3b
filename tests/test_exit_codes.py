"""Exit statuses: 0 passed, 1 failed, 2 usage, 3 inconclusive, 4 model/input error, 130 interrupted.

The mapping lives once in verispec/exit_codes.py; these tests drive it through the CLI in process
(no models load: the inputs are broken before anything would). A failing shard exits 1 with
``"passed": false``; a verifier program that cannot start is a usage error, not "not lossless".
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from verispec import cli
from verispec.exit_codes import EPILOG, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_USAGE, exit_code_for
from verispec.reference.errors import ContextOverflow, GGUFError, ModelError, VerispecError
from verispec.reference.speculative import verify_sampled
from verispec.spec.check import CheckError
from verispec.spec.external import ExternalError, ProgramCannotStart
from verispec.spec.law_only import single_with_own_randomness, with_own_randomness
from verispec.spec.mutants import catalogue
from verispec.spec.report import ReportError
from verispec.spec.vectors.kinds import VectorError

_mutant = {m.name: m for m in catalogue()}["resample_from_target"]
broken_law = single_with_own_randomness(_mutant.verifier, 3)
broken_law_batch = with_own_randomness(_mutant.batch, 3)
law_reference = single_with_own_randomness(verify_sampled, 3)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (GGUFError("bad magic"), EXIT_INPUT),
        (ModelError("missing tensor"), EXIT_INPUT),
        (VectorError("bad manifest"), EXIT_INPUT),
        (ReportError("not JSON"), EXIT_INPUT),
        (FileNotFoundError("no such file"), EXIT_INPUT),
        (ContextOverflow("does not fit"), EXIT_USAGE),  # what was asked, not what was read
        (CheckError("unknown property"), EXIT_USAGE),
        (ProgramCannotStart("cannot start"), EXIT_USAGE),
        (ExternalError("protocol breach"), EXIT_FAILED),  # the program under test broke the protocol: a verdict
        (VerispecError("anything else"), EXIT_INPUT),  # the root's category: bad input
        (KeyboardInterrupt(), EXIT_INTERRUPTED),
    ],
)
def test_the_mapping(error: BaseException, status: int) -> None:
    assert exit_code_for(error) == status


@pytest.mark.parametrize("command", ["check", "check-decoder"])
def test_help_lists_the_exit_statuses(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert " ".join(EPILOG.split()) in text
    for code in ("0 passed", "1 failed", "2 usage error", "3 inconclusive", "4 model/input error", "130 interrupted"):
        assert code in text


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_program_that_cannot_start_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["check", "--verifier-cmd", str(tmp_path / "no-such-verifier"), "--count", "1", "--json"])
    assert status == EXIT_USAGE and "cannot start" in _one_line(capsys)


def test_input_errors_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "vectors"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json", encoding="utf-8")
    assert (
        cli.main(["check", "--verifier", "verispec.reference.speculative:verify_sampled", "--vectors", str(broken)])
        == EXIT_INPUT
    )
    assert "manifest.json" in _one_line(capsys)
    assert cli.main(["check", "--merge", str(tmp_path / "absent.json")]) == EXIT_INPUT
    assert "absent.json" in _one_line(capsys)
    gguf = tmp_path / "bad.gguf"
    gguf.write_bytes(b"GGUF" + struct.pack("<I", 1) + bytes(16))
    assert cli.main(["inspect", str(gguf)]) == EXIT_INPUT
    assert "version is 1" in _one_line(capsys)


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from verispec.commands import check

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(check, "run", interrupted)
    assert cli.main(["check", "--verifier", "x:y"]) == EXIT_INTERRUPTED
    assert "interrupted" in _one_line(capsys)


def test_a_failing_shard_exits_1_with_passed_false(capsys: pytest.CaptureFixture[str]) -> None:
    """The broken sampler's shard 2 of 8 rejects at its first own look (one block) and says so."""
    here = __name__
    status = cli.main(
        [
            "check",
            "--law-only",
            "--verifier",
            f"{here}:broken_law",
            "--batch-verifier",
            f"{here}:broken_law_batch",
            "--only",
            "stat_verdict_law_k1",
            "--count",
            "1",
            "--shard",
            "2/8",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert status == EXIT_FAILED == report["exit_status"] and report["passed"] is False
    assert report["failed"] == ["stat_verdict_law_k1"] and report["headline"].startswith("SHARD 2/8 FAILED")
