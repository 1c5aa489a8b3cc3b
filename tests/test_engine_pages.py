"""engine.pages.drop_folder_pages: the resident pages of clean file mappings under a folder go,
their bytes stay; a mapping the process wrote to (copy-on-write pages) is left alone."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from verispec.engine import pages
from verispec.engine.pages import batched_drops, clean_mappings, drop_folder_pages

PAGES = 16


def _resident_kib(path: Path) -> int:
    """Rss of this process's mappings of ``path`` (kB, from /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and not head[0].endswith(":"):
            inside = len(head) > 5 and head[5] == str(path)
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_clean_mapping_pages_are_dropped_and_its_bytes_kept(tmp_path: Path) -> None:
    data = np.random.default_rng(0).integers(0, 256, PAGES * mmap.PAGESIZE, dtype=np.uint8)
    clean, written = tmp_path / "clean.bin", tmp_path / "written.bin"
    data.tofile(clean)
    data.tofile(written)
    a = np.memmap(clean, dtype=np.uint8, mode="c")  # MAP_PRIVATE, as onnxruntime maps external data
    b = np.memmap(written, dtype=np.uint8, mode="c")
    assert int(a.sum()) == int(data.sum()) == int(b.sum())  # every page read: resident
    b[0] ^= 1  # one copy-on-write page: this mapping must not be advised (it would lose the write)
    assert _resident_kib(clean) >= PAGES * mmap.PAGESIZE // 1024
    advised = drop_folder_pages(str(tmp_path))
    assert advised == PAGES * mmap.PAGESIZE  # the clean mapping only
    assert _resident_kib(clean) == 0
    assert np.array_equal(a, data)  # faulted back in from the file
    assert b[0] == data[0] ^ 1 and np.array_equal(b[1:], data[1:])


def test_clean_mappings_parses_headers_and_skips_other_folders() -> None:
    smaps = "\n".join(
        [
            "7f0000000000-7f0000004000 rw-p 00000000 fe:00 1   /tmp/x/weights.bin",
            "Rss:                  16 kB",
            "Anonymous:             0 kB",
            "7f0000004000-7f0000008000 rw-p 00004000 fe:00 1   /tmp/x/weights.bin",
            "Anonymous:             4 kB",
            "7f0000008000-7f000000c000 rw-p 00000000 fe:00 2   /tmp/xy/weights.bin",
            "Anonymous:             0 kB",
            "7f000000c000-7f0000010000 rw-p 00000000 00:00 0 ",
            "Anonymous:             0 kB",
        ]
    )
    assert clean_mappings("/tmp/x", smaps) == [(0x7F0000000000, 0x7F0000004000)]


def test_clean_mappings_takes_several_folders() -> None:
    smaps = "\n".join(
        [
            "7f0000000000-7f0000004000 r--p 00000000 fe:00 1   /tmp/a/weights.bin (deleted)",
            "Anonymous:             0 kB",
            "7f0000004000-7f0000008000 r--p 00000000 fe:00 2   /tmp/b/weights.bin",
            "Anonymous:             0 kB",
            "7f0000008000-7f000000c000 r--p 00000000 fe:00 3   /tmp/c/weights.bin",
            "Anonymous:             0 kB",
        ]
    )
    # a deleted file's mapping keeps its path (the batched pass runs after the folders are gone)
    assert clean_mappings(("/tmp/a", "/tmp/b"), smaps) == [
        (0x7F0000000000, 0x7F0000004000),
        (0x7F0000004000, 0x7F0000008000),
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_batched_drops_advise_every_queued_folder_with_one_read_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside batched_drops the folders wait; every BATCH_FOLDERS of them, and at the end, one pass
    advises them all: the same pages dropped as one call a folder, the written mapping still kept."""
    data = np.random.default_rng(1).integers(0, 256, PAGES * mmap.PAGESIZE, dtype=np.uint8)
    folders = [tmp_path / f"graph{i}" for i in range(5)]
    maps = []
    for folder in folders:
        folder.mkdir()
        data.tofile(folder / "weights.bin")
        maps.append(np.memmap(folder / "weights.bin", dtype=np.uint8, mode="c"))
        assert int(maps[-1].sum()) == int(data.sum())  # resident
    maps[3][0] ^= 1  # written: never advised
    passes: list[tuple[str, ...]] = []
    real_drop = pages.drop_folders

    def counting_drop(batch: tuple[str, ...]) -> int:
        passes.append(batch)
        return real_drop(batch)

    monkeypatch.setattr(pages, "drop_folders", counting_drop)
    monkeypatch.setattr(pages, "BATCH_FOLDERS", 2)
    with batched_drops():
        with batched_drops():  # nested: the outer block drops
            for folder in folders:
                assert drop_folder_pages(str(folder)) == 0  # queued
        assert _resident_kib(folders[4] / "weights.bin") > 0  # the last folder still waits
    assert passes == [tuple(str(f) for f in folders[:2]), tuple(str(f) for f in folders[2:4]), (str(folders[4]),)]
    assert [_resident_kib(folder / "weights.bin") > 0 for folder in folders] == [False, False, False, True, False]
    for i in range(len(folders)):
        assert np.array_equal(maps[i][1:], data[1:])  # faulted back in from the file
    assert maps[3][0] == data[0] ^ 1
    assert drop_folder_pages(str(folders[0])) == PAGES * mmap.PAGESIZE  # outside: advised at once
    assert len(passes) == 4  # three batches, then one call outside


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_drop_mapping_releases_the_whole_file_and_keeps_its_bytes(tmp_path: Path) -> None:
    """A GGUF load's last step: every page of the read-only file mapping goes, not only the
    view's; the bytes read back the same. Anonymous memory (a GGUF parsed from bytes) is refused."""
    data = np.random.default_rng(2).integers(0, 256, PAGES * mmap.PAGESIZE, dtype=np.uint8)
    path = tmp_path / "model.bin"
    data.tofile(path)
    whole = np.memmap(path, dtype=np.uint8, mode="r")  # as GGUFFile.open maps a model
    assert int(whole.sum()) == int(data.sum())  # every page resident
    view = np.asarray(whole[5 : 2 * mmap.PAGESIZE + 7]).view(np.ndarray)  # a tensor-like slice
    assert _resident_kib(path) >= PAGES * mmap.PAGESIZE // 1024
    assert pages.drop_mapping(view)
    assert _resident_kib(path) == 0
    assert np.array_equal(whole, data) and np.array_equal(view, data[5 : 2 * mmap.PAGESIZE + 7])
    private = np.array(data)  # anonymous memory: advising it would zero it
    assert not pages.drop_mapping(private[3:100])
    assert np.array_equal(private, data)
    assert not pages.drop_mapping(np.frombuffer(data.tobytes(), dtype=np.uint8))


def _clean_mappings_line_by_line(folders: tuple[str, ...], smaps: str) -> list[tuple[int, int]]:
    """The specification clean_mappings meets: every line of smaps read in turn."""
    prefix = tuple(folder.rstrip("/") + "/" for folder in folders)
    found: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    written = 0
    for line in smaps.splitlines():
        head = line.split(maxsplit=5)
        if not head:
            continue
        if not head[0].endswith(":"):
            if current is not None and written == 0:
                found.append(current)
            low, _, high = head[0].partition("-")
            path = head[5] if len(head) > 5 else ""
            current = (int(low, 16), int(high, 16)) if path.startswith(prefix) else None
            written = 0
        elif head[0] == "Anonymous:" and current is not None:
            written += int(head[1])
    if current is not None and written == 0:
        found.append(current)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_clean_mappings_reads_only_the_folders_blocks_and_finds_what_every_line_finds(tmp_path: Path) -> None:
    """clean_mappings parses only the blocks whose header names a folder (a long-lived process has
    thousands of mappings): on this process's own smaps, with clean, written and deleted mappings in
    three folders, and on text where a folder shows up outside a path's start, in a key line and in
    a last block with no newline, it finds what reading every line finds."""
    data = np.arange(4 * mmap.PAGESIZE, dtype=np.int64).astype(np.uint8)
    held = []
    for i in range(12):
        folder = tmp_path / f"graph{i % 3}"
        folder.mkdir(exist_ok=True)
        data.tofile(folder / f"{i}.bin")
        held.append(np.memmap(folder / f"{i}.bin", dtype=np.uint8, mode="c"))
        assert int(held[-1].sum()) == int(data.sum())
        if i % 4 == 0:
            held[-1][0] ^= 1  # a written mapping
        if i % 5 == 0:
            (folder / f"{i}.bin").unlink()  # a deleted file's mapping
    smaps = Path("/proc/self/smaps").read_text()
    crafted = "\n".join(
        [
            "7f0000000000-7f0000004000 r--p 00000000 fe:00 1   /elsewhere/tmp/x/weights.bin",
            "Anonymous:             0 kB",
            "VmFlags: rd mr /tmp/x/",
            "7f0000004000-7f0000008000 r--p 00000000 fe:00 2   /tmp/x/a.bin",
            "",
            "Anonymous:             0 kB",
            "7f0000008000-7f000000c000 r--p 00000000 fe:00 2   /tmp/x/b.bin",
            "Anonymous:             4 kB",
            "7f000000c000-7f0000010000 r--p 00000000 fe:00 3   /tmp/x/c.bin",
            "Rss:                   4 kB",
        ]
    )
    cases = [(str(tmp_path),), (str(tmp_path / "graph0"),), (str(tmp_path / "graph1"), str(tmp_path / "graph2"))]
    for folders in [*cases, (str(tmp_path / "graph"),), ("/",), ("/nonexistent",)]:
        assert clean_mappings(folders, smaps) == _clean_mappings_line_by_line(folders, smaps), folders
    assert len(clean_mappings(cases[0], smaps)) == 12 - 3  # written: 0, 4, 8
    for folders in [("/tmp/x",), ("/tmp/x", "/elsewhere"), ("/tmp",)]:
        assert clean_mappings(folders, crafted) == _clean_mappings_line_by_line(folders, crafted), folders
    assert clean_mappings(("/tmp/x",), crafted) == [(0x7F0000004000, 0x7F0000008000), (0x7F000000C000, 0x7F0000010000)]
