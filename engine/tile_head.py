"""The int8 mode's ``tile`` head kernel: the Q8 block-dot law on the file's Q8_0 head, repacked.

The law is reference/q8_block_dot.py's (its glossary defines every term used here). This module
holds it in the layout a vector kernel reads (engine/kernels/q8_0_tile.c):

    tiles   16 head rows each; per tile and weight block 544 bytes: the 16 rows' float16 scales,
            then 8 vectors of 64 bytes (vector j: each row's levels 4j..4j+3, stored plus 128).
            The file's own byte count (34 bytes a block of 32), so the head costs the file's size
            and the file's pages can go. A vocabulary that is not a multiple of 16 is padded with
            zero rows (scale 0), never read back.

and runs it on the best instruction set this CPU has (``avx512-vnni``, ``avx2``, ``portable`` C),
on ``threads`` threads that take chunks of tiles from a shared counter. Every one of those gives the law's bits, and
so does the fallback where no kernel can be built (no C compiler): the reference's NumPy law a
chunk of rows at a time, slow and exact. ``VERISPEC_TILE_ISA`` pins one instruction set (or
``numpy``), for tests and for measuring them against each other.

Why a new kernel: MLAS's ``MatMulNBits`` computes a k-row pass row by row and repacks the head into
a larger format; this one reads each tile once for up to 8 activation rows (lab/gguf_head_probe.py
measured it against MLAS). Its sums are not MLAS's, so a model whose head runs here is a different
int8 law from the ``mlas`` head's: both keep the mode's contract (a k-row pass gives every row the
bits of a 1-row pass).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from verispec.engine import native
from verispec.engine.matmul import Matmul, RowChunks
from verispec.reference.errors import ModelError, NativeKernelUnavailable
from verispec.reference.q8_block_dot import BLOCK, Q8_0_BLOCK, block_dot_logits

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

TILE_ROWS = 16
TILE_BLOCK_BYTES = TILE_ROWS * Q8_0_BLOCK.itemsize  # 544: 16 scales (32 bytes) + 16 x 32 levels
KERNEL_SOURCE = "q8_0_tile"
ABI_VERSION = 1
ISA_ENV = "VERISPEC_TILE_ISA"
ISAS = {"avx512-vnni": 2, "avx2": 1, "portable": 0}  # the C kernel's ids, best first
PACK_ROWS = 4096  # head rows repacked at a time: bounds the load's transient copies
FALLBACK_ROWS = 4096  # head rows the NumPy fallback evaluates at a time
PART_ROWS = 8192  # head rows of each of :attr:`TileHead.parts` (the sparse head evaluates whole parts)


def pack_tiles(blocks: U8, n_rows: int, n_in: int, consumed: Callable[[U8], object] | None = None) -> U8:
    """The file's Q8_0 head bytes ``[n_rows * n_in / 32 * 34]`` -> tiles (module doc), flat,
    :data:`PACK_ROWS` rows at a time; ``consumed`` gets each run of the input bytes once it is
    repacked (the loader hands the file's pages back: the input and its copy never both resident)."""
    nb = n_in // BLOCK
    n_tiles = -(-n_rows // TILE_ROWS)
    rows = blocks.reshape(n_rows, nb * Q8_0_BLOCK.itemsize)
    out = np.empty(n_tiles * nb * TILE_BLOCK_BYTES, dtype=np.uint8)
    tiles_out = out.reshape(n_tiles, nb, TILE_BLOCK_BYTES)
    for first in range(0, n_tiles * TILE_ROWS, PACK_ROWS):
        last = min(first + PACK_ROWS, n_tiles * TILE_ROWS)
        chunk = np.zeros((last - first, nb, Q8_0_BLOCK.itemsize), dtype=np.uint8)  # padding: scale 0, levels 0
        real = max(0, min(last, n_rows) - first)
        chunk[:real] = rows[first : first + real].reshape(real, nb, Q8_0_BLOCK.itemsize)
        t = chunk.reshape(-1, TILE_ROWS, nb, Q8_0_BLOCK.itemsize).transpose(0, 2, 1, 3)  # [tiles, nb, 16, 34]
        scales = t[..., 0:2].reshape(t.shape[0], nb, 2 * TILE_ROWS)
        levels = (t[..., 2:] ^ np.uint8(0x80)).reshape(t.shape[0], nb, TILE_ROWS, 8, 4).transpose(0, 1, 3, 2, 4)
        dest = tiles_out[first // TILE_ROWS : last // TILE_ROWS]
        dest[..., : 2 * TILE_ROWS] = scales
        dest[..., 2 * TILE_ROWS :] = levels.reshape(t.shape[0], nb, TILE_ROWS * BLOCK)
        if consumed is not None and real:
            consumed(blocks.reshape(-1)[first * rows.shape[1] : (first + real) * rows.shape[1]])
    return out


def unpack_tiles(tiles: U8, first_tile: int, last_tile: int, nb: int) -> npt.NDArray[np.void]:
    """Tiles ``[first_tile, last_tile)`` back to Q8_0 blocks ``[16 * tiles, nb]`` (the fallback's input)."""
    t = tiles.reshape(-1, nb, TILE_BLOCK_BYTES)[first_tile:last_tile]
    count = t.shape[0]
    scales = t[..., : 2 * TILE_ROWS].reshape(count, nb, TILE_ROWS, 2)
    levels = (t[..., 2 * TILE_ROWS :].reshape(count, nb, 8, TILE_ROWS, 4) ^ np.uint8(0x80)).transpose(0, 1, 3, 2, 4)
    blocks = np.concatenate([scales, levels.reshape(count, nb, TILE_ROWS, BLOCK)], axis=3)  # [tiles, nb, 16, 34]
    return (
        np.ascontiguousarray(blocks.transpose(0, 2, 1, 3)).reshape(count * TILE_ROWS, nb, 34).view(Q8_0_BLOCK)[..., 0]
    )


Kernel = native.Kernel


def bind(library: ctypes.CDLL) -> None:
    """The argument and result types of the kernel's exported functions."""
    ptr, c_int = ctypes.c_void_p, ctypes.c_int
    library.q8_tile_abi_version.restype = c_int
    library.q8_tile_isa_supported.argtypes, library.q8_tile_isa_supported.restype = [c_int], c_int
    library.q8_tile_quantize.argtypes = [ptr, c_int, c_int, ptr, ptr, ptr, ptr]
    library.q8_tile_quantize.restype = None
    library.q8_tile_matmul.argtypes = [ptr, c_int, c_int, ptr, ptr, ptr, ptr, c_int, ptr, c_int, c_int, c_int]
    library.q8_tile_matmul.restype = c_int


SPEC = native.KernelSpec(KERNEL_SOURCE, ABI_VERSION, ISAS, bind, "q8_tile_abi_version", "q8_tile_isa_supported")


def load_kernel(isa: str | None = None) -> Kernel:
    """The C kernel on ``isa`` (None: ``VERISPEC_TILE_ISA``, else the best this CPU supports).
    NativeKernelUnavailable when it cannot be built or loaded, or the CPU lacks ``isa``."""
    wanted = isa if isa is not None else os.environ.get(ISA_ENV) or None
    if wanted is not None and wanted not in ISAS:
        raise ModelError(f"{ISA_ENV}={wanted!r} is not one of {', '.join([*ISAS, 'numpy'])}")
    return native.load_kernel(SPEC, wanted)


def default_kernel() -> tuple[Kernel | None, str]:
    """The kernel a head uses, and its name; (None, "tile (numpy: REASON)") where no C kernel
    can run, or ``VERISPEC_TILE_ISA=numpy``."""
    pinned = f"{ISA_ENV}=numpy" if os.environ.get(ISA_ENV) == "numpy" else None
    return native.kernel_or_reason(load_kernel, pinned)


class TileHead(RowChunks):
    """``x [T, n_in] -> logits [T, n_out]``: the Q8 block-dot law on tiles (module doc), behind
    the engine's ``Matmul`` seam. A call computes every row at once; :attr:`parts` are views of
    :data:`PART_ROWS` rows each, for the sparse head (engine/sparse_head.py), which evaluates only
    the parts holding a candidate: each output has the same bits whichever call computes it (the
    law is per output)."""

    def __init__(
        self,
        tiles: U8,
        n_out: int,
        n_in: int,
        threads: int = 1,
        kernel: Kernel | None = None,
        part_rows: int | None = PART_ROWS,
    ) -> None:
        if n_in % BLOCK:
            raise ModelError(f"the tile head needs a width that is a multiple of {BLOCK}, not {n_in}")
        self.tiles, self.n_out, self.n_in = tiles, n_out, n_in
        self.nb = n_in // BLOCK
        self.n_tiles = -(-n_out // TILE_ROWS)
        if tiles.nbytes != self.n_tiles * self.nb * TILE_BLOCK_BYTES:
            raise ModelError(f"{tiles.nbytes} tile bytes do not hold {n_out} rows of {n_in}")
        self.threads = max(1, threads)
        self.kernel = kernel
        self.kernel_name = kernel.name if kernel is not None else "tile (numpy)"
        if part_rows is not None and (part_rows <= 0 or part_rows % TILE_ROWS):
            raise ValueError(f"part_rows {part_rows} is not a positive multiple of {TILE_ROWS}")
        self.parts: list[Matmul] = [self] if part_rows is None else self._parts(part_rows)

    def _parts(self, part_rows: int) -> list[Matmul]:
        """Views of ``part_rows`` rows each (the tiles' bytes shared; a view has no parts of its own)."""
        step = part_rows // TILE_ROWS
        tile_bytes = self.nb * TILE_BLOCK_BYTES
        parts: list[Matmul] = []
        for first in range(0, self.n_tiles, step):
            last = min(first + step, self.n_tiles)
            rows = min(last * TILE_ROWS, self.n_out) - first * TILE_ROWS
            view = self.tiles[first * tile_bytes : last * tile_bytes]
            parts.append(TileHead(view, rows, self.n_in, self.threads, self.kernel, part_rows=None))
        return parts

    @classmethod
    def from_q8_0(
        cls, blocks: U8, n_out: int, n_in: int, threads: int = 1, consumed: Callable[[U8], object] | None = None
    ) -> "TileHead":
        """The head of the file's Q8_0 bytes, on :func:`default_kernel` (``consumed``: see :func:`pack_tiles`)."""
        kernel, name = default_kernel()
        head = cls(pack_tiles(blocks, n_out, n_in, consumed), n_out, n_in, threads, kernel)
        head.kernel_name = name
        return head

    def __call__(self, x: F32) -> F32:
        rows = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, self.n_in)
        if self.kernel is None:
            return self._numpy(rows)
        lib, count = self.kernel.library, rows.shape[0]
        levels = np.empty((count, self.n_in), dtype=np.int8)
        sums = np.empty((count, self.nb), dtype=np.int32)
        scales = np.empty((count, self.nb), dtype=np.float32)
        finite = np.empty(count, dtype=np.uint8)
        lib.q8_tile_quantize(rows.ctypes.data, count, self.n_in, levels.ctypes.data, sums.ctypes.data,
                             scales.ctypes.data, finite.ctypes.data)  # fmt: skip
        width = self.n_tiles * TILE_ROWS
        out = np.empty((count, width), dtype=np.float32)
        status = lib.q8_tile_matmul(
            self.tiles.ctypes.data, self.n_tiles, self.nb, levels.ctypes.data, sums.ctypes.data,
            scales.ctypes.data, finite.ctypes.data, count, out.ctypes.data, width, self.threads,
            ISAS[self.kernel.isa],
        )  # fmt: skip
        if status != 0:
            raise NativeKernelUnavailable(f"the tile kernel refused its arguments ({self.kernel.name})")
        return out if width == self.n_out else np.ascontiguousarray(out[:, : self.n_out])

    def _numpy(self, rows: F32) -> F32:
        """The reference's law, :data:`FALLBACK_ROWS` head rows at a time: the kernel's bits."""
        out = np.empty((rows.shape[0], self.n_out), dtype=np.float32)
        step = FALLBACK_ROWS // TILE_ROWS
        for first in range(0, self.n_tiles, step):
            last = min(first + step, self.n_tiles)
            blocks = unpack_tiles(self.tiles, first, last, self.nb)
            lo, hi = first * TILE_ROWS, min(last * TILE_ROWS, self.n_out)
            out[:, lo:hi] = block_dot_logits(blocks[: hi - lo], rows)
        return out
