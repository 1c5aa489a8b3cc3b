"""What a vector directory is made of: the kinds (in file order), the versions, the defaults."""

from __future__ import annotations

from verispec.reference.errors import VectorError as VectorError

FORMAT_VERSION = 1
DEFAULT_SEED = 20_240_601
DEFAULT_COUNT = 64

# the vector kinds, in file order; a kind's index seeds its generator
KINDS: tuple[str, ...] = (
    "sampled",
    "sampled_large",  # V = 9 .. 262,144, run-length rows (spec/vectors/gen_large.py)
    "greedy",
    "rows",
    "target_law",
    "gate",
    "conformal_index",
    "dequantize",
)
