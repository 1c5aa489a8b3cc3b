"""Ctrl-C: one line on stderr, exit status 130, nothing half-written (verispec/cli.py main).

A real SIGINT to a real process: `verispec vectors` with a count that takes minutes, interrupted
once its staging folder exists (so the signal lands mid-work, whatever the machine's speed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WAIT_S = 120.0  # upper bound on reaching the staging folder (imports + start) on a loaded machine


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_mid_write_exits_130_with_one_line_and_no_output(tmp_path: Path) -> None:
    out = tmp_path / "vectors"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "verispec", "vectors", "--out", str(out), "--count", "1000000"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal delivers it: a test run started in the background (nohup, `cmd &`
        # in a script) inherits SIGINT *ignored*, and Python then rightly keeps ignoring it
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not any(p.name.startswith(".vectors.tmp-") for p in tmp_path.iterdir()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started writing"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert stderr == "verispec: interrupted\n"
    assert stdout == ""
    assert list(tmp_path.iterdir()) == []  # no partial folder, no staging folder
