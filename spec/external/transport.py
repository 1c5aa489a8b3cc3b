"""The checker's side, a long-lived subprocess: :class:`CommandTransport` speaks JSON lines to a
program under test in its own process group, and :func:`kill_all_peers` ends every one on exit."""

from __future__ import annotations

import atexit
import collections
import math
import os
import queue
import signal
import subprocess
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import IO, Any

from verispec.reference.errors import ExternalError, ProgramCannotStart, TimeoutSetting
from verispec.reference.json_input import loads
from verispec.spec import signals
from verispec.spec.answers import shown
from verispec.spec.external.json_values import encode_line
from verispec.spec.vectors import Json

DEFAULT_TIMEOUT = 60.0  # seconds to wait for any one response
MAX_TIMEOUT = 7 * 24 * 3600.0  # a week: longer is a typo (and past what queue waits accept)
MAX_LINE_BYTES = 256 * 1024 * 1024  # one response line; the largest valid one (logits rows) is far below
STDERR_TAIL_BYTES = 8192  # of the program's stderr kept for failure messages
CLOSE_GRACE = 2.0  # seconds a closing program gets to exit before its group is killed


class CommandTransport:
    """A program under test behind ``/bin/sh -c COMMAND``, spoken to in JSON lines.

    :meth:`exchange` writes a list of requests (pipelined, from a writer thread) and returns one
    parsed response per request, in order; a reader thread drains stdout and another keeps the
    tail of stderr. A crash or a malformed line raises :class:`ExternalError` and stops the
    process; the next exchange starts a fresh one (``restarts`` counts them).

    Containment (the program is untrusted): it runs in its own process group, and every way out
    (close, a failure, Ctrl-C, SIGTERM to the checker via :func:`kill_all_peers`, interpreter
    exit) kills the whole group, so what it forked dies with it; a Ctrl-C during the start is
    acted on once the program is recorded for that kill. Every wait is bounded by the validated
    ``timeout`` and waited in slices that a signal ends, whichever thread the kernel handed it to
    (:mod:`spec.signals`); a line is read with a cap (:data:`MAX_LINE_BYTES`) and stderr is kept
    as a bounded tail. Once the program has timed out it is not restarted: every later exchange
    fails at once, so a dead peer costs one timeout per run, not one per case.
    """

    def __init__(self, command: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.command = command
        self.timeout = check_timeout(timeout)
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: collections.deque[bytes] = collections.deque()
        self._counter = 0
        self._stderr_reader: threading.Thread | None = None
        self.answered = 0  # responses over the transport's life: 0 when a death means "cannot start"
        self._writer: threading.Thread | None = None
        self._timed_out: str | None = None  # why the program is given up on (no restart after it)

    def _start(self) -> subprocess.Popen[bytes]:
        if self._timed_out is not None:
            raise ExternalError(f"the program is not restarted after it timed out ({self._timed_out})")
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            self._kill(self._proc)  # what the exited shell left behind in its group
            self.restarts += 1
        with signals.deferred():  # a Ctrl-C between the fork and _LIVE.add would leave it unkillable
            try:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", self.command],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,  # its own process group: a kill reaches what the shell started
                )
            except OSError as exc:
                raise ExternalError(f"cannot start {shown(self.command)}: {exc}") from None
            self._proc = proc
            _LIVE.add(self)
        self._lines = queue.Queue()
        self._stderr = collections.deque()
        assert proc.stdout is not None and proc.stderr is not None
        threading.Thread(target=self._read_stdout, args=(proc.stdout, self._lines), daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, args=(proc.stderr, self._stderr), daemon=True)
        self._stderr_reader.start()
        return proc

    @staticmethod
    def _read_stdout(stream: IO[bytes], lines: "queue.Queue[bytes | None]") -> None:
        """Lines of at most MAX_LINE_BYTES; a longer one is queued cut (it fails as too long)."""
        try:
            while True:
                line = stream.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                lines.put(line)
                if len(line) > MAX_LINE_BYTES:
                    break  # the program is failed on this line: read no further
        except (OSError, ValueError):
            pass
        lines.put(None)  # EOF

    @staticmethod
    def _read_stderr(stream: IO[bytes], tail: "collections.deque[bytes]") -> None:
        """Keep the last STDERR_TAIL_BYTES of stderr (chunks, never one unbounded line)."""
        kept = 0
        try:
            while chunk := stream.read1(1 << 14):  # type: ignore[attr-defined]
                tail.append(chunk)
                kept += len(chunk)
                while kept > STDERR_TAIL_BYTES and len(tail) > 1:
                    kept -= len(tail.popleft())
        except (OSError, ValueError):
            pass

    @staticmethod
    def _write(stdin: IO[bytes], requests: Sequence[Json], lines: Sequence[bytes] | None = None) -> None:
        """Encode and write request by request (overlapping with the program's work); ``lines``,
        when given, are the requests already encoded (:func:`encode_line` of each)."""
        try:
            pending: list[bytes] = []
            size = 0
            for line in lines if lines is not None else map(encode_line, requests):
                pending.append(line)
                size += len(line)
                if size >= 1 << 16:
                    stdin.write(b"".join(pending))
                    stdin.flush()
                    pending, size = [], 0
            stdin.write(b"".join(pending))
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the process died; the reader reports it

    def _stderr_tail(self) -> str:
        text = b"".join(list(self._stderr))[-STDERR_TAIL_BYTES:].decode("utf-8", "replace")
        lines = [line.rstrip()[:200] for line in text.splitlines() if line.strip()][-5:]
        return f"; stderr: {' | '.join(lines)}" if lines else ""

    def close(self) -> None:
        """Close stdin (the program should exit), wait a bounded time, then kill its group."""
        proc, self._proc = self._proc, None
        _LIVE.discard(self)
        if proc is None:
            return
        writer = self._writer
        if writer is not None and writer.is_alive():
            # the writer is blocked on a program that does not read stdin: closing the pipe would
            # wait for the writer's lock (a deadlock); kill first, the write then fails and returns
            self._kill(proc)
            signals.join(writer, CLOSE_GRACE)
        try:
            if proc.stdin:
                proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            proc.wait(timeout=CLOSE_GRACE)
        except subprocess.TimeoutExpired:
            pass
        self._kill(proc)  # also when the shell exited: what it forked is still in its group

    @staticmethod
    def _kill(proc: "subprocess.Popen[bytes]") -> None:
        """Kill the program's process group (the shell and whatever it started), then reap it."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if proc.poll() is None:
                proc.kill()
        try:
            proc.wait(timeout=CLOSE_GRACE)
        except subprocess.TimeoutExpired:
            pass  # unkillable (a process in uninterruptible sleep): nothing more a checker can do

    def kill(self) -> None:
        """Kill the program's group now (a signal handler's exit path); no waiting on pipes."""
        proc = self._proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=1.0)  # reap the shell: no zombie left in the group
            except subprocess.TimeoutExpired:
                pass

    def _fail(self, message: str) -> ExternalError:
        proc = self._proc
        if proc is not None:
            self._kill(proc)
        if self._stderr_reader is not None:
            signals.join(self._stderr_reader, 2.0)  # the process is gone: let its last words arrive
        return ExternalError(message + self._stderr_tail())

    def next_id(self, op: str) -> str:
        """A fresh request id for checker-made requests."""
        self._counter += 1
        return f"{op}#{self._counter}"

    def exchange(self, requests: Sequence[Json], lines: Sequence[bytes] | None = None) -> list[Json]:
        """Send ``requests``; return their responses (validated envelopes), in order. ``lines``:
        the requests as :func:`encode_line` spells them, when the caller has them already."""
        if not requests:
            return []
        if lines is not None and len(lines) != len(requests):
            raise ValueError(f"{len(lines)} encoded lines for {len(requests)} requests")
        proc = self._start()
        assert proc.stdin is not None
        writer = threading.Thread(target=self._write, args=(proc.stdin, requests, lines), daemon=True)
        self._writer = writer
        writer.start()
        responses: list[Json] = []
        for request in requests:
            where = f"request {shown(request['id'])} ({request['op']})"
            try:
                line = signals.queue_get(self._lines, self.timeout)  # a signal ends it at once (spec/signals.py)
            except queue.Empty:
                self._timed_out = f"no response to {where} within {self.timeout:g} s"
                raise self._fail(self._timed_out) from None
            if line is None:
                status = proc.poll()
                if status is None:  # stdout closed: give an exiting program a moment to be reaped
                    try:
                        status = proc.wait(timeout=min(1.0, self.timeout))
                    except subprocess.TimeoutExpired:
                        status = None
                if status is not None and self.answered == 0 and self.restarts == 0:
                    error = self._fail(f"the program exited (status {status}) before its first answer: it cannot start")
                    raise ProgramCannotStart(f"cannot start {self.command!r}: {error}")
                how = f"exited (status {status})" if status is not None else "closed its stdout"
                raise self._fail(f"the program {how} before answering {where}")
            if len(line) > MAX_LINE_BYTES:
                raise self._fail(f"the response to {where} is longer than {MAX_LINE_BYTES} bytes")
            responses.append(self._envelope(line, request))
            self.answered += 1
        signals.join(writer, self.timeout)
        return responses

    def _envelope(self, line: bytes, request: Mapping[str, Any]) -> Json:
        where = f"request {shown(request['id'])} ({request['op']})"
        try:
            obj = loads(line, f"response to {where}", error=ExternalError)
        except ExternalError as exc:
            raise self._fail(f"malformed response: {exc}: {shown(line)}") from None
        if not isinstance(obj, dict):
            raise self._fail(f"malformed response to {where}: not a JSON object: {shown(line)}")
        if obj.get("id") != request["id"]:
            raise self._fail(f"response out of order: expected id {shown(request['id'])}, got {shown(obj.get('id'))}")
        present = [key for key in ("output", "error", "unsupported") if key in obj]
        if len(present) != 1:
            raise self._fail(
                f"malformed response to {where}: needs exactly one of output/error/unsupported, got keys {shown(sorted(obj))}"
            )
        if "output" in obj and not isinstance(obj["output"], dict):
            raise self._fail(f"malformed response to {where}: output must be a JSON object")
        return obj


_LIVE: "weakref.WeakSet[CommandTransport]" = weakref.WeakSet()  # transports with a running program


def kill_all_peers() -> None:
    """Kill every running program under test (their whole groups): the checker's exit paths
    (SIGTERM, Ctrl-C, interpreter exit) call this so no peer outlives the run."""
    for transport in list(_LIVE):
        transport.kill()


atexit.register(kill_all_peers)


def check_timeout(seconds: Any) -> float:
    """A per-response timeout: a finite number of seconds in (0, MAX_TIMEOUT]; inf, nan, 1e300
    or a negative one is a usage error (TimeoutSetting), before any program starts."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TimeoutSetting(f"--timeout must be a number of seconds, got {shown(seconds)}")
    value = float(seconds)
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        raise TimeoutSetting(f"--timeout must be finite, > 0 and at most {MAX_TIMEOUT:g} s, got {seconds!r}")
    return value
