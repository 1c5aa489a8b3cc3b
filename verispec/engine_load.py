"""Loading a model for a CLI command on the engine its ``--engine`` / ``--weights`` flags name.

:func:`verispec.commands.request.load` stays the reference loader (typed :class:`Model`, used by
calibrate and the early-exit measurements); :func:`load_engine` is the same thing for any engine.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from verispec.engine import FAST_ARCHITECTURES, load_model
from verispec.engine.model import FastModel
from verispec.reference.chat import ChatFormat, optional_chat_format
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model
from verispec.reference.tokenizer import Tokenizer
from verispec.registry import resolve_model


@dataclass(frozen=True)
class EngineLoaded:
    """A model on either engine, its tokenizer, and its chat format (None when it has none)."""

    model: Model | FastModel
    tokenizer: Tokenizer
    chat: ChatFormat | None


def load_engine(
    source: "str | GGUFFile", *, need_chat: bool = False, engine: str = "fast", weights: str = "f32",
    backend: str = "auto",
) -> EngineLoaded:
    """Resolve a registry name or path (or take an open file) and load it on ``engine`` with
    ``weights`` on ``backend``.

    ModelError for an unknown engine / weights mode, InsufficientMemory before loading when the
    weights will not fit; with ``need_chat`` a model without a chat format is a ChatFormatError.
    """
    if isinstance(source, GGUFFile):
        return _load(source, need_chat=need_chat, engine=engine, weights=weights, backend=backend)
    with GGUFFile.open(resolve_model(source)) as f:
        return _load(f, need_chat=need_chat, engine=engine, weights=weights, backend=backend)


def _load(f: GGUFFile, *, need_chat: bool, engine: str, weights: str, backend: str) -> EngineLoaded:
    model = load_model(f, engine=engine, weights=weights, backend=backend)
    if engine == "fast" and isinstance(model, Model):  # said once, on stderr: never a silent switch
        print(
            f"verispec: note: the fast engine implements {', '.join(FAST_ARCHITECTURES)}; "
            f"running {model.config.arch} on the reference engine",
            file=sys.stderr,
        )
    tokenizer = Tokenizer.from_gguf(f.metadata)
    chat = optional_chat_format(f.metadata, required=need_chat)
    return EngineLoaded(model, tokenizer, chat)
