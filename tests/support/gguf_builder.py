"""The independent GGUF writer, now shipped as :mod:`verispec.synth.gguf_writer` (the synthetic
models are written with it); re-exported here so the tests' imports stay as they were."""

from verispec.synth.gguf_writer import (
    BLOCKS as BLOCKS,
)
from verispec.synth.gguf_writer import (
    F16 as F16,
)
from verispec.synth.gguf_writer import (
    F32 as F32,
)
from verispec.synth.gguf_writer import (
    IQ2_XXS as IQ2_XXS,
)
from verispec.synth.gguf_writer import (
    Q4_0 as Q4_0,
)
from verispec.synth.gguf_writer import (
    Q4_1 as Q4_1,
)
from verispec.synth.gguf_writer import (
    Q4_K as Q4_K,
)
from verispec.synth.gguf_writer import (
    Q5_0 as Q5_0,
)
from verispec.synth.gguf_writer import (
    Q6_K as Q6_K,
)
from verispec.synth.gguf_writer import (
    Q8_0 as Q8_0,
)
from verispec.synth.gguf_writer import (
    VT as VT,
)
from verispec.synth.gguf_writer import (
    Array as Array,
)
from verispec.synth.gguf_writer import (
    Built as Built,
)
from verispec.synth.gguf_writer import (
    Meta as Meta,
)
from verispec.synth.gguf_writer import (
    Tensor as Tensor,
)
from verispec.synth.gguf_writer import (
    Value as Value,
)
from verispec.synth.gguf_writer import (
    build as build,
)
from verispec.synth.gguf_writer import (
    small_model as small_model,
)
from verispec.synth.gguf_writer import (
    tensor_bytes as tensor_bytes,
)
