"""Byte-level BPE (``tokenizer.ggml.model == "gpt2"``): merge adjacent symbols by merge rank.

A word from the pre-tokenizer is first written as UTF-8 bytes, and every byte as one printable
character (GPT-2's byte-to-unicode table, :func:`byte_to_unicode`), so the vocabulary never needs a
raw space or control byte: ``" the"`` becomes ``"Ġthe"``. Then, exactly as llama.cpp's
``llm_tokenizer_bpe_session``: start from one symbol per character, and repeatedly merge the
adjacent pair with the lowest merge rank (ties: the leftmost pair) until no adjacent pair is a merge.
Each final symbol is looked up in the vocabulary.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from functools import lru_cache


@lru_cache(maxsize=1)
def byte_to_unicode() -> tuple[str, ...]:
    """GPT-2's table: byte value -> the one character that stands for it in the vocabulary.

    Printable Latin-1 bytes (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) stand for themselves; the
    other 68 bytes are given the code points 256, 257, ... in byte order.
    """
    table: list[str] = [""] * 256
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    for b in printable:
        table[b] = chr(b)
    extra = 0
    for b in range(256):
        if not table[b]:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table)


@lru_cache(maxsize=1)
def unicode_to_byte() -> Mapping[str, int]:
    """The inverse of :func:`byte_to_unicode`."""
    return {ch: b for b, ch in enumerate(byte_to_unicode())}


def byte_encode(word: str) -> str:
    """``word`` as UTF-8 bytes, each byte written as its GPT-2 character."""
    table = byte_to_unicode()
    return "".join(table[b] for b in word.encode("utf-8"))


def byte_decode(piece: str) -> bytes:
    """The bytes a byte-encoded vocabulary string stands for.

    A character outside GPT-2's table (possible only in a hand-made vocabulary) stands for its own
    UTF-8 bytes; llama.cpp writes a ``[UNK_BYTE_0x..]`` marker there instead.
    """
    inverse = unicode_to_byte()
    out = bytearray()
    for ch in piece:
        b = inverse.get(ch)
        if b is None:
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


def parse_merges(merges: Sequence[str]) -> dict[tuple[str, str], int]:
    """``tokenizer.ggml.merges`` -> {(left, right): rank}; rank = position in the list.

    Each entry is split at the first space after its first character (llama.cpp:
    ``word.find(' ', 1)``); an entry without one is the pair ("", ""), which can never match. When a
    pair occurs twice, the first (lowest) rank is kept, as ``std::unordered_map::emplace`` does.
    """
    ranks: dict[tuple[str, str], int] = {}
    for rank, entry in enumerate(merges):
        cut = entry.find(" ", 1)
        pair = (entry[:cut], entry[cut + 1 :]) if cut >= 0 else ("", "")
        ranks.setdefault(pair, rank)
    return ranks


def merge_word(word: str, ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """BPE-merge one byte-encoded word into its final symbols (strings), llama.cpp's order.

    Contract: ``"".join(result) == word``. Symbols live in a doubly linked list over the characters
    of ``word``; a priority queue holds candidate pairs keyed (rank, left index); a popped pair is
    skipped when either side has changed since it was pushed.
    """
    n = len(word)
    if n == 0:
        return []
    start = list(range(n))  # symbol i covers word[start[i] : start[i] + size[i]]
    size = [1] * n  # 0 once merged into its left neighbour
    prev = list(range(-1, n - 1))
    nxt = [*range(1, n), -1]
    queue: list[tuple[int, int, int, str]] = []  # (rank, left, right, left text + right text)

    def text(i: int) -> str:
        return word[start[i] : start[i] + size[i]]

    def push(left: int, right: int) -> None:
        if left == -1 or right == -1:
            return
        a, b = text(left), text(right)
        rank = ranks.get((a, b))
        if rank is not None:
            heapq.heappush(queue, (rank, left, right, a + b))

    for i in range(1, n):
        push(i - 1, i)
    while queue:
        _, left, right, joined = heapq.heappop(queue)
        if size[left] == 0 or size[right] == 0 or text(left) + text(right) != joined:
            continue  # stale: one side was merged into something else meanwhile
        size[left] += size[right]
        size[right] = 0
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        push(prev[left], left)
        push(left, nxt[left])

    symbols: list[str] = []
    i = 0
    while i != -1:
        symbols.append(text(i))
        i = nxt[i]
    return symbols


def symbol_ids(symbol: str, vocab: Mapping[str, int]) -> list[int]:
    """The token ids for one final BPE symbol.

    The symbol itself when it is a token. Otherwise llama.cpp falls back to looking up each single
    *byte* of the symbol's UTF-8 text as a token and silently drops bytes that are not one; only an
    ASCII byte can ever match, so the bytes of non-ASCII GPT-2 characters are lost. This cannot happen
    when the vocabulary holds all 256 byte characters and every merge result (see
    ``Tokenizer.roundtrip_caveats``).
    """
    token = vocab.get(symbol)
    if token is not None:
        return [token]
    out: list[int] = []
    for b in symbol.encode("utf-8"):
        if b < 0x80:
            t = vocab.get(chr(b))
            if t is not None:
                out.append(t)
    return out
