"""The types the decoder checks share: a prefix of token ids and the two ways of getting logits after one.

Prefix       prompt ids then emitted ids, as a tuple (hashable: laws are cached by prefix)
LogitsOf     ``logits_of(prefix) -> [V]``: the target's logits row after ``prefix`` (first-m checks)
ForcedRows   ``rows_of(prompt + ids, len(prompt)) -> [len(ids), V]``: one teacher-forced pass, the
             logits predicting each emitted id (the depth test)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Prefix = tuple[int, ...]
LogitsOf = Callable[[Prefix], Any]
ForcedRows = Callable[[Prefix, int], Any]
