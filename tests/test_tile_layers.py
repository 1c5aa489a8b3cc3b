"""The int8 mode's ``tile`` layer kernel (engine/tile_layers.py, engine/kernels/layer_tile.c) computes
the int8 layer law (reference/int8_layer_law.py) bit for bit: its exp and activations, its block
matmul on every block form, its attention, and whole layers inside the engine, on every instruction
set this CPU has, on any thread count and any number of rows, and in the NumPy fallback (which IS
the law: the reference's functions). On a real model a k-row pass gives every row its 1-row bits
and speculation keeps the plain greedy tokens.

Every comparison of two computations here is exact (``array_equal`` on the bits): the law fixes
every float32 operation and its order. The one tolerance is the law's exp against the true exp
(float64), bounded in ulps: Cephes' polynomial is within 1 ulp on its range, 2 is asserted."""

from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.support.equivalence import greedy_auto_and_plain
from tests.support.tree import PARENTS, path_of
from verispec.engine import native, tile_layers
from verispec.engine.blocks import HALF_SCALE_TYPES, LEVEL_BITS, KernelBlocks
from verispec.reference import int8_layer_law as law
from verispec.reference.errors import ModelError, NativeKernelUnavailable
from verispec.reference.quants import GGMLType, block_layout


def native_isas() -> list[str]:
    """The instruction sets the layer kernel can run here (none where it cannot be built)."""
    try:
        return [name for name in tile_layers.ISAS if _supported(name)]
    except NativeKernelUnavailable:
        return []


def _supported(name: str) -> bool:
    try:
        tile_layers.load_kernel(name)
    except NativeKernelUnavailable as error:
        if "lacks" in str(error):
            return False
        raise
    return True


ISAS_HERE = native_isas()
needs_kernel = pytest.mark.skipif(not ISAS_HERE, reason="no C compiler here: the native kernel cannot be built")


def bits(a: Any) -> Any:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def same_bits(a: Any, b: Any) -> bool:
    """Equal bits, where a NaN equals any NaN (the law says NaN, not which one: its sign and payload
    are the hardware's)."""
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(bits(a)[~nan], bits(b)[~nan]))


# -- exp and the activations --------------------------------------------------------------------------


def exp_inputs() -> Any:
    """A dense sweep of exp's range (results from subnormal to the largest float), its edges, the
    specials, and values beyond the range on both sides."""
    sweep = np.linspace(-88.0, 89.0, 200_001, dtype=np.float32)
    edges = np.array([law.EXP_MIN, law.EXP_MAX], dtype=np.float32)
    near = np.concatenate([np.nextafter(edges, np.float32(-np.inf)), edges, np.nextafter(edges, np.float32(np.inf))])
    specials = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-45, np.inf, -np.inf, np.nan, -200.0, 200.0], dtype=np.float32)
    return np.concatenate([sweep, near, specials]).astype(np.float32)


def test_the_laws_exp_is_within_two_ulp_of_exp() -> None:
    """Where its result is a normal float, the law's exp is within 2 ulp of the true exp (float64)."""
    x = exp_inputs()
    y = law.exp_law(x)
    true = np.exp(x.astype(np.float64))
    normal = np.isfinite(x) & (true >= np.finfo(np.float32).tiny) & (true <= np.finfo(np.float32).max)
    ulp = np.spacing(true[normal].astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(y[normal] - true[normal]) / ulp) <= 2.0
    assert np.isnan(law.exp_law(np.array([np.nan], np.float32)))[0]
    assert law.exp_law(np.array([np.inf, -np.inf, 100.0, -100.0], np.float32)).tolist() == [np.inf, 0.0, np.inf, 0.0]


@needs_kernel
@pytest.mark.parametrize("isa", ISAS_HERE)
def test_exp_and_activations_are_the_laws_bits(isa: str) -> None:
    """The C exp (vector and scalar) and SiLU / GELU give the law's bits everywhere, NaN and the
    range's edges included."""
    lib = tile_layers.load_kernel(isa).library
    x = exp_inputs()
    y = np.empty_like(x)
    lib.lt_exp(x.ctypes.data, y.ctypes.data, x.size, tile_layers.ISAS[isa])
    assert same_bits(y, law.exp_law(x))
    g = np.concatenate([x / np.float32(8), x[:1000] * np.float32(-1)]).astype(np.float32)
    out = np.empty_like(g)
    with np.errstate(invalid="ignore", over="ignore"):
        for act_id, name in ((0, law.ACT_SILU), (1, law.ACT_GELU_TANH)):
            lib.lt_activation(g.ctypes.data, out.ctypes.data, g.size, act_id, tile_layers.ISAS[isa])
            assert same_bits(out, law.activation_law(g, name)), name


# -- the block matmul ---------------------------------------------------------------------------------

# (bits, block, mins, zero, source type): float32 scales and mins in the tiles (source type 0, F32: a
# form no float16 type has) -- Q4_1 / Q4_K; Q4_0; Q8_0; Q6_K; Q2_K; Q5_1 / Q5_K; a stack with mins;
# Q3_K -- and float16 ones, for the types whose blocks store them so: Q4_1, Q4_0, Q8_0, Q5_0, Q5_1;
# 5-bit levels (Q5_0, Q5_1, and a Q5_K form in blocks of 16, as a stack with Q3_K makes) in 5 bits
FORMS = [(4, 32, True, 0, 0), (4, 32, False, 8, 0), (8, 32, False, 128, 0), (8, 16, False, 32, 0),
         (4, 16, True, 0, 0), (8, 32, True, 0, 0), (8, 16, True, 3, 0), (4, 16, False, 4, 0),
         (4, 32, True, 0, GGMLType.Q4_1), (4, 32, False, 8, GGMLType.Q4_0), (8, 32, False, 128, GGMLType.Q8_0),
         (8, 32, False, 16, GGMLType.Q5_0), (8, 32, True, 0, GGMLType.Q5_1),
         (8, 16, True, 3, GGMLType.Q5_K)]  # fmt: skip
Form = tuple[int, int, bool, int, int]


def random_form(rng: np.random.Generator, n: int, k: int, form: Form) -> KernelBlocks:
    """Random blocks of ``form``; float16 values (a subnormal and the largest among them) where its
    source type stores its scales as float16, else float32 ones (a float32 subnormal among them)."""
    n_bits, block, mins, zero, source = form
    nb = k // block
    half = source in HALF_SCALE_TYPES
    width = np.float16 if half else np.float32

    def floats() -> Any:
        return (rng.standard_normal((n, nb)) * 0.02).astype(width).astype(np.float32)

    scales = floats()
    scales[0, 0] = np.float32(2.0**-20) if half else np.float32(1e-40)  # subnormal
    if half:
        scales[1, 1] = np.float32(65504.0)  # float16's largest
    zeros = np.full((n, nb), zero, np.uint8)
    if zero:
        zeros[1 % n, :] = 0  # a stacked part without a zero point
    return KernelBlocks(
        bits=n_bits,
        block=block,
        levels=rng.integers(0, 2 ** min(n_bits, LEVEL_BITS.get(source, 8)), (n, k), dtype=np.uint8),
        scales=scales,
        zeros=zeros,
        mins=floats() if mins else None,
        source_types=(source,),
    )


def activation_rows(rng: np.random.Generator, rows: int, k: int) -> Any:
    """Random rows with a zero block, rounding ties, subnormals, and (past 5 rows) inf and NaN."""
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x[0, :32] = 0
    if rows > 1:
        x[1, 0], x[1, 1:5] = 127, [0.5, 1.5, 2.5, -2.5]
    if rows > 2:
        x[2, :32] *= np.float32(1e-42)
    if rows > 5:
        x[4, 3], x[5, 9] = np.inf, np.nan
    return x


def c_matmul(isa: str, kb: KernelBlocks, x: Any, threads: int) -> Any:
    lib = tile_layers.load_kernel(isa).library
    form = tile_layers.form_of(kb)
    tiles = tile_layers.pack_tiles(kb, form)
    n, k = kb.shape
    spec = tile_layers.matrix_struct(kb, form, tiles.ctypes.data)
    y = np.full((x.shape[0], n), np.float32(7), dtype=np.float32)
    assert (
        lib.lt_matmul(ctypes.byref(spec), x.ctypes.data, x.shape[0], y.ctypes.data, threads, tile_layers.ISAS[isa]) == 0
    )
    return y


@needs_kernel
@pytest.mark.parametrize("form", FORMS)
def test_every_block_form_isa_thread_and_row_count_gives_the_law(form: Form) -> None:
    """Every block form, float32 and float16 scales, 37 rows (the last tile padded), rows 1..9 (past
    a group of 8), threads 1-3: the law's bits; a row holding inf or NaN is all NaN."""
    rng = np.random.default_rng(sum(form))
    kb = random_form(rng, 37, 128, form)
    tiles = tile_layers.form_of(kb)
    assert tiles.half == (form[4] in HALF_SCALE_TYPES)
    assert tiles.bits == (5 if LEVEL_BITS.get(form[4]) == 5 else form[0])
    x = activation_rows(rng, 9, 128)
    want = law.block_matmul_law(kb, x)
    assert np.isnan(want[4]).all() and np.isnan(want[5]).all() and np.isfinite(want[6]).all()
    for isa in ISAS_HERE:
        for threads in (1, 2, 3):
            assert same_bits(c_matmul(isa, kb, x, threads), want), (isa, threads)
        for rows in (1, 3, 8):
            assert same_bits(c_matmul(isa, kb, np.ascontiguousarray(x[:rows]), 1), want[:rows]), (isa, rows)


# type -> bytes a tile block holds beyond the file's 16 blocks: the zero points, one byte a row,
# where a type has one (Q4_0's 8, Q8_0's 128 as the levels are stored unsigned)
BEYOND_THE_FILE = {GGMLType.Q4_1: 0, GGMLType.Q4_0: 16, GGMLType.Q8_0: 16, GGMLType.Q5_1: 0, GGMLType.Q5_0: 16}


@needs_kernel
def test_a_matrix_shared_by_threads_gives_the_law() -> None:
    """A matrix of 41 tiles (three chunks a thread takes, the last tile padded): 1-3 threads, 1, 5
    and 9 rows, every ISA, the law's bits whoever computes a tile."""
    rng = np.random.default_rng(7)
    kb = random_form(rng, 16 * 40 + 5, 64, FORMS[8])  # Q4_1, float16 scales and mins
    x = activation_rows(rng, 9, 64)
    want = law.block_matmul_law(kb, x)
    for isa in ISAS_HERE:
        for threads in (1, 2, 3):
            for rows in (1, 5, 9):
                got = c_matmul(isa, kb, np.ascontiguousarray(x[:rows]), threads)
                assert same_bits(got, want[:rows]), (isa, threads, rows)


@pytest.mark.parametrize("ggml_type", list(BEYOND_THE_FILE))
def test_a_float16_scale_type_costs_the_files_bytes(ggml_type: GGMLType) -> None:
    """Weights once: a Q4_1 or Q5_1 matrix's tiles hold the file's own bytes a block (float16 scale
    and min, no zeros: every zero point is 0; Q5_1's levels in 5 bits), Q4_0's, Q5_0's and Q8_0's one
    byte a row more (the zero points); the packer's form is the size formula's."""
    form = tile_layers.tile_form((int(ggml_type),))
    assert form is not None and form.half
    _, file_block_bytes = block_layout(int(ggml_type))
    assert form.block_bytes() == tile_layers.TILE_ROWS * file_block_bytes + BEYOND_THE_FILE[ggml_type]
    source = next(f for f in FORMS if f[4] == ggml_type)
    kb = random_form(np.random.default_rng(1), 37, 128, source)
    assert tile_layers.form_of(kb) == form
    assert tile_layers.pack_tiles(kb, form).size == 3 * 4 * form.block_bytes()  # 3 tiles, 4 blocks


def test_a_five_bit_type_whose_levels_pass_five_bits_is_refused() -> None:
    """The packer checks what the type promises: a Q5_0 level of 32 or more would lose its sixth bit
    in the 5-bit tiles; refused by name."""
    kb = random_form(np.random.default_rng(4), 16, 64, next(f for f in FORMS if f[4] == GGMLType.Q5_0))
    levels = kb.levels.copy()
    levels[5, 9] = 32
    with pytest.raises(ModelError, match="pass 5 bits"):
        tile_layers.form_of(dataclasses.replace(kb, levels=levels))


def test_a_float16_type_whose_scales_are_not_float16_is_refused() -> None:
    """The packer checks what the type promises: a scale or min that float16 would round is refused
    by name (the float16 tiles would change the law's products)."""
    kb = random_form(np.random.default_rng(2), 16, 64, next(f for f in FORMS if f[4] == GGMLType.Q4_1))
    for name in ("scales", "mins"):
        field = getattr(kb, name).copy()
        field[3, 1] = np.float32(0.1)  # not a float16 value
        with pytest.raises(ModelError, match="not all float16"):
            tile_layers.form_of(dataclasses.replace(kb, **{name: field}))


def test_the_law_generalises_the_heads() -> None:
    """On a Q8_0 matrix (zero 128, no mins) the layer law is the head's Q8 block-dot law."""
    from verispec.reference.q8_block_dot import Q8_0_BLOCK, block_dot_logits

    rng = np.random.default_rng(3)
    blocks = np.zeros((20, 4), dtype=Q8_0_BLOCK)
    blocks["d"] = (rng.random((20, 4)) * 0.02).astype(np.float16)
    blocks["qs"] = rng.integers(-128, 128, (20, 4, 32), dtype=np.int8)
    kb = KernelBlocks(
        bits=8,
        block=32,
        levels=(blocks["qs"].view(np.uint8) ^ np.uint8(0x80)).reshape(20, 128),
        scales=blocks["d"].astype(np.float32),
        zeros=np.full((20, 4), 128, np.uint8),
        mins=None,
        source_types=(8,),
    )
    x = activation_rows(rng, 9, 128)
    assert same_bits(law.block_matmul_law(kb, x), block_dot_logits(blocks, x))


# -- attention ----------------------------------------------------------------------------------------


@needs_kernel
@pytest.mark.parametrize(
    "n_head, n_kv, d, window",
    [(9, 3, 64, 0), (4, 1, 256, 5), (8, 8, 32, 0), (2, 2, 16, 1), (8, 1, 8, 0), (3, 1, 24, 2), (12, 2, 48, 0)],
)
@pytest.mark.parametrize("queries", ["normal", "hostile"])
def test_attention_is_the_laws(n_head: int, n_kv: int, d: int, window: int, queries: str) -> None:
    """Rows over causal slots with out-of-order positions (a tree's slots), on a sliding window or
    none, through the engine's TileAttention on every ISA: the law's bits; a 5-row call gives each
    row its 1-row bits. Query heads of a kv head go together (a group of 6 splits 4 + 2); a row sees
    32 slots (whole blocks of 16 keys); hostile queries make a head's scores all +0 and
    -0 (the largest is a signed zero), NaN, or infinite."""
    rng = np.random.default_rng(d + window)
    slots = 48
    k = rng.standard_normal((n_kv, slots, d)).astype(np.float32)
    v = rng.standard_normal((n_kv, slots, d)).astype(np.float32)
    key_positions = np.arange(slots, dtype=np.int64)
    key_positions[30:33] = [50, 51, 52]  # later positions in earlier slots: masked for the rows before them
    q = rng.standard_normal((5, n_head, d)).astype(np.float32)
    if queries == "hostile":
        q[0, 0] = 0.0  # every score +0
        q[1, 0] = -0.0  # every score a signed zero
        k[0, 3, :] = -k[0, 3, :]  # ... of both signs
        q[2, n_head - 1, 0] = np.nan
        q[3, 0] = np.float32(3e38)  # infinite scores: inf - inf in the softmax
    positions = np.array([33, 51, 35, 36, 52], dtype=np.int64)
    ends = np.array([34, 32, 36, 37, 40], dtype=np.int32)
    want = np.stack([
        law.attend_row(q[t], k[:, : ends[t]], v[:, : ends[t]], key_positions[: ends[t]], int(positions[t]), window,
                       np.float32(d**-0.5))
        for t in range(5)
    ])  # fmt: skip
    if queries == "hostile":
        assert np.isnan(want[2]).any()
    cfg: Any = SimpleNamespace(n_head=n_head, n_head_kv=n_kv, head_dim=d, attn_scale=d**-0.5)  # what it reads
    for isa in ISAS_HERE:
        attention = tile_layers.TileAttention(cfg, tile_layers.load_kernel(isa))
        together = attention.rows(q, k, v, key_positions, positions, ends, window)
        assert same_bits(together, want), isa
        alone = [attention.rows(q[t : t + 1], k, v, key_positions, positions[t : t + 1], ends[t : t + 1], window)
                 for t in range(5)]  # fmt: skip
        assert same_bits(np.concatenate(alone), together)
    assert same_bits(tile_layers.TileAttention(cfg, None).rows(q, k, v, key_positions, positions, ends, window), want)


@needs_kernel
@pytest.mark.parametrize("n_head, n_kv, d, window", [(9, 3, 64, 0), (4, 1, 32, 3), (8, 8, 16, 2), (6, 2, 64, 0)])
def test_tree_rows_see_the_prefix_and_their_paths(n_head: int, n_kv: int, d: int, window: int) -> None:
    """A token tree's rows in one call (``span_seen``: each row's flags of the span's slots) give each
    row the bits of the 1-row call with its path laid out after the prefix, on every ISA and on the
    NumPy law; a sliding window of 2-3 cuts into the longer paths, and the prefix is long enough (37
    slots) for whole blocks of 16 keys. The same rows as a chain differ (the check can fail)."""
    from verispec.reference.tree_attention import ancestor_mask, check_parents, depths

    rng = np.random.default_rng(d + window + n_head)
    prefix, n = 37, len(PARENTS)
    slots = prefix + n + 3  # spare slots past the span: never read
    k = rng.standard_normal((n_kv, slots, d)).astype(np.float32)
    v = rng.standard_normal((n_kv, slots, d)).astype(np.float32)
    parents = check_parents(PARENTS, n)
    seen = ancestor_mask(parents)  # [n, n]
    positions = (prefix + depths(parents)).astype(np.int64)
    key_positions = np.concatenate([np.arange(prefix), positions, [999, 999, 999]]).astype(np.int64)
    q = rng.standard_normal((n, n_head, d)).astype(np.float32)
    q[2, 0] = 0.0  # a head whose scores are all +0
    scale = np.float32(d**-0.5)
    ends = np.full(n, prefix + n, dtype=np.int32)
    cfg: Any = SimpleNamespace(n_head=n_head, n_head_kv=n_kv, head_dim=d, attn_scale=d**-0.5)

    def laid_out(row: int) -> tuple[Any, Any, Any]:  # the 1-row pass's cache: prefix, then the path in order
        order = [*range(prefix), *(prefix + r for r in path_of(PARENTS, row))]
        return k[:, order].copy(), v[:, order].copy(), key_positions[order].copy()

    want = np.stack([law.attend_row(q[t], *laid_out(t), int(positions[t]), window, scale) for t in range(n)])
    numpy_rows = tile_layers.TileAttention(cfg, None).rows(
        q, k, v, key_positions, positions, ends, window, prefix, seen
    )
    assert same_bits(numpy_rows, want)
    for isa in ISAS_HERE:
        attention = tile_layers.TileAttention(cfg, tile_layers.load_kernel(isa))
        tree = attention.rows(q, k, v, key_positions, positions, ends, window, prefix, seen)
        assert same_bits(tree, want), isa
        for t in range(n):  # the kernel's own 1-row call on the laid-out cache
            kt, vt, pt = laid_out(t)
            end = np.array([kt.shape[1]], dtype=np.int32)
            assert same_bits(
                attention.rows(q[t : t + 1], kt, vt, pt, positions[t : t + 1], end, window), tree[t : t + 1]
            )
        chain = attention.rows(q, k, v, key_positions, positions, ends, window)
        assert not same_bits(chain, tree)


@needs_kernel
def test_tree_flags_are_checked() -> None:
    """Flags of another shape, a negative first slot, or a row ending past the span are refused by
    name before the kernel reads a slot."""
    cfg: Any = SimpleNamespace(n_head=2, n_head_kv=1, head_dim=16, attn_scale=0.25)
    k = v = np.zeros((1, 12, 16), dtype=np.float32)
    key_positions = np.arange(12, dtype=np.int64)
    q = np.zeros((3, 2, 16), dtype=np.float32)
    positions = np.array([8, 9, 9], dtype=np.int64)
    seen = np.tril(np.ones((3, 3), dtype=np.bool_))
    for kernel in (None, tile_layers.load_kernel(ISAS_HERE[0])):
        attention = tile_layers.TileAttention(cfg, kernel)
        ends = np.full(3, 11, dtype=np.int32)
        with pytest.raises(ModelError, match=r"flags are \[3, 3\]"):
            attention.rows(q, k, v, key_positions, positions, ends, 0, 8, seen[:2])
        with pytest.raises(ModelError, match="from a slot >= 0"):
            attention.rows(q, k, v, key_positions, positions, ends, 0, -1, seen)
        with pytest.raises(ModelError, match="pass the tree span's last slot 10"):
            attention.rows(q, k, v, key_positions, positions, ends + 1, 0, 8, seen)


# -- whole layers in the engine -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A llama (GQA 8:1) and a gemma3 (q/k norms, post norms, GELU, a 4-token sliding window), every
    matrix in a block form: Q4_0, Q8_0, Q4_1, Q5_0, Q5_1 in turn."""
    from verispec.synth.models import write_synthetic

    folder = tmp_path_factory.mktemp("tile_layers")
    paths = {}
    for variant in ("tinyllama", "gemma3"):
        paths[variant] = folder / f"{variant}.gguf"
        write_synthetic(paths[variant], variant, quant_types=("Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1"))
    return paths


def prompt_logits(model: Any) -> tuple[Any, Any]:
    """A 9-token prompt's logits, then a 5-row pass's, and the same 5 tokens one at a time."""
    prompt, span = [1, 5, 9, 200, 31, 7, 3, 11, 42], [17, 4, 99, 8, 250]
    cache = model.new_cache(32)
    first = model.forward(prompt, cache).logits
    together = model.forward(span, cache).logits
    cache = model.new_cache(32)
    model.forward(prompt, cache)
    alone = np.concatenate([model.forward([t], cache).logits for t in span])
    assert same_bits(together, alone)  # the mode's contract: k rows, each its 1-row bits
    return first, together


@pytest.mark.parametrize("variant", ["tinyllama", "gemma3"])
def test_the_engines_tile_layers_are_the_law(
    variant: str, synthetic_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine on tile layers gives the same bits on every ISA, at 1 and 2 threads, as on the
    NumPy fallback (the reference's law itself), with each row of a 5-row pass its 1-row bits."""
    from verispec.engine.model import FastModel

    path = synthetic_models[variant]
    monkeypatch.setenv(tile_layers.ISA_ENV, "numpy")
    reference = FastModel.load(path, weights="int8", layer_kernel="tile", head_kernel="mlas")
    assert reference.store.layer_kernel == "tile (numpy: VERISPEC_TILE_ISA=numpy)"
    want = prompt_logits(reference)
    for isa in ISAS_HERE:
        for threads in ("1", "2"):
            monkeypatch.setenv(tile_layers.ISA_ENV, isa)
            monkeypatch.setenv("VERISPEC_THREADS", threads)
            model = FastModel.load(path, weights="int8", layer_kernel="tile", head_kernel="mlas")
            assert model.store.layer_kernel == f"tile ({isa})"
            got = prompt_logits(model)
            assert same_bits(got[0], want[0]) and same_bits(got[1], want[1]), (isa, threads)


@needs_kernel
@pytest.mark.parametrize("variant", ["tinyllama", "gemma3"])
def test_a_tree_pass_on_tile_layers_is_its_paths_one_row_at_a_time(
    variant: str, synthetic_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token-tree pass (one tile attention call a layer over the tree's flags) gives every node
    the bits of the 1-row passes along its root-to-node path, on every ISA and on the NumPy law;
    the gemma3's 4-token sliding window cuts into the deepest path. Then keeping an accepted path
    leaves the cache a plain decode would have."""
    from verispec.engine.model import FastModel

    prefix, tokens = [1, 5, 9, 200, 31, 7], [3, 11, 12, 13, 20, 21, 22, 23, 24]  # tokens[0]: the pending one
    for isa in (*ISAS_HERE, "numpy"):
        monkeypatch.setenv(tile_layers.ISA_ENV, isa)
        model = FastModel.load(synthetic_models[variant], weights="int8", layer_kernel="tile", head_kernel="mlas")
        assert model.store.tile_attention is not None
        cache = model.new_cache(32)
        model.forward(prefix, cache)
        tree = model.forward(tokens, cache, tree_parents=PARENTS).logits
        for row in range(len(PARENTS)):
            alone = model.new_cache(32)
            model.forward(prefix, alone)
            path = [model.forward([tokens[r]], alone).logits for r in path_of(PARENTS, row)]
            assert same_bits(tree[row : row + 1], path[-1]), (isa, row)
        cache.keep(len(prefix) + 1, [len(prefix) + r for r in (1, 4, 6)])
        alone = model.new_cache(32)
        model.forward([*prefix, tokens[0], tokens[1], tokens[4], tokens[6]], alone)
        assert same_bits(model.forward([40], cache).logits, model.forward([40], alone).logits), isa


def test_passes_that_start_and_stop_inside_the_chain(synthetic_models: dict[str, Path]) -> None:
    """Early exit's passes (layers first..last, the chain cut at pass boundaries or not) give the
    full pass's hidden states, bit for bit, on tile layers."""
    from verispec.engine.model import FastModel

    path = synthetic_models["tinyllama"]
    whole = FastModel.load(path, weights="int8", layer_kernel="tile")
    cut = FastModel.load(path, weights="int8", layer_kernel="tile", pass_boundaries=(1,))
    n = whole.config.n_layer
    x = whole.embed([1, 5, 9, 200])
    full = whole.forward_layers(x, whole.new_cache(16), 0, n - 1, range(4), start=0)
    for model in (whole, cut):
        for depth in range(1, n):
            cache = model.new_cache(16)
            lower = model.forward_layers(x, cache, 0, depth - 1, range(4), start=0)
            upper = model.forward_layers(lower, cache, depth, n - 1, range(4), start=0)
            assert same_bits(upper, full), depth


def test_layer_kernel_choice_is_checked(synthetic_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown layer kernel, one for a mode without one, and tile layers unfused are refused, by
    name; ``auto`` keeps mlas where only the plain C kernel runs, and an explicit tile runs it."""
    from verispec.engine.model import FastModel

    path = synthetic_models["tinyllama"]
    with pytest.raises(ModelError, match="'tiles' is not one of auto, mlas, tile"):
        FastModel.load(path, weights="int8", layer_kernel="tiles")
    with pytest.raises(ModelError, match="int8 mode's"):
        FastModel.load(path, weights="f32", layer_kernel="tile")
    with pytest.raises(ModelError, match="fused=False"):
        FastModel.load(path, weights="int8", layer_kernel="tile", fused=False)
    monkeypatch.setenv("VERISPEC_INT8_LAYER_KERNEL", "fast")
    with pytest.raises(ModelError, match="VERISPEC_INT8_LAYER_KERNEL='fast'"):
        FastModel.load(path, weights="int8")
    monkeypatch.delenv("VERISPEC_INT8_LAYER_KERNEL")
    auto = FastModel.load(path, weights="int8").store.layer_kernel
    assert auto == ("tile (avx512-vnni)" if "avx512-vnni" in ISAS_HERE else "mlas")
    monkeypatch.setenv(tile_layers.ISA_ENV, "portable")
    if ISAS_HERE:
        assert FastModel.load(path, weights="int8").store.layer_kernel == "mlas"
        assert FastModel.load(path, weights="int8", layer_kernel="tile").store.layer_kernel == "tile (portable)"
    monkeypatch.setenv(tile_layers.ISA_ENV, "avx3")
    with pytest.raises(ModelError, match="'avx3' is not one of"):
        tile_layers.load_kernel()


def test_no_compiler_falls_back_to_the_law(
    synthetic_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without a C compiler ``auto`` keeps mlas layers and an explicit ``tile`` runs the NumPy law,
    named as such."""
    from verispec.engine.model import FastModel

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    native.load.cache_clear()
    try:
        path = synthetic_models["tinyllama"]
        assert FastModel.load(path, weights="int8").store.layer_kernel == "mlas"
        fallback = FastModel.load(path, weights="int8", layer_kernel="tile").store.layer_kernel
        assert fallback.startswith("tile (numpy: no C compiler found")
    finally:
        native.load.cache_clear()


def _forked_matmul(queue: Any) -> None:
    kb = random_form(np.random.default_rng(0), 300, 128, FORMS[0])
    x = activation_rows(np.random.default_rng(1), 3, 128)
    queue.put(same_bits(c_matmul(ISAS_HERE[0], kb, x, 2), law.block_matmul_law(kb, x)))


@needs_kernel
def test_a_forked_child_builds_its_own_thread_pool() -> None:
    """The worker pool lives across calls; a child forked after the parent used it has none of its
    threads and must not wait for them: it builds its own and gets the law's bits."""
    kb = random_form(np.random.default_rng(0), 300, 128, FORMS[0])
    x = activation_rows(np.random.default_rng(1), 3, 128)
    assert same_bits(c_matmul(ISAS_HERE[0], kb, x, 2), law.block_matmul_law(kb, x))  # the parent's pool
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_forked_matmul, args=(queue,))
    child.start()
    child.join(timeout=60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the forked child hung waiting for its parent's pool"
    assert queue.get(timeout=5) is True


# -- a real model ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_tile_layers(smollm2_path: Path) -> Any:
    from verispec.engine.model import FastModel

    return FastModel.load(smollm2_path, weights="int8", layer_kernel="tile")


@pytest.mark.model
def test_real_model_rows_are_invariant_and_greedy_speculation_keeps_the_tokens(
    smollm2_tile_layers: Any, smollm2_tokenizer: Any
) -> None:
    """SmolLM2 (every layer matrix Q4_1) on tile layers: a 5-row pass gives each row its 1-row bits,
    and the default draft's greedy speculative decode gives the plain greedy tokens, with passes
    saved."""
    model = smollm2_tile_layers
    assert model.store.layer_kernel.startswith("tile (")
    prompt_logits(model)
    spec_ids, plain_ids, passes = greedy_auto_and_plain(model, smollm2_tokenizer, "The cat sat on the mat. " * 4)
    assert spec_ids == plain_ids
    assert passes < len(plain_ids)  # the draft was accepted: passes were saved
