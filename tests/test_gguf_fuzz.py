"""Fuzz: a mutated or truncated small GGUF file parses, or fails with a GGUFError. Nothing else.

Mutations are biased towards the places where a reader goes wrong: the starts of fields (counts,
lengths, type tags, offsets), overwritten with "interesting" integers (0, 1, 2^31, 2^63, 2^64-1,
the file size ...), single random bytes, deleted or inserted runs, and a final truncation.

For every example we also check that it finishes quickly (no hang) and that the memory it allocates,
measured with tracemalloc, is bounded by a small multiple of the file's size, whatever sizes the
file claims: parsing at most ``PARSE_FACTOR`` times the file size (Python lists of the metadata),
decoding every tensor at most ``DECODE_FACTOR`` times (float32 output plus temporaries; a 256-weight
Q2_K block is 84 bytes but decodes to 1 KiB).
"""

from __future__ import annotations

import struct
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.gguf_builder import small_model
from tests.support.profiles import examples
from verispec.reference.errors import GGUFError
from verispec.reference.gguf import GGUFFile

SEED = small_model()
FIELD_STARTS = sorted(set(SEED.at.values()))
PARSE_FACTOR = 8
DECODE_FACTOR = 32
SLACK = 32 * 1024  # fixed overhead: the GGUFFile object, dicts, small arrays
TIME_LIMIT_S = 5.0

_INTERESTING_U32 = [0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 16, 30, 31, 32, 41, 42, 63, 64, 255, 2**31, 2**32 - 1]
_INTERESTING_U64 = [0, 1, 2, 3, 7, 8, 31, 32, 33, 63, 64, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


@st.composite
def mutated_files(draw: st.DrawFn) -> bytes:
    data = bytearray(SEED.data)
    for _ in range(draw(st.integers(1, 4))):
        near_field = draw(st.booleans())
        if near_field:
            pos = draw(st.sampled_from(FIELD_STARTS)) + draw(st.integers(-2, 8))
        else:
            pos = draw(st.integers(0, len(data)))
        # Magic and version are left alone most of the time: either stops the parser at once.
        lowest = 0 if draw(st.integers(0, 19)) == 0 else 8
        pos = max(lowest, min(pos, len(data) - 1))
        kind = draw(st.sampled_from(["u64", "u64", "u32", "u32", "byte", "byte", "delete", "insert"]))
        if kind == "u64":
            value = draw(st.one_of(st.sampled_from(_INTERESTING_U64), st.just(len(data)), st.integers(0, 2**64 - 1)))
            data[pos : pos + 8] = struct.pack("<Q", value)
        elif kind == "u32":
            value = draw(st.one_of(st.sampled_from(_INTERESTING_U32), st.integers(0, 2**32 - 1)))
            data[pos : pos + 4] = struct.pack("<I", value)
        elif kind == "byte":
            data[pos : pos + 1] = bytes([draw(st.integers(0, 255))])
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        if len(data) < 8:
            break
    if draw(st.integers(0, 3)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@contextmanager
def traced() -> Iterator[list[int]]:
    """Trace allocations inside the block (only: Hypothesis runs untraced, hence fast); yields a
    one-element list that holds the peak bytes allocated once the block ends."""
    peak = [0]
    tracemalloc.start()
    try:
        yield peak
    finally:
        current, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peak[0] = top


def _decode_everything(model: GGUFFile) -> None:
    _ = model.architecture
    for name in model.tensors:
        try:
            weights = model.dequantize(name)
        except GGUFError:
            continue
        assert weights.shape == model.tensors[name].shape


@settings(max_examples=examples(2000), suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=mutated_files())
def test_fuzzed_files_fail_only_with_gguf_errors(data: bytes) -> None:
    started = time.process_time()  # CPU time: xdist workers and other jobs share the cores
    model: GGUFFile | None = None
    with traced() as parse_peak:
        try:
            model = GGUFFile.from_bytes(data)
        except GGUFError:
            pass
    assert parse_peak[0] <= PARSE_FACTOR * len(data) + SLACK, f"parsing {len(data)} bytes allocated {parse_peak[0]}"
    if model is not None:
        with traced() as decode_peak:
            try:
                _decode_everything(model)
            except GGUFError:
                pass
        assert decode_peak[0] <= DECODE_FACTOR * len(data) + SLACK, f"decoding allocated {decode_peak[0]}"
    assert time.process_time() - started < TIME_LIMIT_S


def test_seed_file_is_valid() -> None:
    model = GGUFFile.from_bytes(SEED.data)
    assert len(model.tensors) == 4
    _decode_everything(model)
