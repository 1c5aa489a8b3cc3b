"""SentencePiece-style BPE (``tokenizer.ggml.model == "llama"``): merge adjacent symbols by score.

As llama.cpp's ``llm_tokenizer_spm_session`` (src/llama-vocab.cpp): the text has already had every
space written as ``▁`` (U+2581). Start from one symbol per character; a pair of adjacent symbols is a
candidate when their concatenation is a token, and candidates are merged highest score first (ties:
the leftmost pair) until none is left. A final symbol that is not a token is necessarily a single
character (every merge produces a token), and is written as its UTF-8 bytes through the ``<0xXX>``
byte-fallback tokens.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

SPACE_ESCAPE = "\u2581"  # '▁', the character SentencePiece writes for a space


def escape_whitespace(text: str) -> str:
    """Every ``" "`` -> ``"▁"`` (llama.cpp ``llama_escape_whitespace``; other whitespace is kept)."""
    return text.replace(" ", SPACE_ESCAPE)


def unescape_whitespace(text: str) -> str:
    """Every ``"▁"`` -> ``" "`` (llama.cpp ``llama_unescape_whitespace``)."""
    return text.replace(SPACE_ESCAPE, " ")


def merge_text(
    text: str,
    vocab: Mapping[str, int],
    scores: Sequence[float],
) -> list[str]:
    """SPM-merge an escaped text into its final symbols (strings), llama.cpp's order.

    Contract: ``"".join(result) == text``. The priority queue is keyed (-score, left index); a popped
    pair is skipped when either side has been merged away or has grown since it was pushed.
    """
    n = len(text)
    if n == 0:
        return []
    start = list(range(n))  # symbol i covers text[start[i] : start[i] + size[i]]
    size = [1] * n  # 0 once merged into its left neighbour
    prev = list(range(-1, n - 1))
    nxt = [*range(1, n), -1]
    queue: list[tuple[float, int, int, int]] = []  # (-score, left, right, joined length)

    def push(left: int, right: int) -> None:
        if left == -1 or right == -1:
            return
        joined = size[left] + size[right]
        token = vocab.get(text[start[left] : start[left] + joined])
        if token is not None:
            heapq.heappush(queue, (-scores[token], left, right, joined))

    for i in range(1, n):
        push(i - 1, i)
    while queue:
        _, left, right, joined = heapq.heappop(queue)
        if size[left] == 0 or size[right] == 0 or size[left] + size[right] != joined:
            continue  # stale
        size[left] = joined
        size[right] = 0
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        push(prev[left], left)
        push(left, nxt[left])

    symbols: list[str] = []
    i = 0
    while i != -1:
        symbols.append(text[start[i] : start[i] + size[i]])
        i = nxt[i]
    return symbols


def tokenize_escaped(
    text: str,
    vocab: Mapping[str, int],
    scores: Sequence[float],
    byte_token: Callable[[int], int],
) -> list[int]:
    """Token ids for an already escaped text: merge, then look up or byte-fall-back each symbol."""
    out: list[int] = []
    for symbol in merge_text(text, vocab, scores):
        token = vocab.get(symbol)
        if token is not None:
            out.append(token)
        else:
            out.extend(byte_token(b) for b in symbol.encode("utf-8"))
    return out
