"""``--draft-cache`` is untrusted input: only a regular file of bounded size and the right version
is read, its write path is checked before any work, and loading is linear in the file.

Linear time is shown by counting, not timing: loading builds no structure (the first query
builds one index over the kept tokens only, at most ``max_tokens``, whatever the file's length),
and the rest is one vectorized check per id. ``python -m lab.draft_cache_load`` measures MB/s.

The current format (version 2, :mod:`reference.draft_cache_file`) is binary; each way of breaking
it is refused with one line, and a file edited within the format only chooses which texts are
remembered (the structure is always rebuilt from the texts, never read).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

import verispec.reference.suffix_draft as suffix_draft
from verispec.exit_codes import exit_code_for
from verispec.reference.draft_cache_file import JSON_VERSION, MAGIC, surviving, write_texts
from verispec.reference.errors import DraftError
from verispec.reference.suffix_draft import CACHE_VERSION, SuffixCache, SuffixIndex

V = 50


def write_cache(path: Path, texts: object, **fields: object) -> Path:
    """A version-1 (JSON) cache, the format older verispec wrote (still read)."""
    payload = {"version": JSON_VERSION, "fingerprint": "", "depth": 24, "max_tokens": 1 << 16, "texts": texts, **fields}
    path.write_text(json.dumps(payload))
    return path


def write_binary(path: Path, texts: list[list[int]], fingerprint: str = "") -> Path:
    write_texts(path, texts, fingerprint=fingerprint, depth=24, max_tokens=1 << 16)
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


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("seed", range(20))
def test_loading_keeps_exactly_what_remembering_one_by_one_keeps(tmp_path: Path, seed: int, binary: bool) -> None:
    rng = random.Random(seed)
    max_tokens = rng.choice([0, 5, 30, 100])
    lengths = [rng.choice([0, 1, 2, 3, 10, 40, 120, 5000]) for _ in range(rng.randrange(1, 30))]
    texts = [[rng.randrange(V) for _ in range(n)] for n in lengths]
    path = (write_binary if binary else write_cache)(tmp_path / "c.json", texts)
    for bound in (max_tokens, 5000, 1 << 16):
        loaded = SuffixCache.load(path, V, max_tokens=bound)
        assert list(loaded.texts) == remembered_one_by_one(texts, bound)
        assert [tuple(t) for t in surviving(texts, bound)] == list(loaded.texts)


def test_loading_builds_no_structure_and_the_first_query_one_over_the_kept_tokens(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The slow step was building a tree node per substring for every kept token before the
    first proposal (and, earlier, evicting texts it had just inserted). Now loading builds
    nothing, and the first query builds one index over the kept texts only."""
    texts = [[(i + j) % V for j in range(50)] for i in range(400)]  # 20,000 tokens into a 1,000-token cache
    path = write_binary(tmp_path / "c.bin", texts)
    built: list[int] = []

    class Counting(SuffixIndex):
        def __init__(self, kept: list[tuple[int, ...]], depth: int) -> None:
            built.append(sum(len(t) for t in kept))
            super().__init__(kept, depth)

    monkeypatch.setattr(suffix_draft, "SuffixIndex", Counting)
    loaded = SuffixCache.load(path, V, max_tokens=1000)
    assert built == [] and loaded.tokens == 1000 and list(loaded.texts) == [tuple(t) for t in texts[-20:]]
    assert loaded.tree.find(texts[-1][:5]) is not None and loaded.tree.find([1, 1]) is None
    loaded.tree.longest_match(texts[-2][:9], 16, 2)
    assert built == [1000]  # one index, over the 1,000 kept tokens, reused by later queries


def _binary_cases() -> dict[str, tuple[bytes, str]]:
    """Broken version-2 files, each with a fragment of the one-line error it must raise."""
    good = bytearray()
    header = {
        "version": CACHE_VERSION,
        "fingerprint": "abc",
        "depth": 24,
        "max_tokens": 1 << 16,
        "texts": 2,
        "tokens": 5,
    }

    def file(head: object, lengths: list[int], ids: list[int], raw_head: bytes | None = None) -> bytes:
        line = raw_head if raw_head is not None else json.dumps(head).encode()
        return MAGIC + line + b"\n" + np.asarray(lengths, "<u4").tobytes() + np.asarray(ids, "<u4").tobytes()

    good += file(header, [2, 3], [1, 2, 3, 4, 5])
    return {
        "truncated": (bytes(good[:-1]), "truncated or padded"),
        "padded": (bytes(good) + b"\0", "truncated or padded"),
        "lengths do not add up": (file(header, [2, 2], [1, 2, 3, 4, 5]), "add up to 4"),
        "id >= vocabulary": (file(header, [2, 3], [1, 2, 3, V, 5]), "text 1 holds a value outside 0..49"),
        "id 2**32 - 1": (file(header, [2, 3], [1, 2**32 - 1, 3, 4, 5]), "text 0 holds a value outside"),
        "another version": (file({**header, "version": 3}, [2, 3], [1, 2, 3, 4, 5]), "not a version-2"),
        "version as a string": (file({**header, "version": "2"}, [2, 3], [1, 2, 3, 4, 5]), "not a version-2"),
        "another vocabulary": (file({**header, "fingerprint": "zzz"}, [2, 3], [1, 2, 3, 4, 5]), "another vocabulary"),
        "no fingerprint": (
            file({**header, "fingerprint": ""}, [2, 3], [1, 2, 3, 4, 5]),
            "has no vocabulary fingerprint",
        ),
        "negative count": (file({**header, "tokens": -5}, [2, 3], [1, 2, 3, 4, 5]), "must be a count"),
        "bool count": (file({**header, "texts": True}, [2, 3], [1, 2, 3, 4, 5]), "must be a count"),
        "huge count": (file({**header, "tokens": 10**30}, [2, 3], [1, 2, 3, 4, 5]), "truncated or padded"),
        "header not JSON": (file(None, [2, 3], [1, 2, 3, 4, 5], raw_head=b"{version"), "not JSON"),
        "header not an object": (file([1, 2], [2, 3], [1, 2, 3, 4, 5]), "not a version-2"),
        "header too long": (MAGIC + b"{" + b" " * 5000 + b"}\n", "no header line"),
        "header nested": (file(None, [], [], raw_head=b"[" * 100 + b"]" * 100), "nested"),
        "magic only": (MAGIC, "no header line"),
    }


@pytest.mark.parametrize("name", sorted(_binary_cases()))
def test_a_broken_binary_cache_is_one_typed_error(tmp_path: Path, name: str) -> None:
    data, why = _binary_cases()[name]
    path = tmp_path / "c.bin"
    path.write_bytes(data)
    with pytest.raises(DraftError, match=why) as caught:
        SuffixCache.load(path, V, fingerprint="abc")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300
    assert exit_code_for(caught.value) == 4  # a bad input file, not a bad flag


def test_a_binary_cache_edited_within_the_format_only_chooses_the_texts(tmp_path: Path) -> None:
    """The file holds texts, never a structure: an edit that keeps the format valid loads as the
    texts it now spells, and the index over them counts exactly those texts."""
    path = write_binary(tmp_path / "c.bin", [[1, 2, 3, 4], [5, 6, 7]])
    data = bytearray(path.read_bytes())
    data[-4:] = np.asarray([9], "<u4").tobytes()  # the last id: 7 -> 9
    path.write_bytes(bytes(data))
    loaded = SuffixCache.load(path, V)
    assert list(loaded.texts) == [(1, 2, 3, 4), (5, 6, 9)]
    assert loaded.tree.find([6, 9]) is not None and loaded.tree.find([6, 7]) is None
    node = loaded.tree.find([5])
    assert node is not None and node.count == 1 and node.total == 1


def test_the_saved_format_is_the_current_version_and_round_trips(tmp_path: Path) -> None:
    cache = SuffixCache(max_tokens=100, fingerprint="abc")
    cache.remember([1, 2, 3, 4])
    cache.remember([9, 8, 7])
    path = tmp_path / "c.bin"
    cache.save(path)
    assert path.read_bytes().startswith(MAGIC)
    assert SuffixCache.load(path, 10, fingerprint="abc").texts == cache.texts
    old = write_cache(tmp_path / "old.json", [[1, 2, 3, 4], [9, 8, 7]])  # a version-1 file still loads ...
    migrated = SuffixCache.load(old, 10)
    migrated.save(old)  # ... and is rewritten in the current version on the next save
    assert old.read_bytes().startswith(MAGIC) and SuffixCache.load(old, 10).texts == cache.texts


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


@pytest.mark.parametrize(
    "content, why",
    [
        (b"not a cache", "not JSON"),
        (b'{"version": 1, "fingerprint": "", "depth": 24, "max_tokens": 65536, "texts": [[1, 2, 3]]}', "no vocabulary"),
        (MAGIC + b'{"version": 2}\n', "draft cache"),
    ],
    ids=["malformed", "empty fingerprint", "broken header"],
)
def test_generate_with_a_bad_draft_cache_is_an_input_error_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, why: str
) -> None:
    """Through the command: a cache that cannot be used is a bad input file (exit 4, one line naming
    it and why), not a usage error (exit 2); the file is left as it was, nothing is generated. A
    cache without a vocabulary fingerprint cannot have its ids checked against the model: refused."""
    from tests.support.synthetic import Variant, write_synthetic
    from verispec import cli

    model = tmp_path / "tiny.gguf"
    write_synthetic(
        model,
        Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48),
        quant_types=("F16",),
    )
    cache = tmp_path / "cache.bin"
    cache.write_bytes(content)
    argv = ["generate", "--model", str(model), "--prompt", "the model", "--max-tokens", "4"]
    assert cli.main([*argv, "--draft", "suffix", "--draft-cache", str(cache)]) == 4
    captured = capsys.readouterr()
    assert captured.out == "" and why in captured.err and str(cache) in captured.err
    assert cache.read_bytes() == content
