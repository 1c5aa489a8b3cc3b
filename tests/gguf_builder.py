"""The independent GGUF writer, now shipped as :mod:`verispec.synth.gguf_writer` (the synthetic
models are written with it); re-exported here so the tests' imports stay as they were."""

from verispec.synth.gguf_writer import (
    BLOCKS as BLOCKS,
    F16 as F16,
    F32 as F32,
    IQ2_XXS as IQ2_XXS,
    Q4_0 as Q4_0,
    Q4_1 as Q4_1,
    Q4_K as Q4_K,
    Q5_0 as Q5_0,
    Q6_K as Q6_K,
    Q8_0 as Q8_0,
    VT as VT,
    Array as Array,
    Built as Built,
    Meta as Meta,
    Tensor as Tensor,
    Value as Value,
    build as build,
    small_model as small_model,
    tensor_bytes as tensor_bytes,
)
