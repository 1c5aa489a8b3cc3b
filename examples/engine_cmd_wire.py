"""The JSON-lines loop of a ``check-decoder --engine-cmd`` program (spec/decoder/check.py's ops,
spec/external/'s envelope), standard library only, so that it runs in any peer's venv.

An engine is a function ``answer(op, input) -> output``: it raises :class:`LookupError` for an op
it does not implement (answered ``unsupported``) and :class:`ValueError` for a request it refuses
(answered ``error``: a law it does not sample, a parameter it lacks).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

Answer = Callable[[str, dict[str, Any]], dict[str, Any]]


def reply(answer: Answer, line: str) -> dict[str, Any]:
    """The response object to one request line."""
    req = json.loads(line)
    try:
        return {"id": req["id"], "output": answer(req["op"], req["input"])}
    except LookupError:
        return {"id": req["id"], "unsupported": req["op"]}
    except ValueError as exc:
        return {"id": req["id"], "error": str(exc)}


def serve(answer: Answer, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
    """Answer every request line in order, one JSON line each, flushed."""
    for line in stdin:
        if line.strip():
            stdout.write(json.dumps(reply(answer, line)) + "\n")
            stdout.flush()
