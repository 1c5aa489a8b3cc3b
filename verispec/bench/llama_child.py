"""llama.cpp's decoders in a child process: :class:`ChildDecoders` (the bench's side) and
:func:`serve` (the child's side, ``python -m verispec.bench.llama_child``).

The child holds one :class:`LlamaDecoders` and answers the requests of
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
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from verispec.bench.peer import PeerProcess

OPEN_TIMEOUT_S = 300.0  # loading a model (a peer that takes longer is reported as timed out)
RUN_TIMEOUT_S = 900.0  # one request


def child_argv() -> list[str]:
    """The command that starts the child (this interpreter, this module)."""
    return [sys.executable, "-m", "verispec.bench.llama_child"]


class ChildDecoders:
    """:class:`verispec.bench.llama.Decoders` over a child process (see the module docstring).

    ``argv``: the child's command (default :func:`child_argv`; a test passes a stand-in peer)."""

    def __init__(
        self, path: Path, n_ctx: int, k: int, threads: int, seed: int = 0, argv: Sequence[str] | None = None
    ) -> None:
        self._peer = PeerProcess(child_argv() if argv is None else argv, timeout_s=OPEN_TIMEOUT_S)
        try:
            info = self._peer.call("open", path=str(path), n_ctx=n_ctx, k=k, threads=threads, seed=seed)
        except BaseException:
            self._peer.close()
            raise
        self.info: dict[str, Any] = {**dict(info), "process": "child"}
        self._peer.timeout_s = RUN_TIMEOUT_S

    def run(self, name: str, ids: Sequence[int], max_tokens: int, end_ids: frozenset[int]) -> dict[str, Any]:
        result = self._peer.call(
            "run", name=name, ids=[int(i) for i in ids], max_tokens=max_tokens, end_ids=sorted(int(i) for i in end_ids)
        )
        return dict(result)

    def tokenize(self, text: str) -> list[int]:
        return [int(t) for t in self._peer.call("tokenize", text=text)]

    def close(self) -> None:
        self._peer.close()


# -- the child ------------------------------------------------------------------------------------


class LlamaDecoders:
    """llama.cpp plain and prompt lookup on one file, in THIS process (:func:`serve` runs it in
    the child; the bench itself never loads llama.cpp).

    A request goes in as token ids and ends at one of ``end_ids`` (the token is counted, as the
    engine counts it) or after ``max_tokens``; with no ``end_ids`` it decodes exactly
    ``max_tokens`` (``generate`` never stops by itself). Rate: generated tokens over the wall
    time of the whole call, prompt pass included (the engine's ``tokens_per_s``)."""

    def __init__(self, path: Path, n_ctx: int, k: int, threads: int, seed: int = 0) -> None:
        import llama_cpp  # type: ignore[import-not-found, unused-ignore]
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # type: ignore[import-not-found, unused-ignore]

        common: dict[str, Any] = {
            "model_path": str(path),
            "n_ctx": n_ctx,
            "n_batch": min(n_ctx, 2048),
            "n_threads": threads,
            "n_threads_batch": threads,
            "seed": seed,
            "verbose": False,
        }
        self.decoders: dict[str, Any] = {
            "plain": llama_cpp.Llama(**common),
            "prompt_lookup": llama_cpp.Llama(**common, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k)),
        }
        system_info = getattr(llama_cpp, "llama_print_system_info", None)
        self.info: dict[str, Any] = {
            "available": True,
            "version": getattr(llama_cpp, "__version__", None),
            "system_info": system_info().decode("utf-8", "replace").strip() if system_info else None,
            "threads": threads,
            "num_pred_tokens": k,
            "n_ctx": n_ctx,
        }

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenization of ``text`` (special tokens parsed, its own BOS rule)."""
        return [int(t) for t in self.decoders["plain"].tokenize(text.encode("utf-8"), special=True)]

    def run(self, name: str, ids: Sequence[int], max_tokens: int, end_ids: frozenset[int]) -> dict[str, Any]:
        """One greedy request on decoder ``name``: its token ids and tok/s."""
        llm = self.decoders[name]
        llm.reset()  # no KV reuse of an identical earlier prompt: every run pays its prompt pass
        out: list[int] = []
        t0 = time.perf_counter()
        if max_tokens > 0:
            for token in llm.generate(
                list(ids), temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True
            ):
                out.append(int(token))
                if out[-1] in end_ids or len(out) >= max_tokens:
                    break
        elapsed = time.perf_counter() - t0
        return {"tokens": out, "tok_s": len(out) / elapsed if out and elapsed > 0 else 0.0}

    def close(self) -> None:
        self.decoders.clear()


def _replies() -> TextIO:
    """A private copy of stdout for the replies; fd 1 then points at stderr (native prints)."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def serve(stdin: TextIO = sys.stdin) -> int:
    """Answer requests until ``exit`` or end of input (see the module docstring)."""
    replies = _replies()
    decoders: LlamaDecoders | None = None
    for line in stdin:
        request = json.loads(line)
        op, args = request.get("op"), request.get("args", {})
        if op == "exit":
            break
        try:
            if op == "open":
                decoders = LlamaDecoders(
                    Path(args["path"]), int(args["n_ctx"]), int(args["k"]), int(args["threads"]), int(args["seed"])
                )
                result: Any = decoders.info
            elif decoders is None:
                raise RuntimeError(f"request {op!r} before 'open'")
            elif op == "run":
                result = decoders.run(
                    str(args["name"]),
                    [int(i) for i in args["ids"]],
                    int(args["max_tokens"]),
                    frozenset(int(i) for i in args["end_ids"]),
                )
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
