"""The int8 mode's ``tile`` head kernel (engine/tile_head.py, engine/kernels/q8_0_tile.c) computes the
Q8 block-dot law (reference/q8_block_dot.py) bit for bit: on every instruction set this CPU has, on
any thread count, for any number of rows, in the NumPy fallback, and inside the engine on a real
model, where speculation keeps the plain greedy tokens. The native build's cache rebuilds what was
tampered with, and every way the kernel cannot be had is a typed error or a named fallback.

Every comparison here is exact (``array_equal``): the law fixes every float32 operation and its
order, so there is no error model to allow for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.equivalence import greedy_auto_and_plain
from verispec.engine import native, tile_head
from verispec.engine.tile_head import TileHead, load_kernel, pack_tiles, unpack_tiles
from verispec.reference.errors import ModelError, NativeKernelUnavailable
from verispec.reference.q8_block_dot import Q8_0_BLOCK, block_dot_logits, quantize_activations


def native_isas() -> list[str]:
    """The instruction sets the kernel can run here (none where it cannot be built)."""
    try:
        library = native.load(tile_head.KERNEL_SOURCE)
    except NativeKernelUnavailable:
        return []
    tile_head.bind(library)
    return [name for name, code in tile_head.ISAS.items() if library.q8_tile_isa_supported(code)]


ISAS_HERE = native_isas()
needs_kernel = pytest.mark.skipif(not ISAS_HERE, reason="no C compiler here: the native kernel cannot be built")


def random_blocks(rng: np.random.Generator, n: int, k: int) -> Any:
    """Q8_0 blocks ``[n, k / 32]`` with every level (-128 too: a file may hold it) and scales of
    every float16 kind: normal, subnormal, zero."""
    blocks = np.zeros((n, k // 32), dtype=Q8_0_BLOCK)
    blocks["d"] = (rng.random((n, k // 32)) * 0.02).astype(np.float16)
    blocks["d"][0, 0] = np.float16(3e-7)  # subnormal
    blocks["d"][1 % n, :] = 0
    blocks["qs"] = rng.integers(-128, 128, (n, k // 32, 32), dtype=np.int8)
    return blocks


def adversarial_rows(rng: np.random.Generator, k: int) -> Any:
    """Activation rows that reach every branch of the quantization: a zero block, a block whose
    scale is 1 with values on the rounding ties, a subnormal block, a row holding inf, one
    holding NaN, huge values, and plain random rows."""
    x = rng.standard_normal((9, k)).astype(np.float32)
    x[0, :32] = 0
    x[1, :32] = 0
    x[1, 0], x[1, 1:5] = 127, [0.5, 1.5, 2.5, -2.5]  # da = 1: x / da on the ties, rounded to even
    x[2, :32] *= np.float32(1e-42)  # subnormal values: da rounds to 0, every level 0
    x[3, 7] = np.inf
    x[4, 40 % k] = np.nan
    x[5] *= np.float32(1e30)
    return x


def test_quantization_ties_round_to_even() -> None:
    """The act block's rounding on its ties, by hand: da = 127 / 127 = 1, so x / da is x."""
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, :5] = [127, 0.5, 1.5, 2.5, -2.5]
    acts = quantize_activations(x)
    assert acts.scales[0, 0] == 1 and acts.levels[0, :5].tolist() == [127, 0, 2, 2, -2]


def test_the_law_by_hand() -> None:
    """One block, one row, computed by hand: dot = 3 * 127 + (-2) * 64 ... with the scales' product."""
    blocks = np.zeros((1, 1), dtype=Q8_0_BLOCK)
    blocks["d"], blocks["qs"][0, 0, :2] = np.float16(0.5), [3, -2]
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, :2] = [254, 128]  # da = 2: levels 127, 64
    want = np.float32(3 * 127 - 2 * 64) * (np.float32(0.5) * np.float32(2))
    assert block_dot_logits(blocks, x)[0, 0] == want


@pytest.mark.parametrize("n_rows, width", [(48, 64), (37, 96), (16 * 260 + 5, 128)])
def test_pack_and_unpack_are_inverse(n_rows: int, width: int) -> None:
    """Tiles hold the file's bytes exactly (padding rows aside), in the file's byte count when
    the vocabulary is a multiple of 16."""
    blocks = random_blocks(np.random.default_rng(n_rows), n_rows, width)
    tiles = pack_tiles(blocks.view(np.uint8).reshape(-1), n_rows, width)
    assert tiles.nbytes == -(-n_rows // 16) * 16 * blocks.itemsize * (width // 32)
    back = unpack_tiles(tiles, 0, -(-n_rows // 16), width // 32)
    assert np.array_equal(back[:n_rows].view(np.uint8), blocks.view(np.uint8))


@needs_kernel
@pytest.mark.parametrize("n_rows, width", [(48, 64), (37, 96), (16 * 260 + 5, 128)])
def test_every_isa_and_thread_count_gives_the_law(n_rows: int, width: int) -> None:
    """The law's bits from each instruction set here, on 1, 2, 3 and 7 threads, for a pass of all
    rows and for each row alone (a k-row pass gives every row its 1-row bits); non-finite rows NaN."""
    rng = np.random.default_rng(width)
    blocks = random_blocks(rng, n_rows, width)
    x = adversarial_rows(rng, width)
    want = block_dot_logits(blocks, x)
    assert np.isnan(want[3]).all() and np.isnan(want[4]).all() and np.isfinite(want[[0, 1, 2, 6, 7, 8]]).all()
    tiles = pack_tiles(blocks.view(np.uint8).reshape(-1), n_rows, width)
    for isa in ISAS_HERE:
        kernel = load_kernel(isa)
        for threads in (1, 2, 3, 7):
            head = TileHead(tiles, n_rows, width, threads, kernel)
            assert np.array_equal(head(x), want, equal_nan=True), (isa, threads)
        one_thread = TileHead(tiles, n_rows, width, 1, kernel)
        for r in range(x.shape[0]):
            assert np.array_equal(one_thread(x[r : r + 1])[0], want[r], equal_nan=True), (isa, r)


@needs_kernel
def test_the_c_quantization_is_the_laws() -> None:
    """The kernel's act blocks (levels, scales, block sums) are the reference's, adversarial rows included."""
    import ctypes

    rng = np.random.default_rng(3)
    x = adversarial_rows(rng, 96)
    acts = quantize_activations(x)
    kernel = load_kernel()
    rows, width = x.shape
    levels = np.empty((rows, width), np.int8)
    sums = np.empty((rows, width // 32), np.int32)
    scales = np.empty((rows, width // 32), np.float32)
    finite = np.empty(rows, np.uint8)
    kernel.library.q8_tile_quantize(
        x.ctypes.data, rows, width, levels.ctypes.data, sums.ctypes.data, scales.ctypes.data, finite.ctypes.data
    )
    assert np.array_equal(levels, acts.levels) and np.array_equal(scales, acts.scales)
    assert np.array_equal(finite.astype(bool), acts.finite)
    assert np.array_equal(sums, acts.levels.reshape(rows, -1, 32).astype(np.int32).sum(axis=2))
    assert isinstance(kernel.library, ctypes.CDLL)


def test_the_numpy_fallback_gives_the_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no kernel runs (here: pinned by VERISPEC_TILE_ISA=numpy) the head computes the
    reference's law a chunk at a time, more than one chunk here, and names itself so."""
    monkeypatch.setenv(tile_head.ISA_ENV, "numpy")
    monkeypatch.setattr(tile_head, "FALLBACK_ROWS", 64)
    rng = np.random.default_rng(5)
    blocks = random_blocks(rng, 200, 64)
    head = TileHead.from_q8_0(blocks.view(np.uint8).reshape(-1), 200, 64)
    assert head.kernel is None and head.kernel_name.startswith("tile (numpy")
    x = adversarial_rows(rng, 64)
    assert np.array_equal(head(x), block_dot_logits(blocks, x), equal_nan=True)


def test_a_bad_isa_name_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tile_head.ISA_ENV, "sse9")
    with pytest.raises(ModelError, match="VERISPEC_TILE_ISA='sse9'"):
        load_kernel()


def test_no_compiler_falls_back_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No C compiler: NativeKernelUnavailable saying so, and a head that runs the law in NumPy and
    says why in its kernel name (the bench's and the load report's)."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    native.load.cache_clear()
    try:
        with pytest.raises(NativeKernelUnavailable, match="no C compiler"):
            native.load(tile_head.KERNEL_SOURCE)
        kernel, name = tile_head.default_kernel()
        assert kernel is None and name.startswith("tile (numpy: no C compiler found")
    finally:
        native.load.cache_clear()


def test_a_failing_compiler_is_a_typed_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A compiler that fails: the error carries its output; nothing is left in the cache."""
    fake = tmp_path / "failing-cc"
    fake.write_text("#!/bin/sh\necho 'fatal: no' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    native.load.cache_clear()
    try:
        with pytest.raises(NativeKernelUnavailable, match="fatal: no"):
            native.load(tile_head.KERNEL_SOURCE)
        assert list((tmp_path / "cache").iterdir()) == []
    finally:
        native.load.cache_clear()


@needs_kernel
def test_a_tampered_library_is_built_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cached library whose bytes no longer match their digest is rebuilt before it is loaded.
    (The tampered file is a new one renamed into place: rewriting a library in place under a
    process that has it mapped would bring that process down, whatever the cache did.)"""
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    native.load.cache_clear()
    try:
        native.load(tile_head.KERNEL_SOURCE)
        (library,) = tmp_path.glob("*.so")
        good = library.read_bytes()
        tampered = tmp_path / "tampered"
        tampered.write_bytes(b"\x7fELF tampered")
        os.replace(tampered, library)
        native.load.cache_clear()
        tile_head.bind(native.load(tile_head.KERNEL_SOURCE))
        assert library.read_bytes() == good  # the compiler's output is deterministic here
    finally:
        native.load.cache_clear()


@needs_kernel
def test_a_hostile_digest_file_is_read_bounded_and_replaced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A digest file far longer than a digest (here the right digest followed by 8 MiB) is read
    only as far as a digest can reach, is not taken as a match, and the library is rebuilt with a
    digest of the right size beside it."""
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    native.load.cache_clear()
    try:
        native.load(tile_head.KERNEL_SOURCE)
        (library,) = tmp_path.glob("*.so")
        digest = library.with_name(library.name + ".sha256")
        right = digest.read_bytes()
        assert len(right) <= native.DIGEST_READ_BYTES
        digest.write_bytes(right.strip() + b"0" * (8 << 20))
        reads: list[int] = []
        real_open = Path.open

        def counting_open(self: Path, *args: Any, **kwargs: Any) -> Any:
            handle = real_open(self, *args, **kwargs)
            if self == digest:
                real_read = handle.read
                handle.read = lambda size=-1: reads.append(size) or real_read(size)  # type: ignore[method-assign]
            return handle

        monkeypatch.setattr(Path, "open", counting_open)
        native.load.cache_clear()
        tile_head.bind(native.load(tile_head.KERNEL_SOURCE))
        assert reads == [native.DIGEST_READ_BYTES]  # one bounded read, not the 8 MiB
        monkeypatch.setattr(Path, "open", real_open)
        assert digest.read_bytes() == right  # rebuilt: its digest written again, the right size
    finally:
        native.load.cache_clear()


def test_the_cache_key_covers_the_headers_beside_a_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A kernel's cached library is keyed by its source and by every header beside it (the kernels
    include engine/kernels/half_float.h): an edit to either, or a header added or renamed, builds anew."""
    monkeypatch.setattr(native, "compiler_identity", lambda cc: "cc 1.0")
    source, header = tmp_path / "kernel.c", tmp_path / "shared.h"
    source.write_text('#include "shared.h"\n')
    header.write_text("#define A 1\n")
    names = [native.library_name(source, "cc")]
    header.write_text("#define A 2\n")
    names.append(native.library_name(source, "cc"))
    header.rename(tmp_path / "other.h")
    names.append(native.library_name(source, "cc"))
    (tmp_path / "more.h").write_text("")
    names.append(native.library_name(source, "cc"))
    source.write_text('#include "other.h"\n/* edited */\n')
    names.append(native.library_name(source, "cc"))
    assert len(set(names)) == len(names) and all(name.startswith("kernel-") for name in names)
    assert native.library_name(source, "cc") == names[-1]  # the same files: the same key
    assert (native.KERNELS / "half_float.h").is_file()


@needs_kernel
def test_a_cache_that_cannot_be_written_builds_privately(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The cache path is a file: the kernel is built in a temporary folder and still loads."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv(native.CACHE_ENV, str(blocked / "kernels"))
    native.load.cache_clear()
    try:
        library = native.load(tile_head.KERNEL_SOURCE)
        tile_head.bind(library)
        assert library.q8_tile_abi_version() == tile_head.ABI_VERSION
        assert not any(name.endswith(".so") for name in os.listdir(tmp_path))
    finally:
        native.load.cache_clear()


def test_head_kernel_choice_is_checked(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown head kernel, a head kernel for a mode without one, and the tile kernel on a head
    that is not Q8_0 are each refused, by name."""
    from verispec.engine.model import FastModel

    path = tiny_gguf("llama")
    with pytest.raises(ModelError, match="'mlas2' is not one of auto, mlas, tile"):
        FastModel.load(path, weights="int8", head_kernel="mlas2")
    with pytest.raises(ModelError, match="int8 mode's"):
        FastModel.load(path, weights="f32", head_kernel="tile")
    monkeypatch.setenv("VERISPEC_INT8_HEAD_KERNEL", "tile")
    with pytest.raises(ModelError, match="computes Q8_0 heads; token_embd.weight is F32"):
        FastModel.load(path, weights="int8")


@pytest.fixture(scope="module")
def synthetic_q8_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small llama whose every matrix is Q8_0, its head too: 322 rows, not a multiple of 16
    (the tiles' padding is read by the engine's passes)."""
    from verispec.synth.models import write_synthetic

    path = tmp_path_factory.mktemp("q8") / "tinyllama_q8_0.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0",))
    return path


@needs_kernel
def test_auto_keeps_mlas_where_only_the_plain_c_kernel_runs(
    synthetic_q8_0: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU without AVX2 gets only the plain C kernel (measured nowhere against MLAS): ``auto``
    keeps the mlas head there, while an explicit ``tile`` still runs it (the same bits)."""
    from verispec.engine.model import FastModel

    monkeypatch.setenv(tile_head.ISA_ENV, "portable")
    assert FastModel.load(synthetic_q8_0, weights="int8", head_kernel="auto").store.head_kernel == "mlas"
    assert FastModel.load(synthetic_q8_0, weights="int8", head_kernel="tile").store.head_kernel == "tile (portable)"


def test_auto_and_the_fallback_in_the_engine(
    synthetic_q8_0: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``auto`` runs the tile kernel where it builds and the mlas head where it does not; an
    explicit ``tile`` without a compiler runs the NumPy law, whose passes are the kernel's bits (the
    layers on MLAS throughout: without a compiler ``auto`` layers would change kernel too)."""
    from verispec.engine.model import FastModel

    def logits(model: Any) -> Any:
        cache = model.new_cache(16)
        return model.forward([1, 5, 9, 200, 321, 7], cache).logits

    auto = FastModel.load(synthetic_q8_0, weights="int8", head_kernel="auto", layer_kernel="mlas")
    assert auto.store.head_kernel == (f"tile ({ISAS_HERE[0]})" if ISAS_HERE else "mlas")
    native_logits = logits(auto) if ISAS_HERE else None
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    native.load.cache_clear()
    try:
        assert FastModel.load(synthetic_q8_0, weights="int8", head_kernel="auto").store.head_kernel == "mlas"
        fallback = FastModel.load(synthetic_q8_0, weights="int8", head_kernel="tile", layer_kernel="mlas")
        assert fallback.store.head_kernel.startswith("tile (numpy: no C compiler found")
        if native_logits is not None:
            assert np.array_equal(logits(fallback), native_logits)
    finally:
        native.load.cache_clear()


def test_the_sparse_head_serves_the_tile_head(synthetic_q8_0: Path) -> None:
    """The sparse head mode on the tile head (its parts are views of the tiles): greedy decision
    rows give the full head's argmax and its value, bit for bit, and the sparse path ran."""
    from verispec.engine.model import FastModel
    from verispec.reference.sampling import SamplingParams

    model = FastModel.load(synthetic_q8_0, weights="int8", head_kernel="tile", head="sparse")
    x = np.random.default_rng(2).standard_normal((3, model.config.n_embd)).astype(np.float32)
    full = model.store.head_matmul(x)
    assert model.sparse_head is not None
    rows = model.sparse_head.decision_rows(x, SamplingParams(temperature=0.0), None)
    assert rows is not None
    assert np.array_equal(rows.argmax(axis=1), full.argmax(axis=1))
    assert np.array_equal(rows.max(axis=1), full.max(axis=1))


@pytest.fixture(scope="module")
def smollm2_tile(smollm2_path: Path) -> Any:
    from verispec.engine.model import FastModel

    return FastModel.load(smollm2_path, weights="int8", head_kernel="tile")


@pytest.mark.model
def test_the_engines_tile_head_is_the_law_on_a_real_model(smollm2_tile: Any, smollm2_path: Path) -> None:
    """SmolLM2's Q8_0 head on the tile kernel: a prompt's logits are the law's on the head's input,
    a 5-row pass gives each row its 1-row bits, and the head costs the file's bytes."""
    from verispec.reference.gguf import GGUFFile

    model = smollm2_tile
    assert model.store.head_kernel == (f"tile ({ISAS_HERE[0]})" if ISAS_HERE else model.store.head_kernel)
    with GGUFFile.open(smollm2_path) as f:
        info = f.tensors["token_embd.weight"]
        blocks = np.array(f.raw("token_embd.weight")).view(Q8_0_BLOCK).reshape(model.config.n_vocab, -1)
    assert model.store.head_output.tiles.nbytes == info.nbytes
    prompt, span = [1, 504, 2365, 6354, 28], [1130, 314, 260, 3465, 30]
    cache = model.new_cache(16)
    model.forward(prompt, cache)
    together = model.forward(span, cache, return_hidden=True)
    assert together.hidden is not None
    want = block_dot_logits(blocks, model.head_input(together.hidden[-1]))
    assert np.array_equal(together.logits, want)
    cache = model.new_cache(16)
    model.forward(prompt, cache)
    alone = np.concatenate([model.forward([t], cache).logits for t in span])
    assert np.array_equal(together.logits, alone)


@pytest.mark.model
def test_speculation_keeps_the_tile_heads_greedy_tokens(smollm2_tile: Any, smollm2_tokenizer: Any) -> None:
    """Lossless on the new law: the default draft's greedy speculative decode gives the plain
    greedy decode's tokens, token for token."""
    # greedy continues the repetition: the lookup drafts are accepted
    spec_ids, plain_ids, passes = greedy_auto_and_plain(smollm2_tile, smollm2_tokenizer, "The cat sat on the mat. " * 4)
    assert spec_ids == plain_ids
    assert passes < len(plain_ids)  # the draft was accepted: passes were saved
