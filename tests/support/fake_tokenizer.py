"""A fake tokenizer with just what a decode loop needs: EOG ids, no BOS, a stream decoder that
spells each id as one letter (shared by the decode-loop tests)."""

from __future__ import annotations


class FakeDecoder:
    def push(self, token: int) -> str:
        return chr(ord("a") + token % 26)

    def flush(self) -> str:
        return ""


class FakeTokenizer:
    """Just what decoding needs: EOG ids, BOS, a stream decoder (id -> one letter)."""

    def __init__(self, eog: frozenset[int] = frozenset()) -> None:
        self.eog_ids = eog
        self.bos_id = None

    def stream_decoder(self) -> FakeDecoder:
        return FakeDecoder()
