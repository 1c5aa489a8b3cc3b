"""The program's side: :func:`serve` answers requests from a handler; the reference's, a mutant's and
the law-only handlers; :func:`main` is ``python -m verispec.spec.external``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any

import numpy as np

from verispec.reference.errors import VerificationError, VerispecError
from verispec.reference.speculative import PROTOCOL_VERSION, BatchVerdict, verify_greedy, verify_sampled_batch
from verispec.spec.external.json_values import encode_line
from verispec.spec.vectors import ANSWERS, Json
from verispec.spec.vectors.wire import rows_request_from_json

REQUIRED_OPS: tuple[str, ...] = ("sampled", "sampled_batch")
OPTIONAL_OPS: tuple[str, ...] = (
    "greedy",
    "rows",
    "target_law",
    "gate",
    "conformal_index",
    "dequantize",
)  # not offered: skipped


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


_NON_FINITE_MARKERS = ("NaN", "Infinity", "-Infinity")


def check_finite(value: Any) -> None:
    """Reject the wire's non-finite markers before any numpy conversion sees them."""
    if _has_marker(value):
        raise_first_marker(value)


def _has_marker(value: Any) -> bool:
    """Whether a marker string is ``value`` or sits at any depth of its lists. A list of numbers
    only (a row of ``p``: what the wire carries by the megabyte) is recognised at C speed from the
    set of its element types, not walked element by element in Python; any other list is walked."""
    if isinstance(value, str):
        return value in _NON_FINITE_MARKERS
    if not isinstance(value, list):
        return False
    if set(map(type, value)) <= _NUMBER_TYPES:
        return False
    return any(_has_marker(v) for v in value)


_NUMBER_TYPES = frozenset((float, int))  # exact types: a str or list subclass is walked


def raise_first_marker(value: Any) -> None:
    """The element-by-element walk: the first marker in depth-first order names the error."""
    if isinstance(value, str) and value in _NON_FINITE_MARKERS:
        raise VerificationError(f"non-finite value {value} in the input")
    if isinstance(value, list):
        for v in value:
            raise_first_marker(v)


def _batch_output(verdicts: BatchVerdict) -> Json:
    return {
        "accepted": verdicts.accepted.tolist(),
        "token": verdicts.token.tolist(),
        "kind": ["bonus" if b else "repair" for b in verdicts.is_bonus.tolist()],
    }


def reference_handler(op: str, inp: Mapping[str, Any]) -> Json:
    """The reference implementation of every op (what ``--reference`` serves)."""
    for key in ("p", "q", "uniforms", "logits", "target_logits", "draft_logits"):
        check_finite(inp.get(key))
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
            check_finite(inp.get(key))
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
