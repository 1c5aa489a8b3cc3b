"""Which engines exist and which architectures the fast one implements (a leaf module: the package
``__init__`` and the modules it loads lazily both read it, so it must import nothing of engine/)."""

from __future__ import annotations

ENGINES: tuple[str, ...] = ("fast", "reference")
FAST_ARCHITECTURES: tuple[str, ...] = ("gemma3", "llama")  # the rest run on the reference engine
