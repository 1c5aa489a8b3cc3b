"""Pre-tokenization for byte-level BPE: cut text into words before any merge happens.

llama.cpp (src/llama-vocab.cpp, ``llm_tokenizer_bpe``) picks a list of regexes by
``tokenizer.ggml.pre`` and applies them one after the other: each regex cuts every piece produced so
far into its matches and the gaps between matches (src/unicode.cpp, ``unicode_regex_split``). It does
not run a general regex engine for the GPT-2 pattern; it runs a hand-written scanner over per-code-
point category flags (``unicode_regex_split_custom_gpt2``), and simple character-class patterns run
through ``std::regex`` on a "collapsed" text where every non-ASCII code point is replaced by one byte
standing for its category. This module reproduces both, in plain Python:

- categories come from :mod:`unicodedata` (``\\p{L}`` = general category L*, ``\\p{N}`` = N*,
  ``\\p{P}`` = P*), and whitespace is the Unicode ``White_Space`` property, exactly the set in
  llama.cpp's ``unicode_set_whitespace``;
- the GPT-2 scanner is a transcription of llama.cpp's, branch for branch;
- a character-class pattern is a predicate on one code point, matched either as maximal runs
  (``[...]+``) or as fixed-length groups (``[0-9][0-9][0-9]``).

Why not the ``regex`` module: llama.cpp itself does not evaluate these patterns with a regex engine,
so the faithful reference is the same scanner; and it keeps the runtime dependencies to NumPy.

Known deviation: llama.cpp's category table was generated from a newer Unicode version than the one
in Python's :mod:`unicodedata` (``unicodedata.unidata_version``; 14.0.0 on Python 3.11). A code point
assigned after that version is "unassigned" here (category Cn, handled like punctuation), while
llama.cpp knows its real category (usually a letter). Only text containing such code points can
split differently.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from verispec.reference.errors import TokenizerError

# The Unicode White_Space property (PropList.txt), identical to llama.cpp's unicode_set_whitespace.
WHITE_SPACE: frozenset[str] = frozenset(
    chr(c)
    for c in (
        0x09,
        0x0A,
        0x0B,
        0x0C,
        0x0D,
        0x20,
        0x85,
        0xA0,
        0x1680,
        *range(0x2000, 0x200B),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
    )
)


@lru_cache(maxsize=65536)
def category(ch: str) -> str:
    """The one-letter Unicode major category of ``ch``: L, N, P, S, M, Z or C (C includes Cn)."""
    return unicodedata.category(ch)[0]


def is_whitespace(ch: str) -> bool:
    """True iff ``ch`` has the Unicode White_Space property (llama.cpp ``flags.is_whitespace``)."""
    return ch in WHITE_SPACE


def is_letter(ch: str) -> bool:
    """``\\p{L}``."""
    return category(ch) == "L"


def is_number(ch: str) -> bool:
    """``\\p{N}``."""
    return category(ch) == "N"


# --------------------------------------------------------------------------------------------------
# The GPT-2 pattern, scanned as llama.cpp's unicode_regex_split_custom_gpt2 does:
#   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# --------------------------------------------------------------------------------------------------

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def split_gpt2(piece: str) -> list[str]:
    """Cut ``piece`` into the matches of :data:`GPT2_PATTERN`, as llama.cpp's custom scanner does.

    The concatenation of the result is ``piece``; no element is empty. Beyond ``piece`` nothing is
    seen: the lookahead ``(?!\\S)`` treats the end of the piece as "no character".
    """
    n = len(piece)
    words: list[str] = []
    prev_end = 0

    def add(end: int) -> int:
        nonlocal prev_end
        length = end - prev_end
        if length > 0:
            words.append(piece[prev_end:end])
        prev_end = end
        return length

    def char(i: int) -> str:
        return piece[i] if 0 <= i < n else ""  # "" plays llama.cpp's OUT_OF_RANGE / empty flags

    def letter(i: int) -> bool:
        return i < n and is_letter(piece[i])

    def number(i: int) -> bool:
        return i < n and is_number(piece[i])

    def other(i: int) -> bool:  # [^\s\p{L}\p{N}] and inside the piece
        return i < n and not (is_whitespace(piece[i]) or is_letter(piece[i]) or is_number(piece[i]))

    pos = 0
    while pos < n:
        c = piece[pos]
        # 's|'t|'re|'ve|'m|'ll|'d  (case-sensitive, as in the original GPT-2 pattern)
        if c == "'" and pos + 1 < n:
            c1 = piece[pos + 1]
            if c1 in ("s", "t", "m", "d"):
                pos += add(pos + 2)
                continue
            if pos + 2 < n and c1 + piece[pos + 2] in ("re", "ve", "ll"):
                pos += add(pos + 3)
                continue
        # an optional leading space belongs to the next letter / number / other run
        probe = pos + 1 if c == " " else pos
        if letter(probe):  # ' ?\p{L}+'
            pos = probe
            while letter(pos):
                pos += 1
            add(pos)
            continue
        if number(probe):  # ' ?\p{N}+'
            pos = probe
            while number(pos):
                pos += 1
            add(pos)
            continue
        if other(probe):  # ' ?[^\s\p{L}\p{N}]+'
            pos = probe
            while other(pos):
                pos += 1
            add(pos)
            continue
        spaces = 0
        while pos + spaces < n and is_whitespace(piece[pos + spaces]):
            spaces += 1
        if spaces > 1 and char(pos + spaces) != "":  # '\s+(?!\S)': leave the last space to the word
            pos += spaces - 1
            add(pos)
            continue
        if spaces > 0:  # '\s+'
            pos += spaces
            add(pos)
            continue
        pos += 1  # no alternative matched (unreachable for valid text; kept as in llama.cpp)
        add(pos)
    return words


# --------------------------------------------------------------------------------------------------
# Character-class patterns (llama.cpp runs them through std::regex on the collapsed text).
# --------------------------------------------------------------------------------------------------


def _punctuation_or_math(ch: str) -> bool:
    # [\p{P}\$\+<=>\^~\|]: collapsed, a non-ASCII White_Space code point is never \p{P}.
    return (category(ch) == "P" and not is_whitespace(ch)) or ch in "$+<=>^~|"


def _number(ch: str) -> bool:
    # \p{N}: collapsed, a non-ASCII White_Space code point is never \p{N}.
    return category(ch) == "N" and not is_whitespace(ch)


def _ascii_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


@dataclass(frozen=True)
class ClassSplit:
    """One character-class regex: ``group`` consecutive class members per match, or a maximal run.

    ``run=True``: ``[C]+``. ``run=False``: ``C`` repeated exactly ``group`` times (``\\p{N}`` is
    group 1, ``[0-9][0-9][0-9]`` is group 3).
    """

    pattern: str
    member: Callable[[str], bool]
    run: bool
    group: int = 1

    def matches(self, piece: str) -> list[tuple[int, int]]:
        """Non-overlapping leftmost matches in ``piece`` as (start, end), like std::regex_iterator."""
        spans: list[tuple[int, int]] = []
        n = len(piece)
        i = 0
        while i < n:
            if not self.member(piece[i]):
                i += 1
                continue
            j = i
            while j < n and self.member(piece[j]) and (self.run or j - i < self.group):
                j += 1
            if self.run or j - i == self.group:
                spans.append((i, j))
                i = j
            else:
                i += 1  # too short a group here: the next match may start one later
        return spans

    def split(self, piece: str) -> list[str]:
        """Cut ``piece`` into matches and the gaps between them (unicode_regex_split_stl)."""
        out: list[str] = []
        start = 0
        for a, b in self.matches(piece):
            if a > start:
                out.append(piece[start:a])
            out.append(piece[a:b])
            start = b
        if start < len(piece):
            out.append(piece[start:])
        return out


@dataclass(frozen=True)
class Gpt2Split:
    """The GPT-2 pattern as a pipeline stage."""

    pattern: str = GPT2_PATTERN

    def split(self, piece: str) -> list[str]:
        return split_gpt2(piece)


Stage = ClassSplit | Gpt2Split

NUMBER_EACH = ClassSplit(r"\p{N}", _number, run=False, group=1)
NUMBER_RUN = ClassSplit(r"\p{N}+", _number, run=True)
PUNCT_RUN = ClassSplit(r"[\p{P}\$\+<=>\^~\|]+", _punctuation_or_math, run=True)
DIGITS_3 = ClassSplit(r"[0-9][0-9][0-9]", _ascii_digit, run=False, group=3)
GPT2 = Gpt2Split()

# llama.cpp's regex lists, by pre-tokenizer family (llm_tokenizer_bpe's constructor).
PIPELINES: dict[str, tuple[Stage, ...]] = {
    "gpt2": (GPT2,),
    "smollm": (NUMBER_EACH, GPT2),
    "default": (PUNCT_RUN, GPT2, NUMBER_RUN, DIGITS_3),
}

# tokenizer.ggml.pre -> family, for the names llama.cpp maps to these regex lists and no other flag
# that changes encoding (pre-tokenizers that add a SEP token or ignore merges are not listed).
PRE_FAMILY: dict[str, str] = {
    **{
        name: "gpt2"
        for name in (
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        )
    },
    **{
        name: "smollm"
        for name in (
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        )
    },
    "default": "default",
    "": "default",  # absent key: llama.cpp warns and uses the default list
}


def pipeline_for(pre: str) -> tuple[Stage, ...]:
    """The regex stages for ``tokenizer.ggml.pre`` = ``pre``; TokenizerError if not supported."""
    family = PRE_FAMILY.get(pre)
    if family is None:
        raise TokenizerError(
            f"unsupported pre-tokenizer tokenizer.ggml.pre={pre!r} "
            f"(supported: {', '.join(sorted(k for k in PRE_FAMILY if k))})"
        )
    return PIPELINES[family]


def pretokenize(text: str, stages: Sequence[Stage]) -> list[str]:
    """Apply ``stages`` in order, each to every piece the previous ones produced.

    Contract: ``"".join(result) == text`` and no element is empty.
    """
    pieces = [text] if text else []
    for stage in stages:
        pieces = [word for piece in pieces for word in stage.split(piece)]
    return pieces
