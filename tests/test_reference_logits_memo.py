"""spec/decoder/check.py ``ReferenceLogits``: its memo keeps copies of rows, within its stated bound.

A row memoized as ``np.asarray(logits[i])`` of a float32 forward is a VIEW: it keeps the whole
[T, V] forward alive (T times the row's bytes), and a memo that never evicts grows with every new
prefix (2,800 prefixes of a 322-id toy retained 125 MB; a depth run of a real vocabulary, GBs).
Here on a tiny GGUF (64 ids): every memoized row owns its bytes (no base array), the memo's bytes
(own rows only, so the count is the memory they hold) stay within ``memo_bytes`` over a long
stream of new prefixes, the most recently used rows stay and the rows are the forward's, bit for
bit. Peak RSS of a long run: lab/reference_logits_memory.py (a benchmark, not a timed test).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.tiny_gguf import one_layer_model
from verispec.reference.model import Model
from verispec.spec.decoder.check import MEMO_BYTES, ReferenceLogits

VOCAB = 64
ROW_BYTES = VOCAB * 4


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    return one_layer_model(tmp_path_factory.mktemp("memo") / "tiny.gguf", n_vocab=VOCAB)


def retained_bytes(memo: ReferenceLogits) -> int:
    """Bytes the memo's rows keep alive: each row's own buffer, or the whole array it views."""
    held: dict[int, int] = {}
    for row in memo.memo.values():
        owner = row if row.base is None else row.base
        held[id(owner)] = owner.nbytes
    return sum(held.values())


def test_rows_are_copies_and_the_memo_stays_within_its_bound(model: Model) -> None:
    bound = 50 * ROW_BYTES
    logits = ReferenceLogits(model, memo_bytes=bound)
    rng = np.random.default_rng(0)
    for _ in range(40):  # 40 new generations of 30 ids after a prompt: 1,200+ new prefixes
        logits((1, 5, 9) + tuple(int(t) for t in rng.integers(3, VOCAB, 30)))
        assert all(row.base is None for row in logits.memo.values())  # copies, no view of a forward
        assert retained_bytes(logits) == logits.retained <= bound
    assert len(logits.memo) == 50


def test_the_memo_evicts_the_least_recently_used_and_keeps_exact_rows(model: Model) -> None:
    logits = ReferenceLogits(model, memo_bytes=3 * ROW_BYTES)
    prompt = (1, 5, 9)
    first = logits(prompt).copy()  # memoizes (1,), (1, 5), (1, 5, 9)
    logits((1,))  # a hit: (1,) is now the most recently used
    logits((2, 6))  # two new rows evict the two least recently used: (1, 5) and (1, 5, 9)
    assert list(logits.memo) == [(1,), (2,), (2, 6)] and logits.forwards == 2
    again = logits(prompt)  # evicted: a new forward
    whole = np.asarray(model.forward(list(prompt), model.new_cache(3)).logits[-1], dtype=np.float32)
    assert logits.forwards == 3 and np.array_equal(first, whole) and np.array_equal(again, whole)
    logits(prompt)
    assert logits.forwards == 3  # now a hit
    assert MEMO_BYTES == 256 * 2**20  # the stated default bound
