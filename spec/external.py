"""The JSON-lines wire protocol (version 1) between ``verispec check`` and a program under test.

``verispec check --verifier-cmd "CMD"`` starts CMD once (``/bin/sh -c CMD``), keeps it alive for
the whole run, writes requests to its stdin and reads responses from its stdout: one JSON object
per line (UTF-8, ``\\n``-terminated), exactly one response per request, in request order. stderr is
free for the program's logs (its tail is quoted when something goes wrong). Requests may be
pipelined: the checker can write many before reading, so read and answer line by line.

Request::

    {"id": "sampled/0007", "op": "sampled", "input": {...}}

Response, one of::

    {"id": "sampled/0007", "output": {...}}          the answer
    {"id": "sampled/0007", "error": "why"}           the input breaks the contract: rejected
    {"id": "sampled/0007", "unsupported": "op"}      this program does not implement the op

``id`` is echoed verbatim. Ops, inputs and outputs (k drafts, vocabulary V, N items):

======================  ==================================================  ==========================
op                      input                                               output
======================  ==================================================  ==========================
``sampled`` (required)  p [k+1][V], q [k][V], drafts [k], uniforms [k+1]    accepted, token, kind
``sampled_batch`` (req) p [k+1][V], q [k][V] (shared by all items),          accepted [N], token [N],
                        drafts [N][k], uniforms [N][k+1]                    kind [N]
``greedy`` (optional)   p [k+1][V] (logits or probabilities), drafts [k]    accepted, token, kind
``sampled_law``         p [k+1][V], q [k][V] (shared), drafts [N][k], seed:  accepted [N], token [N],
                        the program's OWN randomness (``--law-only``),      kind [N]
                        drawn from ``seed`` (an int in [0, 2^53))
``rows``                target_logits [k+1][V], draft_logits [k][V],         p [k+1][V], q [k][V],
                        history [..], drafts [k], target_params,            mode ("sampled" or
                        draft_params                                        "greedy")
``target_law``          logits [V], history [..], params                    probs [V]
``gate``                gate ("supnorm", "halfrange", "margin"), margin,     admit (bool)
                        quantile + slack (null: default) or threshold,
                        dtype ("float32" or "float64")
``conformal_index``     n (int), q (string: "0.9", "2/3": exact rational)   index (int or null)
``dequantize``          ggml_type, type_name, n_elements, raw_hex           bits [n]: "3f800000"...
======================  ==================================================  ==========================

``kind`` is ``"repair"`` or ``"bonus"``; the sampled ops follow the random-draw protocol (version
1, spec/protocol.md) exactly, bit for bit. Sampling params: ``{"temperature", "top_k", "top_p",
"min_p", "repeat_penalty", "repeat_last_n", "logit_bias": [[id, bias], ...]}`` with bias a number
or ``"-inf"`` (a ban); meaning: the target law of :mod:`reference.sampling`. Numbers are JSON
numbers (float64); a request may carry the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` where
a float is expected (only in inputs that test the contract): they must be rejected with an error
response. Contract violations (rows not summing to 1 within 1e-6, negative entries,
q[i][drafts[i]] == 0, ids outside [0, V), uniforms outside [0, 1), wrong shapes, k < 1) must be
answered with ``error``, never with a verdict. A ``sampled_batch`` request with any invalid item is
rejected as a whole.

Unsupported optional ops are reported as skipped; an unsupported required op, a malformed
response, a response out of order, a crash or a response slower than the timeout are failures.
Every answer is validated before it counts (:mod:`spec.answers`): ids are JSON integers in
[0, V), accepted counts in [0, k], EVERY item of a batch answer is checked, rows have the shape
asked for; a line is at most ``MAX_LINE_BYTES`` and at most ``reference.json_input.MAX_DEPTH``
deep. The program runs in its own process group, killed with everything it started on every
exit path; once it has timed out it is not restarted (a dead peer costs one timeout per run).

This module holds both ends: :class:`CommandTransport` / :class:`WireImplementation` (the
checker's side, adapting a program to the :class:`~reference.speculative.Verifier`,
:class:`~reference.speculative.BatchVerifier` and :class:`~spec.pipeline.Pipeline` protocols)
and :func:`serve` (a program's side): ``python -m verispec.spec.external --reference`` serves the
reference, ``python -m verispec.spec.external --mutant NAME`` a mutant of :mod:`spec.mutants`.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import ExternalError as ExternalError
from verispec.reference.errors import ProgramCannotStart as ProgramCannotStart
from verispec.reference.errors import TimeoutSetting as TimeoutSetting
from verispec.reference.errors import Unsupported as Unsupported
from verispec.reference.errors import VerificationError, VerispecError
from verispec.reference.json_input import loads
from verispec.reference.sampling import SamplingParams
from verispec.reference.speculative import (
    PROTOCOL_VERSION,
    BatchVerdict,
    Probs2D,
    Verdict,
    verify_greedy,
    verify_sampled_batch,
)
from verispec.spec import answers, signals
from verispec.spec.answers import shown
from verispec.spec.pipeline import RowsRequest
from verispec.spec.vectors import ANSWERS, Json
from verispec.spec.vectors.wire import rows_request_from_json, rows_request_to_json

REQUIRED_OPS: tuple[str, ...] = ("sampled", "sampled_batch")
OPTIONAL_OPS: tuple[str, ...] = (
    "greedy",
    "rows",
    "target_law",
    "gate",
    "conformal_index",
    "dequantize",
)  # not offered: skipped
DEFAULT_TIMEOUT = 60.0  # seconds to wait for any one response
MAX_TIMEOUT = 7 * 24 * 3600.0  # a week: longer is a typo (and past what queue waits accept)
MAX_LINE_BYTES = 256 * 1024 * 1024  # one response line; the largest valid one (logits rows) is far below
STDERR_TAIL_BYTES = 8192  # of the program's stderr kept for failure messages
CLOSE_GRACE = 2.0  # seconds a closing program gets to exit before its group is killed
BATCH_ITEMS = 20_000  # items per sampled_batch request (the checker splits bigger batches)


# -----------------------------------------------------------------------------------------------
# JSON values for requests


def _jsonable(value: Any) -> Any:
    """numpy arrays/scalars -> JSON-ready lists and numbers; non-finite floats -> strings."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and not bool(np.all(np.isfinite(value))):
            return [_jsonable(v) for v in value]
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return f
    return value


def encode_line(obj: Mapping[str, Any]) -> bytes:
    """One request or response line (compact JSON, strict: no bare NaN)."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


# -----------------------------------------------------------------------------------------------
# the checker's side: a long-lived subprocess


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
    def _write(stdin: IO[bytes], requests: Sequence[Json]) -> None:
        """Encode and write request by request (overlapping with the program's work)."""
        try:
            pending: list[bytes] = []
            size = 0
            for request in requests:
                line = encode_line(request)
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

    def exchange(self, requests: Sequence[Json]) -> list[Json]:
        """Send ``requests``; return their responses (validated envelopes), in order."""
        if not requests:
            return []
        proc = self._start()
        assert proc.stdin is not None
        writer = threading.Thread(target=self._write, args=(proc.stdin, requests), daemon=True)
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


# -----------------------------------------------------------------------------------------------
# the checker's side: a program as a Verifier / BatchVerifier / Pipeline


def parse_verdict(
    output: Mapping[str, Any], where: str = "verdict", *, k: int | None = None, vocab: int | None = None
) -> Verdict:
    """An ``{"accepted", "token", "kind"}`` output as a Verdict; ExternalError if malformed
    (with the request's k and V: accepted in [0, k], token in [0, V), see :mod:`spec.answers`)."""
    accepted, token, kind = answers.verdict_fields(output, k, vocab, where)
    return Verdict(accepted=accepted, token=token, kind=kind)


def _shape(p: npt.ArrayLike) -> tuple[int | None, int | None]:
    """(k, V) of a request's target rows p [k+1, V]; None where p is not such a matrix (an
    invalid input the program must reject: its answer is then not checked against a shape)."""
    arr = np.asarray(p)
    if arr.ndim != 2 or arr.shape[0] < 1:
        return None, None
    return arr.shape[0] - 1, arr.shape[1]


class WireImplementation:
    """A program under test, seen through the wire protocol as the spec's protocols.

    ``verify`` is a :class:`~reference.speculative.Verifier`, ``verify_batch`` a
    :class:`~reference.speculative.BatchVerifier` (items with different rows are grouped by their
    rows, each group sent as ``sampled_batch`` requests of at most ``batch_items``), and the object
    itself a :class:`~spec.pipeline.Pipeline` (``rows``/``mode`` via the ``rows`` op).
    An ``error`` response becomes :class:`VerificationError`; protocol breaches
    :class:`ExternalError`.
    """

    def __init__(self, transport: CommandTransport, batch_items: int = BATCH_ITEMS) -> None:
        self.transport = transport
        self.batch_items = batch_items
        self.description = f"command: {transport.command}"

    def close(self) -> None:
        self.transport.close()

    # --- raw calls

    def call(self, op: str, inp: Mapping[str, Any]) -> Json:
        """One request; the output object, VerificationError on ``error``, Unsupported."""
        (output,) = self.call_many(op, [inp])
        return output

    def call_many(self, op: str, inputs: Sequence[Mapping[str, Any]]) -> list[Json]:
        requests = [{"id": self.transport.next_id(op), "op": op, "input": dict(inp)} for inp in inputs]
        outputs = []
        for response in self.transport.exchange(requests):
            if "unsupported" in response:
                raise Unsupported(f"the program does not support op {op!r}")
            if "error" in response:
                raise VerificationError(f"the program rejected the {op} input: {str(response['error'])[:300]}")
            outputs.append(response["output"])
        return outputs

    def replay(self, cases: Sequence[Mapping[str, Any]]) -> list[Json | None]:
        """Send vector cases as requests (their own ids); per case the output, ``{"error": msg}``,
        or None if the op is unsupported. ExternalError on a protocol breach."""
        requests = [{"id": case["id"], "op": case["op"], "input": case["input"]} for case in cases]
        results: list[Json | None] = []
        for response in self.transport.exchange(requests):
            if "unsupported" in response:
                results.append(None)
            elif "error" in response:
                results.append({"error": str(response["error"])})
            else:
                results.append(response["output"])
        return results

    # --- Verifier

    def verify(self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict:
        """The program's sampled verification of one case (the ``sampled`` op)."""
        output = self.call(
            "sampled",
            {
                "p": _jsonable(np.asarray(p)),
                "q": _jsonable(np.asarray(q)),
                "drafts": _jsonable(np.asarray(drafts)),
                "uniforms": _jsonable(np.asarray(uniforms, dtype=np.float64)),
            },
        )
        k, vocab = _shape(p)
        return parse_verdict(output, "sampled output", k=k, vocab=vocab)

    def greedy(self, p: npt.ArrayLike, drafts: Sequence[int]) -> Verdict:
        """The program's greedy verification of one case (the ``greedy`` op)."""
        output = self.call("greedy", {"p": _jsonable(np.asarray(p)), "drafts": _jsonable(np.asarray(drafts))})
        k, vocab = _shape(p)
        return parse_verdict(output, "greedy output", k=k, vocab=vocab)

    # --- BatchVerifier

    def verify_batch(
        self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike
    ) -> BatchVerdict:
        """N verifications through ``sampled_batch``; p/q shared ([k+1, V], [k, V]) or per item."""
        draws = np.asarray(uniforms, dtype=np.float64)
        draft_arr = np.asarray(drafts)
        if draft_arr.ndim != 2 or draws.ndim != 2 or draws.shape[0] != draft_arr.shape[0]:
            raise VerificationError(
                f"batch needs drafts [N, k] and uniforms [N, k+1], got {draft_arr.shape} and {draws.shape}"
            )
        return self._batched("sampled_batch", p, q, draft_arr, draws)

    def verify_law_batch(
        self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, seed: int = 0
    ) -> BatchVerdict:
        """N verifications with the program's own randomness (the ``sampled_law`` op); request j
        of the call carries ``request_seed(seed, j)`` (spec/law_only.py)."""
        draft_arr = np.asarray(drafts)
        if draft_arr.ndim != 2:
            raise VerificationError(f"batch needs drafts [N, k], got {draft_arr.shape}")
        return self._batched("sampled_law", p, q, draft_arr, None, seed)

    def _batched(
        self,
        op: str,
        p: npt.ArrayLike,
        q: npt.ArrayLike,
        draft_arr: npt.NDArray[Any],
        draws: npt.NDArray[np.float64] | None,
        seed: int | None = None,
    ) -> BatchVerdict:
        """Items grouped by their rows, each group sent in requests of at most ``batch_items``."""
        from verispec.spec.law_only import request_seed

        p_arr, q_arr = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        n = draft_arr.shape[0]
        groups = self._groups(p_arr, q_arr, n)
        requests: list[tuple[npt.NDArray[np.intp], Json]] = []
        for items, p_rows, q_rows in groups:
            p_json, q_json = _jsonable(p_rows), _jsonable(q_rows)
            for start in range(0, items.shape[0], self.batch_items):
                chunk = items[start : start + self.batch_items]
                inp = {"p": p_json, "q": q_json, "drafts": _jsonable(draft_arr[chunk])}
                if draws is not None:
                    inp["uniforms"] = _jsonable(draws[chunk])
                if seed is not None:
                    inp["seed"] = request_seed(seed, len(requests))
                requests.append((chunk, inp))
        outputs = self.call_many(op, [inp for _, inp in requests])
        accepted = np.zeros(n, dtype=np.int64)
        token = np.zeros(n, dtype=np.int64)
        bonus = np.zeros(n, dtype=np.bool_)
        k, vocab = p_arr.shape[-2] - 1, p_arr.shape[-1]  # every item: drafts [k], token in [0, V)
        for (chunk, _), output in zip(requests, outputs):
            a, t, b = answers.batch_columns(output, chunk.shape[0], k, vocab, op)
            accepted[chunk], token[chunk], bonus[chunk] = a, t, b
        return BatchVerdict(accepted, token, bonus)

    @staticmethod
    def _groups(p: Probs2D, q: Probs2D, n: int) -> list[tuple[npt.NDArray[np.intp], Probs2D, Probs2D]]:
        """Items grouped by identical (p, q) rows: [(item ids, p [k+1, V], q [k, V]), ...]."""
        if p.ndim == 2 and q.ndim == 2:
            return [(np.arange(n), p, q)]
        p_all = np.broadcast_to(p, (n,) + p.shape[-2:]) if p.ndim == 2 else p
        q_all = np.broadcast_to(q, (n,) + q.shape[-2:]) if q.ndim == 2 else q
        if p_all.shape[0] != n or q_all.shape[0] != n:
            raise VerificationError(f"per-item rows must have N = {n} items, got p {p.shape}, q {q.shape}")
        keys = np.concatenate([p_all.reshape(n, -1), q_all.reshape(n, -1)], axis=1)  # [N, (2k+1) V]
        _, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)  # [N]: the group of each item
        order = np.argsort(inverse, kind="stable")
        bounds = np.flatnonzero(np.diff(inverse[order])) + 1
        groups = []
        for items in np.split(order, bounds):
            head = int(items[0])
            groups.append((items, np.asarray(p_all[head]), np.asarray(q_all[head])))
        return groups

    # --- Pipeline

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]:
        """The program's p [k+1, V] and q [k, V] for one speculative step (the ``rows`` op)."""
        output = self.call("rows", rows_request_to_json(request))
        logits = np.asarray(request.target_logits)
        k, vocab = len(request.drafts), (logits.shape[-1] if logits.ndim else 0)  # the shape p, q must have
        return (
            _matrix(output.get("p"), "rows output p", (k + 1, vocab)),
            _matrix(output.get("q"), "rows output q", (k, vocab)),
        )

    def mode(self, target_params: SamplingParams, draft_params: SamplingParams) -> Literal["greedy", "sampled"]:
        """Which verification the program runs for these params (the ``mode`` of a ``rows``
        answer on a two-token dummy step)."""
        vocab = 1 + max(
            [1] + [int(t) for t in (target_params.logit_bias or {})] + [int(t) for t in (draft_params.logit_bias or {})]
        )
        logits = np.zeros((2, vocab))
        dummy = RowsRequest(logits, logits[:1], (), (0,), target_params, draft_params)
        output = self.call("rows", rows_request_to_json(dummy))
        mode = output.get("mode")
        if mode not in ("greedy", "sampled"):
            raise ExternalError(f'rows output mode must be "greedy" or "sampled", got {mode!r}')
        return "greedy" if mode == "greedy" else "sampled"


def _matrix(value: Any, what: str, shape: tuple[int, int]) -> Probs2D:
    """A probability matrix of exactly ``shape`` ([rows][V]) from an answer."""
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ExternalError(f"{what} must be a matrix [rows][V] of numbers, got {shown(value)}")
    try:
        rows = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ExternalError(f"{what} must be a matrix of numbers, got {shown(value)}") from None
    if rows.shape != shape:
        raise ExternalError(f"{what} must have shape [{shape[0]}][{shape[1]}], got {list(rows.shape)}")
    return rows


# -----------------------------------------------------------------------------------------------
# the program's side: serve ops from a handler


Handler = Callable[[str, Mapping[str, Any]], Json]


def serve(handle: Handler, stdin: IO[bytes], stdout: IO[bytes], ops: Iterable[str]) -> int:
    """Answer JSON-lines requests until EOF: ``handle(op, input) -> output``.

    A VerispecError (or any other exception from the handler) becomes an ``error`` response, an
    op outside ``ops`` an ``unsupported`` one; the server itself never dies on bad input.
    """
    known = set(ops)
    for line in stdin:
        if not line.strip():
            continue
        request_id: Any = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            op = request["op"]
            if op not in known:
                response: Json = {"id": request_id, "unsupported": op}
            else:
                response = {"id": request_id, "output": handle(op, request["input"])}
        except Exception as exc:  # noqa: BLE001 - every failure is an answer, never a crash
            response = {"id": request_id, "error": f"{type(exc).__name__}: {exc}"}
        stdout.write(encode_line(response))
        stdout.flush()
    return 0


def _check_finite(value: Any) -> None:
    """Reject the wire's non-finite markers before any numpy conversion sees them."""
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        raise VerificationError(f"non-finite value {value} in the input")
    if isinstance(value, list):
        for v in value:
            _check_finite(v)


def _batch_output(verdicts: BatchVerdict) -> Json:
    return {
        "accepted": verdicts.accepted.tolist(),
        "token": verdicts.token.tolist(),
        "kind": ["bonus" if b else "repair" for b in verdicts.is_bonus.tolist()],
    }


def reference_handler(op: str, inp: Mapping[str, Any]) -> Json:
    """The reference implementation of every op (what ``--reference`` serves)."""
    for key in ("p", "q", "uniforms", "logits", "target_logits", "draft_logits"):
        _check_finite(inp.get(key))
    if op == "sampled_batch":
        return _batch_output(verify_sampled_batch(inp["p"], inp["q"], np.asarray(inp["drafts"]), inp["uniforms"]))
    return ANSWERS[op](inp)


def mutant_handler(name: str) -> Handler:
    """The reference with one mutant of :mod:`spec.mutants` in place of its verifier or pipeline."""
    from verispec.spec.mutants import catalogue

    by_name = {m.name: m for m in catalogue()}
    if name not in by_name:
        raise VerispecError(f"unknown mutant {name!r}; known: {', '.join(by_name)}")
    mutant = by_name[name]

    def handle(op: str, inp: Mapping[str, Any]) -> Json:
        for key in ("p", "q", "uniforms", "logits", "target_logits", "draft_logits"):
            _check_finite(inp.get(key))
        if op == "sampled":
            v = mutant.verifier(inp["p"], inp["q"], inp["drafts"], inp["uniforms"])
            return {"accepted": int(v.accepted), "token": int(v.token), "kind": v.kind}
        if op == "sampled_batch":
            return _batch_output(mutant.batch(inp["p"], inp["q"], np.asarray(inp["drafts"]), inp["uniforms"]))
        if op == "rows":
            request = rows_request_from_json(inp)
            p, q = mutant.pipeline.rows(request)
            mode = mutant.pipeline.mode(request.target_params, request.draft_params)
            return {"p": np.asarray(p).tolist(), "q": np.asarray(q).tolist(), "mode": mode}
        if op == "greedy":
            v = verify_greedy(inp["p"], inp["drafts"])
            return {"accepted": v.accepted, "token": v.token, "kind": v.kind}
        return reference_handler(op, inp)

    return handle


def law_handler(handle: Handler, seed: int, use_given_seed: bool = True) -> Handler:
    """``sampled_law`` answered by ``handle``'s ``sampled_batch`` with uniforms from the request's
    ``seed`` (or, without one or with ``use_given_seed`` False, one generator seeded ``seed`` for
    the process): how a verifier with its own randomness looks on the wire (:mod:`spec.law_only`)."""
    own = np.random.default_rng(seed)

    def law(op: str, inp: Mapping[str, Any]) -> Json:
        drafts = np.asarray(inp["drafts"])
        if drafts.ndim != 2:
            raise VerificationError(f"sampled_law needs drafts [N][k], got shape {drafts.shape}")
        given = inp.get("seed")
        if (
            use_given_seed
            and given is not None
            and (isinstance(given, bool) or not isinstance(given, int) or given < 0)
        ):
            raise VerificationError(f"sampled_law seed must be a non-negative integer, got {given!r:.40}")
        rng = np.random.default_rng(given) if use_given_seed and given is not None else own
        uniforms = rng.random((drafts.shape[0], drafts.shape[1] + 1)).tolist()
        return handle("sampled_batch", {"p": inp["p"], "q": inp["q"], "drafts": inp["drafts"], "uniforms": uniforms})

    return law


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verispec.spec.external (--reference | --mutant NAME | --list-mutants) [--law-only SEED]``: serve the wire
    protocol on stdin/stdout."""
    parser = argparse.ArgumentParser(
        prog="python -m verispec.spec.external",
        description="Serve the verispec wire protocol (JSON lines on stdin/stdout).",
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--reference", action="store_true", help="serve the reference implementation")
    group.add_argument("--mutant", metavar="NAME", help="serve the reference with one mutant of spec.mutants")
    group.add_argument("--list-mutants", action="store_true", help="print the mutant names and exit")
    parser.add_argument(
        "--law-only",
        type=int,
        metavar="SEED",
        help="serve only the sampled_law op, drawing each request's uniforms from its seed (SEED: without one)",
    )
    parser.add_argument(
        "--ignore-seed",
        action="store_true",
        help="with --law-only: ignore the requests' seeds, one stream seeded SEED per process (a broken adapter)",
    )
    args = parser.parse_args(argv)
    if args.list_mutants:
        from verispec.spec.mutants import catalogue

        for mutant in catalogue():
            print(mutant.name)
        return 0
    try:
        handle = reference_handler if args.reference else mutant_handler(args.mutant)
    except VerispecError as exc:
        print(f"verispec.spec.external: error: {exc}", file=sys.stderr)
        return 2
    if args.law_only is not None:
        return serve(
            law_handler(handle, args.law_only, not args.ignore_seed),
            sys.stdin.buffer,
            sys.stdout.buffer,
            ("sampled_law",),
        )
    ops = REQUIRED_OPS + OPTIONAL_OPS
    return serve(handle, sys.stdin.buffer, sys.stdout.buffer, ops)


assert PROTOCOL_VERSION == 1, "spec.external speaks protocol version 1"

if __name__ == "__main__":
    sys.exit(main())
