"""The checker's side, a program as the spec's protocols: :class:`WireImplementation` is a
:class:`~reference.speculative.Verifier`, a :class:`~reference.speculative.BatchVerifier` and a
:class:`~spec.pipeline.Pipeline` through the wire."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import ExternalError, Unsupported, VerificationError
from verispec.reference.sampling import SamplingParams
from verispec.reference.speculative import BatchVerdict, Probs2D, Verdict
from verispec.spec import answers
from verispec.spec.answers import shown
from verispec.spec.external.json_values import encode_line, jsonable
from verispec.spec.external.transport import CommandTransport
from verispec.spec.pipeline import RowsRequest
from verispec.spec.vectors import Json
from verispec.spec.vectors.wire import rows_request_to_json

BATCH_ITEMS = 20_000  # items per sampled_batch request (the checker splits bigger batches)


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
        self._rows_memo: tuple[tuple[Any, ...], tuple[Any, Any, bytes, bytes]] | None = None

    def close(self) -> None:
        self.transport.close()

    # --- raw calls

    def call(self, op: str, inp: Mapping[str, Any]) -> Json:
        """One request; the output object, VerificationError on ``error``, Unsupported."""
        (output,) = self.call_many(op, [inp])
        return output

    def call_many(
        self, op: str, inputs: Sequence[Mapping[str, Any]], encode: Callable[[Json], bytes] | None = None
    ) -> list[Json]:
        """One request per input, pipelined. ``encode``: a faster spelling of :func:`encode_line`
        (the same bytes); if it raises, the transport encodes the requests itself, as without it."""
        requests = [{"id": self.transport.next_id(op), "op": op, "input": dict(inp)} for inp in inputs]
        lines: list[bytes] | None = None
        if encode is not None:
            try:
                lines = [encode(request) for request in requests]
            except ValueError:
                lines = None
        outputs = []
        for response in self.transport.exchange(requests, lines):
            if "unsupported" in response:
                raise Unsupported(f"the program does not support op {op!r}")
            if "error" in response:
                raise VerificationError(f"the program rejected the {op} input: {str(response['error'])[:300]}")
            outputs.append(response["output"])
        return outputs

    def replay(self, cases: Sequence[Mapping[str, Any]], lines: list[bytes] | None = None) -> list[Json | None]:
        """Send vector cases as requests (their own ids); per case the output, ``{"error": msg}``,
        or None if the op is unsupported. ExternalError on a protocol breach. ``lines``: a memo of
        the requests' encoding (spec/vectors VectorSet.wire_lines): used when filled, filled when
        empty, so replaying one vector set again encodes nothing."""
        requests = [{"id": case["id"], "op": case["op"], "input": case["input"]} for case in cases]
        if lines is not None and len(lines) != len(requests):
            try:
                lines[:] = [encode_line(request) for request in requests]
            except ValueError:  # not JSON (a bare NaN): sent as before, the writer gives up on it
                lines = None
        results: list[Json | None] = []
        for response in self.transport.exchange(requests, lines):
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
                "p": jsonable(np.asarray(p)),
                "q": jsonable(np.asarray(q)),
                "drafts": jsonable(np.asarray(drafts)),
                "uniforms": jsonable(np.asarray(uniforms, dtype=np.float64)),
            },
        )
        k, vocab = _shape(p)
        return parse_verdict(output, "sampled output", k=k, vocab=vocab)

    def greedy(self, p: npt.ArrayLike, drafts: Sequence[int]) -> Verdict:
        """The program's greedy verification of one case (the ``greedy`` op)."""
        output = self.call("greedy", {"p": jsonable(np.asarray(p)), "drafts": jsonable(np.asarray(drafts))})
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
        texts: dict[int, tuple[bytes, bytes]] = {}  # id of a request's p list -> (p, q) as JSON text
        for items, p_rows, q_rows in groups:
            p_json, q_json, p_text, q_text = self._rows_json(p_rows, q_rows)
            texts[id(p_json)] = (p_text, q_text)
            for start in range(0, items.shape[0], self.batch_items):
                chunk = items[start : start + self.batch_items]
                inp = {"p": p_json, "q": q_json, "drafts": jsonable(draft_arr[chunk])}
                if draws is not None:
                    inp["uniforms"] = jsonable(draws[chunk])
                if seed is not None:
                    inp["seed"] = request_seed(seed, len(requests))
                requests.append((chunk, inp))
        outputs = self.call_many(op, [inp for _, inp in requests], lambda request: _spliced(request, texts))
        accepted = np.zeros(n, dtype=np.int64)
        token = np.zeros(n, dtype=np.int64)
        bonus = np.zeros(n, dtype=np.bool_)
        k, vocab = p_arr.shape[-2] - 1, p_arr.shape[-1]  # every item: drafts [k], token in [0, V)
        for (chunk, _), output in zip(requests, outputs):
            a, t, b = answers.batch_columns(output, chunk.shape[0], k, vocab, op)
            accepted[chunk], token[chunk], bonus[chunk] = a, t, b
        return BatchVerdict(accepted, token, bonus)

    def _rows_json(self, p_rows: Probs2D, q_rows: Probs2D) -> tuple[Any, Any, bytes, bytes]:
        """(p, q) as JSON-ready lists and as their JSON text, memoized for the last rows seen: the
        statistical and full-vocabulary properties send the same rows (V up to 262,144) in many
        calls. The memo's key is the rows' exact bytes (shape and dtype too), so -0.0 and 0.0, or
        two NaN payloads, are different rows, as they are to the encoder."""
        key = (p_rows.dtype.str, p_rows.shape, q_rows.dtype.str, q_rows.shape, p_rows.tobytes(), q_rows.tobytes())
        if self._rows_memo is None or self._rows_memo[0] != key:
            p_json, q_json = jsonable(p_rows), jsonable(q_rows)
            self._rows_memo = (key, (p_json, q_json, _json_text(p_json), _json_text(q_json)))
        return self._rows_memo[1]

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


def _json_text(value: Any) -> bytes:
    """``value`` as :func:`encode_line` spells it inside a line (compact, strict: no bare NaN)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")


_P_SLOT, _Q_SLOT = "\x00p rows\x00", "\x00q rows\x00"  # stand-ins no JSON number or id can spell
_P_SLOT_TEXT, _Q_SLOT_TEXT = _json_text(_P_SLOT), _json_text(_Q_SLOT)


def _spliced(request: Json, texts: Mapping[int, tuple[bytes, bytes]]) -> bytes:
    """:func:`encode_line` of a batch request, byte for byte, with its p and q rows spliced in
    from their memoized text: JSON's compact spelling of an object is its members' spellings
    joined, so a member encoded apart and put in its place gives the same line. ValueError for a
    request whose rows were not memoized (the caller then encodes it whole)."""
    inp = request["input"]
    if id(inp.get("p")) not in texts:
        raise ValueError("rows not memoized")
    p_text, q_text = texts[id(inp["p"])]
    line = encode_line({**request, "input": {**inp, "p": _P_SLOT, "q": _Q_SLOT}})
    return line.replace(_P_SLOT_TEXT, p_text, 1).replace(_Q_SLOT_TEXT, q_text, 1)


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
