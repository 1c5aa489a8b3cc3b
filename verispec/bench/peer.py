"""A peer engine in its own process: the bench survives whatever the peer's native code does.

A peer (llama.cpp through llama-cpp-python) is native code the bench does not control: a build
with ``-march=native`` on an Intel AMX machine faults in ggml's AMX kernel at its first prompt
pass (SIGSEGV), which would take the whole bench down with it, report and all. So every peer
runs in a child process (:class:`PeerProcess`) spoken to in JSON lines on its stdin and stdout:
one request ``{"op": ..., "args": {...}}``, one reply ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "..."}``. The child's stderr goes to a temporary file, so its last
lines can be shown when it dies.

When the child dies (a signal, an exit, a closed stdout) or stops answering within
``timeout_s``, :meth:`PeerProcess.call` raises :class:`PeerFailed` carrying :attr:`PeerFailed.result`:
what happened as a JSON object (``status`` "crashed" / "timed out" / "failed", ``signal``,
``exit_code``, ``during``, ``stderr_tail``), which the bench reports as that peer's result while
everything else goes on. The child runs in its own session (process group); :meth:`close` and
every failure kill the whole group, so nothing it started outlives the bench.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

from verispec.reference.errors import PeerFailed

STDERR_TAIL_LINES = 12  # lines of the dead child's stderr kept in the report
MAX_REPLY_BYTES = 64 * 2**20  # a reply line longer than this is a broken peer, not a result


def describe(result: dict[str, Any]) -> str:
    """One line for a failed peer: how it ended, during what, and its last stderr line."""
    how = result.get("status", "failed")
    if result.get("signal"):
        how += f" (killed by {result['signal']}, exit {result.get('exit_code')})"
    elif result.get("exit_code") is not None:
        how += f" (exit {result['exit_code']})"
    if result.get("error"):
        how += f": {result['error']}"
    tail = result.get("stderr_tail") or []
    last = f"; last stderr line: {tail[-1]!r}" if tail else ""
    return f"{how} during {result.get('during', '?')}{last}"


class PeerProcess:
    """One child process serving requests in JSON lines (see the module docstring)."""

    def __init__(self, argv: Sequence[str], timeout_s: float = 600.0, env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self._stderr: BinaryIO = tempfile.TemporaryFile(prefix="verispec-peer-")
        self._buffer = b""
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
            env=env,
        )

    def call(self, op: str, **args: Any) -> Any:
        """Send one request and return its result; PeerFailed if the child cannot answer it."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            closed = {"status": "failed", "during": op, "error": "the peer process was already closed"}
            raise PeerFailed(describe(closed), closed)
        try:
            proc.stdin.write(json.dumps({"op": op, "args": args}).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._failure("crashed", op) from None
        line = self._read_line(op)
        try:
            reply = json.loads(line)
        except ValueError:
            raise self._failure("failed", op, f"an unreadable reply {line[:120]!r}") from None
        if not isinstance(reply, dict) or "ok" not in reply:
            raise self._failure("failed", op, f"a reply without 'ok': {line[:120]!r}")
        if not reply["ok"]:
            raise self._failure("failed", op, str(reply.get("error", "an error without a message"))[:500])
        return reply.get("result")

    def _read_line(self, op: str) -> bytes:
        """The next reply line, within ``timeout_s``; PeerFailed at EOF (the child died) or timeout."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._failure("timed out", op, f"no reply within {self.timeout_s:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._failure("crashed", op)
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                raise self._failure("failed", op, f"a reply longer than {MAX_REPLY_BYTES} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _failure(self, status: str, op: str, error: str | None = None) -> PeerFailed:
        """Stop the child (its whole group), then describe how it ended."""
        proc = self._proc
        code = None if proc is None else _stop(proc)
        self._proc = None
        result: dict[str, Any] = {
            "status": status,
            "during": op,
            "exit_code": code,
            "signal": _signal_name(code),
            "stderr_tail": self.stderr_tail(),
        }
        if status == "crashed" and code == 0:
            result["status"] = "failed"
            error = error or "the peer exited before answering"
        if error:
            result["error"] = error
        return PeerFailed(describe(result), result)

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> list[str]:
        """The last ``lines`` lines the child wrote to stderr (decoded leniently)."""
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 16384))
        text = self._stderr.read().decode("utf-8", errors="replace")
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def close(self) -> None:
        """Ask the child to exit, then make sure its whole process group is gone."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.write(b'{"op": "exit", "args": {}}\n')
                    proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            _stop(proc)
        self._stderr.close()

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop(proc: "subprocess.Popen[bytes]") -> int | None:
    """Kill the child's process group (anything it started too); its exit status (negative: the
    signal that ended it, as subprocess reports it). A child that is still alive is killed, and
    then reported as it died before the kill (``poll`` first)."""
    code = proc.poll()
    if code is None:
        try:
            code = proc.wait(timeout=0.5)  # it may be on its way out (a fault being handled)
        except subprocess.TimeoutExpired:
            code = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if code is None:
        code = proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    return code


def _signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
