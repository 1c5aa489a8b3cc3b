"""llama.cpp's decoders in a child process: :class:`ChildDecoders` (the bench's side) and
:func:`serve` (the child's side, ``python -m verispec.bench.llama_child``).

The child holds one :class:`verispec.bench.llama.LlamaDecoders` and answers the requests of
:class:`verispec.bench.peer.PeerProcess` (``open``, ``run``, ``tokenize``, ``exit``). Its
replies go to a private copy of the original stdout; file descriptor 1 is pointed at stderr
before llama.cpp loads, so whatever the native code prints cannot corrupt a reply. A fault in
the native code kills only the child: :class:`ChildDecoders` raises
:class:`~verispec.bench.peer.PeerFailed` and the bench reports it as llama.cpp's result.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from verispec.bench.peer import PeerProcess

OPEN_TIMEOUT_S = 300.0  # loading a model (a peer that takes longer is reported as timed out)
RUN_TIMEOUT_S = 900.0   # one request


def child_argv() -> list[str]:
    """The command that starts the child (this interpreter, this module)."""
    return [sys.executable, "-m", "verispec.bench.llama_child"]


class ChildDecoders:
    """:class:`verispec.bench.llama.Decoders` over a child process (see the module docstring).

    ``argv``: the child's command (default :func:`child_argv`; a test passes a stand-in peer)."""

    def __init__(self, path: Path, n_ctx: int, k: int, threads: int, seed: int = 0,
                 argv: Sequence[str] | None = None) -> None:
        self._peer = PeerProcess(child_argv() if argv is None else argv, timeout_s=OPEN_TIMEOUT_S)
        try:
            info = self._peer.call("open", path=str(path), n_ctx=n_ctx, k=k, threads=threads, seed=seed)
        except BaseException:
            self._peer.close()
            raise
        self.info: dict[str, Any] = {**dict(info), "process": "child"}
        self._peer.timeout_s = RUN_TIMEOUT_S

    def run(self, name: str, ids: Sequence[int], max_tokens: int, end_ids: frozenset[int]) -> dict[str, Any]:
        result = self._peer.call("run", name=name, ids=[int(i) for i in ids], max_tokens=max_tokens,
                                 end_ids=sorted(int(i) for i in end_ids))
        return dict(result)

    def tokenize(self, text: str) -> list[int]:
        return [int(t) for t in self._peer.call("tokenize", text=text)]

    def close(self) -> None:
        self._peer.close()


# -- the child ------------------------------------------------------------------------------------

def _replies() -> TextIO:
    """A private copy of stdout for the replies; fd 1 then points at stderr (native prints)."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def serve(stdin: TextIO = sys.stdin) -> int:
    """Answer requests until ``exit`` or end of input (see the module docstring)."""
    from verispec.bench.llama import LlamaDecoders

    replies = _replies()
    decoders: LlamaDecoders | None = None
    for line in stdin:
        request = json.loads(line)
        op, args = request.get("op"), request.get("args", {})
        if op == "exit":
            break
        try:
            if op == "open":
                decoders = LlamaDecoders(Path(args["path"]), int(args["n_ctx"]), int(args["k"]), int(args["threads"]),
                                         int(args["seed"]))
                result: Any = decoders.info
            elif decoders is None:
                raise RuntimeError(f"request {op!r} before 'open'")
            elif op == "run":
                result = decoders.run(str(args["name"]), [int(i) for i in args["ids"]], int(args["max_tokens"]),
                                      frozenset(int(i) for i in args["end_ids"]))
            elif op == "tokenize":
                result = decoders.tokenize(str(args["text"]))
            else:
                raise RuntimeError(f"unknown request {op!r}")
            replies.write(json.dumps({"ok": True, "result": result}) + "\n")
        except Exception as exc:  # a Python error in the peer: its reply, not a crash of the child
            replies.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
    if decoders is not None:
        decoders.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
