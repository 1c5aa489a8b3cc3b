"""`verispec vectors --out DIR` is all or nothing (verispec/atomic.py): a whole new set or the old
one, never a part; a non-empty DIR needs --force; bad targets are one-line errors (exit 2)."""

from __future__ import annotations

import pathlib
from pathlib import Path
from typing import Any

import pytest

from verispec.atomic import OutputError, replace_directory
from verispec.cli import main
from verispec.spec.vectors import read_vectors

COUNT = ["--count", "1"]


def write(out: Path, *flags: str) -> int:
    return main(["vectors", "--out", str(out), *COUNT, *flags])


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("verispec: error: ") and err.count("\n") == 1, err
    return err


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_a_fresh_folder_gets_the_whole_set(tmp_path: Path) -> None:
    out = tmp_path / "vectors"
    assert write(out) == 0
    assert read_vectors(out).count == 1  # the manifest and every sha256 check out
    assert leftovers(tmp_path) == []


def test_an_empty_folder_is_filled_without_force(tmp_path: Path) -> None:
    out = tmp_path / "vectors"
    out.mkdir()
    assert write(out) == 0
    assert (out / "manifest.json").is_file()


def test_a_non_empty_folder_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vectors"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert write(out) == 2
    assert "--force" in one_line_error(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert write(out, "--force") == 0
    assert not (out / "mine.txt").exists() and (out / "manifest.json").is_file()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("case", ["file", "missing_parent", "parent_is_file", "bad_count", "bad_seed"])
def test_impossible_targets_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    flags: list[str] = []
    if case == "file":
        out = tmp_path / "taken"
        out.write_text("x")
    elif case == "missing_parent":
        out = tmp_path / "no" / "such" / "vectors"
    elif case == "parent_is_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "vectors"
    else:
        out = tmp_path / "vectors"
        flags = ["--count", "-1"] if case == "bad_count" else ["--seed", "-1"]
    assert main(["vectors", "--out", str(out), *COUNT, *flags]) == 2
    one_line_error(capsys)
    assert not (tmp_path / "vectors").exists()


def _kill_after_first_file(monkeypatch: pytest.MonkeyPatch, signal: type[BaseException]) -> None:
    """The writer dies after its first file (a simulated kill: an exception mid-write)."""
    real = pathlib.Path.write_bytes
    written: list[Path] = []

    def write_bytes(self: Path, data: Any) -> int:
        if written:
            raise signal("killed mid-write")
        written.append(self)
        return real(self, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)


@pytest.mark.parametrize("signal", [KeyboardInterrupt, OSError])
def test_a_kill_mid_write_leaves_the_old_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signal: type[BaseException]
) -> None:
    out = tmp_path / "vectors"
    assert main(["vectors", "--out", str(out), "--count", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _kill_after_first_file(monkeypatch, signal)
    capsys.readouterr()
    # Ctrl-C: exit 130 (verispec/cli.py); an OSError (disk full): a one-line error, exit 2
    assert write(out, "--force") == (130 if signal is KeyboardInterrupt else 2)
    one_line_error(capsys) if signal is OSError else None
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old set, whole
    assert leftovers(tmp_path) == []  # and no staging folder


def test_a_kill_mid_write_leaves_no_partial_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _kill_after_first_file(monkeypatch, KeyboardInterrupt)
    assert write(tmp_path / "vectors") == 130
    assert list(tmp_path.iterdir()) == []


def test_replace_directory_refuses_before_the_block_runs(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("x")
    ran = []
    with pytest.raises(OutputError, match="not a folder"):
        with replace_directory(tmp_path / "x", force=True):
            ran.append(True)
    assert ran == []
