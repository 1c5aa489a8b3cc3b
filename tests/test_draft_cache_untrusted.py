"""``--draft-cache`` is untrusted input: only a regular file of bounded size and the right version
is read, its write path is checked before any work, and loading is linear in the file.

Linear time is proved by counting, not timing: loading inserts only the texts that survive
eviction (``remove_text``, the undo of an insertion, is never called while loading), so the work
is one parse and one check per id plus at most ``max_tokens`` x depth node insertions, whatever
the file's length.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

import verispec.reference.suffix_draft as suffix_draft
from verispec.reference.errors import DraftError
from verispec.reference.suffix_draft import CACHE_VERSION, SuffixCache, SuffixTree, surviving

V = 50


def write_cache(path: Path, texts: object, **fields: object) -> Path:
    payload = {"version": CACHE_VERSION, "fingerprint": "", "depth": 24, "max_tokens": 1 << 16, "texts": texts, **fields}
    path.write_text(json.dumps(payload))
    return path


def test_a_device_is_refused_before_reading() -> None:
    with pytest.raises(DraftError, match="not a regular file"):
        SuffixCache.load(Path("/dev/zero"), V)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "cache.json"
    os.mkfifo(fifo)
    with pytest.raises(DraftError, match="not a regular file"):
        SuffixCache.load(fifo, V)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DraftError, match="not a regular file"):
        SuffixCache.load(tmp_path, V)


def test_an_oversized_file_is_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_cache(tmp_path / "c.json", [[1, 2, 3]] * 100)
    monkeypatch.setattr(suffix_draft, "CACHE_FILE_BYTES", 64)
    with pytest.raises(DraftError, match="bytes"):
        SuffixCache.load(path, V)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"version": 2, "texts": []}', "version"),
        ('{"version": 1, "texts": [[1, 2, ' + "9" * 5000 + "]]}", "unacceptable JSON value"),
        ('{"version": 1, "texts": ' + "[" * 10_000 + "]" * 10_000 + "}", "nested"),
        ('{"version": 1, "texts": [[1, true, 2]]}', "outside 0..49"),
        ('{"version": 1, "texts": [[1, 2.0, 2]]}', "outside 0..49"),
        ('{"version": 1, "texts": [[1, -1, 2]]}', "outside 0..49"),
        ('{"version": 1, "texts": [[1, 50, 2]]}', "outside 0..49"),
        ('{"version": 1, "texts": [[1, NaN]]}', "JSON"),
        ('{"version": 1, "texts": [[1, 2]]', "not JSON"),
        ("\xff\xfe", "not UTF-8"),
    ],
)
def test_a_malformed_cache_is_one_typed_error(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(DraftError, match=why) as caught:
        SuffixCache.load(path, V)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def remembered_one_by_one(texts: list[list[int]], max_tokens: int) -> list[tuple[int, ...]]:
    cache = SuffixCache(max_tokens)
    for text in texts:
        cache.remember(text)
    return list(cache.texts)


@pytest.mark.parametrize("seed", range(20))
def test_loading_keeps_exactly_what_remembering_one_by_one_keeps(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    max_tokens = rng.choice([0, 5, 30, 100])
    texts = [[rng.randrange(V) for _ in range(rng.choice([0, 1, 2, 3, 10, 40, 120]))] for _ in range(rng.randrange(1, 30))]
    path = write_cache(tmp_path / "c.json", texts)
    loaded = SuffixCache.load(path, V, max_tokens=max_tokens)
    assert list(loaded.texts) == remembered_one_by_one(texts, max_tokens)
    assert [tuple(t) for t in surviving(texts, max_tokens)] == list(loaded.texts)


def test_loading_never_undoes_an_insertion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quadratic step was remembering every text and evicting the oldest: each eviction
    walked the evicted text again. Loading now inserts the survivors only."""
    texts = [[(i + j) % V for j in range(50)] for i in range(400)]  # 20,000 tokens into a 1,000-token cache
    path = write_cache(tmp_path / "c.json", texts)

    def forbidden(self: SuffixTree, tokens: object) -> None:
        raise AssertionError("load() evicted a text it had just inserted")

    monkeypatch.setattr(SuffixTree, "remove_text", forbidden)
    loaded = SuffixCache.load(path, V, max_tokens=1000)
    assert loaded.tokens == 1000 and list(loaded.texts) == [tuple(t) for t in texts[-20:]]


def test_an_unwritable_cache_path_is_refused_before_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DraftError, match="cannot be written"):
        SuffixCache.check_writable(blocker / "cache.json")  # its folder is a file
    with pytest.raises(DraftError, match="not a regular file"):
        SuffixCache.check_writable(tmp_path)  # a directory where the cache would go
    SuffixCache.check_writable(tmp_path / "new" / "deeper" / "cache.json")  # save() creates folders


def test_generate_refuses_an_unwritable_draft_cache_before_printing(tmp_path: Path) -> None:
    from verispec.commands.speculative import draft_options

    blocker = tmp_path / "file"
    blocker.write_text("x")

    class Args:
        draft = "suffix"
        k = 4
        p_min = 0.0
        adaptive = False
        draft_cache = str(blocker / "cache.json")

    with pytest.raises(DraftError, match="cannot be written"):
        draft_options(Args())  # type: ignore[arg-type]
