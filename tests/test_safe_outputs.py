"""Every output path the CLI writes goes through one safe writer (:func:`verispec.atomic.output_file`,
used by :func:`verispec.atomic.replace_file`): a path that exists must be a regular file. A FIFO, a
device node or (unless asked) a symlink is refused with a usage error naming it, and left exactly as
it was; the JUnit XML is a side output written after the report, whose failure costs one stderr line.

A FIFO stands in for every non-regular file (it is ours, in tmp_path, and harmless); ``/dev/null`` is
only ever ``lstat``-ed here, with every way of opening a file made to fail, so no test writes it.
"""

from __future__ import annotations

import builtins
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from verispec import cli
from verispec.atomic import OutputError, output_file, replace_file

REFERENCE = "verispec.reference.speculative"
QUICK_CHECK = ["check", "--verifier", f"{REFERENCE}:verify_sampled", "--only", "vectors_sampled", "contract", "--json"]


def _fifo(tmp_path: Path, name: str = "pipe") -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _is_fifo(path: Path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_a_fifo_is_refused_and_left_a_fifo(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    with pytest.raises(OutputError, match=r"pipe is a FIFO \(named pipe\), not a regular file"):
        with replace_file(fifo) as fh:
            fh.write(b"data")
    assert _is_fifo(fifo) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file either


def test_dev_null_is_refused_without_being_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the checker opened {args[0]!r}")

    monkeypatch.setattr(os, "open", never)
    monkeypatch.setattr(builtins, "open", never)
    with pytest.raises(OutputError, match="/dev/null is a character device, not a regular file"):
        output_file(Path("/dev/null"))


def test_a_symlink_is_refused_unless_following_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real.xml"
    real.write_bytes(b"old")
    link = tmp_path / "link.xml"
    link.symlink_to(real)
    with pytest.raises(OutputError, match="link.xml is a symbolic link.*VERISPEC_FOLLOW_SYMLINKS=1"):
        with replace_file(link) as fh:
            fh.write(b"new")
    assert link.is_symlink() and real.read_bytes() == b"old"
    monkeypatch.setenv("VERISPEC_FOLLOW_SYMLINKS", "1")
    with replace_file(link) as fh:
        fh.write(b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"  # the link stays a link; its file is replaced


def test_a_followed_symlink_to_a_fifo_is_still_refused(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(OutputError, match="is a FIFO"):
        output_file(link, follow_symlinks=True)
    assert _is_fifo(fifo)


def test_a_path_replaced_by_a_fifo_during_the_write_is_not_clobbered(tmp_path: Path) -> None:
    target = tmp_path / "out.npy"
    with pytest.raises(OutputError, match="is a FIFO"):
        with replace_file(target) as fh:
            fh.write(b"data")
            os.mkfifo(target)  # appeared while the run was writing: checked again before the rename
    assert _is_fifo(target) and sorted(p.name for p in tmp_path.iterdir()) == ["out.npy"]


def test_check_refuses_a_fifo_junit_path_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = _fifo(tmp_path)
    assert cli.main([*QUICK_CHECK, "--junit-xml", str(fifo)]) == 2
    captured = capsys.readouterr()
    assert f"{fifo} is a FIFO" in captured.err and captured.out == ""
    assert _is_fifo(fifo)


def test_logits_refuses_a_fifo_and_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = _fifo(tmp_path)
    link = tmp_path / "link.npy"
    link.symlink_to(tmp_path / "elsewhere.npy")
    for path, reason in ((fifo, "is a FIFO"), (link, "is a symbolic link")):
        assert cli.main(["logits", "--model", "/nonexistent.gguf", "--prompt", "x", "--out", str(path)]) == 2
        assert reason in capsys.readouterr().err
    assert _is_fifo(fifo) and link.is_symlink() and not (tmp_path / "elsewhere.npy").exists()


def test_a_draft_cache_symlink_is_refused_before_generation(tmp_path: Path) -> None:
    from verispec.reference.errors import DraftError
    from verispec.reference.suffix_draft import SuffixCache

    link = tmp_path / "cache.bin"
    link.symlink_to(tmp_path / "real.bin")
    with pytest.raises(DraftError, match="is a symbolic link"):
        SuffixCache.check_writable(link)


def test_a_junit_file_that_fails_at_the_end_keeps_the_report_and_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the path passes the pre-check, then becomes a FIFO while the run draws
    path = tmp_path / "gate.xml"
    import verispec.api

    real_run = verispec.api.run  # what the command calls with its options

    def check_then_fifo(*args: Any, **kwargs: Any) -> Any:
        report = real_run(*args, **kwargs)
        os.mkfifo(path)
        return report

    monkeypatch.setattr(verispec.api, "run", check_then_fifo)
    assert cli.main([*QUICK_CHECK, "--junit-xml", str(path)]) == 0  # the verdict's status
    captured = capsys.readouterr()
    assert json.loads(captured.out)["exit_status"] == 0  # the whole JSON report is on stdout
    assert "the JUnit XML" in captured.err and "was not written" in captured.err and "is a FIFO" in captured.err
    assert _is_fifo(path)


@pytest.mark.parametrize("failure", ["folder removed", "became a FIFO"])
def test_a_decoder_junit_file_that_fails_at_the_end_keeps_the_report_and_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """check-decoder: the JUnit path passes the check before the run, then its folder is removed
    (or the path becomes a FIFO) while the run decodes: the verdict and the whole JSON report are on
    stdout, one stderr line says the XML was not written, and the exit status is the verdict's."""
    import shutil

    import verispec.decoder.api
    from tests.support.synthetic import Variant, write_synthetic

    model = tmp_path / "tiny.gguf"
    write_synthetic(
        model,
        Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48),
        quant_types=("F16",),
    )
    folder = tmp_path / "artifacts"
    folder.mkdir()
    path = folder / "gate.xml"
    real_run = verispec.decoder.api.run  # what the command calls with its options

    def check_then_break(*args: Any, **kwargs: Any) -> Any:
        report = real_run(*args, **kwargs)
        if failure == "folder removed":
            shutil.rmtree(folder)
        else:
            os.mkfifo(path)
        return report

    monkeypatch.setattr(verispec.decoder.api, "run", check_then_break)
    argv = ["check-decoder", "--model", str(model), "--prompt", "the model", "--ours", "--greedy"]
    assert cli.main([*argv, "--max-tokens", "4", "--json", "--junit-xml", str(path)]) == 0  # the verdict's status
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # the whole JSON report is on stdout
    assert report["passed"] and report["exit_status"] == 0
    assert "the JUnit XML" in captured.err and "was not written (the verdict above stands)" in captured.err
    assert not folder.exists() if failure == "folder removed" else _is_fifo(path)


def test_vectors_refuses_the_current_folder_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    for out in (".", "..", "sub/.."):
        assert cli.main(["vectors", "--out", out, "--count", "1", "--force"]) == 2
        assert "is the current folder or holds it" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]  # no ..old-* or ..tmp-* folder
    assert [p.name for p in tmp_path.parent.iterdir() if ".old-" in p.name or ".tmp-" in p.name] == []
