"""The prompt-kind rule: a deterministic function of a prompt's text, for per-kind calibration.

Early exit is calibrated per prompt kind (Mondrian calibration, :mod:`reference.calibration`): each
kind gets its own thresholds and its own guarantee, valid for new prompts OF THAT KIND. The kind
must therefore be computed the same way at calibration and at serve time: by this rule, or
declared by the user (``verispec generate --kind``). The rule looks only at the text (the user's
text, before any chat template), first match wins:

1. ``structured``: the text starts with ``{``, ``[``, ``<`` or ``|`` (JSON, HTML/XML, a table);
2. ``code``: some line starts with a code keyword (``def``, ``class``, ``import``, ``function``,
   ``#include``, ``SELECT`` ...), a ``//`` comment, or ends with ``{``, ``;`` or ``):``;
3. ``structured``: at least two non-blank lines, each a record: it contains a ``,``, ``|``, a tab
   or ``key:`` / ``key: value``, or is a list item (``- x``, ``* x``, ``1. x``);
4. ``chat``: a question or request: it ends with ``?``, or its first word is a question word or
   an imperative (``how``, ``what``, ``explain``, ``give`` ...);
5. ``prose``: anything else (a sentence to continue).

A prompt the rule puts in the "wrong" kind is still covered: the guarantee is for the kind the
rule assigns, and calibration used the same rule.
"""

from __future__ import annotations

import re

PROMPT_KINDS: tuple[str, ...] = ("chat", "code", "structured", "prose")

_CODE_LINE = re.compile(
    r"^\s*(def|class|import|from\s+\S+\s+import|function|const|let|var|async|return|public|private|"
    r"static|fn|func|package|#include|#!|SELECT|INSERT|UPDATE|DELETE|CREATE|WITH)\b"
    r"|^\s*//|^\s*/\*"
)
_CODE_END = re.compile(r"(\{|;|\):|=>)\s*$")
_RECORD = re.compile(r",|\||\t|^\s*([-*]|\d+[.)])(\s|$)|^\s*[\w .'/()-]+:(\s|$)")
_ASKING = frozenset(
    "how what why when where which who whom whose is are can could would should do does did will "
    "explain describe give tell list suggest write summarize compare help recommend name define".split()
)


def prompt_kind(text: str) -> str:
    """The kind of a prompt's text (one of :data:`PROMPT_KINDS`), by the rule in the module docstring."""
    body = text.strip()
    if body[:1] in ("{", "[", "<", "|"):
        return "structured"
    lines = [line for line in body.splitlines() if line.strip()]
    if any(_CODE_LINE.search(line) or _CODE_END.search(line) for line in lines):
        return "code"
    if len(lines) >= 2 and all(_RECORD.search(line) for line in lines):
        return "structured"
    words = re.findall(r"[A-Za-z']+", body)
    if body.endswith("?") or (words and words[0].lower() in _ASKING):
        return "chat"
    return "prose"
