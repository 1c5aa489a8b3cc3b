"""Portable test vectors: JSON-lines cases with inputs and the reference's expected outputs.

Another implementation (a Rust decode loop, a TypeScript host, a vLLM fork) proves it agrees with
the spec by replaying these files, the way Ethereum clients replay the consensus-spec vectors.
``verispec vectors --out DIR`` writes them; ``verispec check`` replays them through an
implementation (``spec/check.py``). The format is spec/VECTORS.md (written next to the files as
FORMAT.md).

One case is one JSON object on one line:

    {"expected": {...}, "id": "sampled/0007", "input": {...}, "op": "sampled",
     "tags": ["zeros_in_q"], "tolerance": {}}

``expected`` is what the reference answers (:func:`reference_answer`, the one place that maps an op
to the reference code); ``tolerance`` lists the fields compared within an absolute tolerance (every
other field is compared exactly); :func:`compare` is the comparison rule.

Determinism: cases come from ``numpy.random.default_rng([seed, kind index])`` and are written with
sorted keys, compact separators and Python's float repr (shortest string that round-trips the
float64 exactly), so the same seed gives the same bytes on every machine.

Modules, by concern:

- :mod:`~spec.vectors.kinds`: the kinds in file order, format version, default seed and count.
- :mod:`~spec.vectors.wire`: JSON encoding of parameters, rows, float32 bits, verdicts, one case.
- :mod:`~spec.vectors.answers`: the reference's answer to each op (also served by spec.external).
- :mod:`~spec.vectors.compare`: the comparison rule of a response against a case.
- :mod:`~spec.vectors.draws` and ``gen_*``: the seven generators (verdicts, processors, gates,
  dequantize) and the random pieces they share.
- :mod:`~spec.vectors.cases`: generators + tolerances + answers -> cases, in memory.
- :mod:`~spec.vectors.files`: the directory on disk (manifest, sha256, FORMAT.md).


Also here:

- :mod:`.gen_dequantize`: Generator of the dequantization cases: raw GGUF blocks -> float32 bits.
- :mod:`.gen_gates`: Generators of the early-exit cases: gate decisions (margin, quantile, slack, dtype -> admit) and the conformal order-statistic index ceil((n + 1) q).
- :mod:`.gen_large`: Sampled-verification vectors beyond V = 8 (kind ``sampled_large``): V = 9 .. 262,144, in a compact run-length encoding, replayed as ordinary ``sampled`` cases.
- :mod:`.gen_processors`: Generators of the logits-level cases: the target law (logits + history + processor settings -> probabilities) and the rows of a speculative step (target and ...
- :mod:`.gen_verdicts`: Generators of the verifier cases: sampled verification (p, q, drafts, uniforms -> verdict) and greedy verification (p, drafts -> verdict), random and ...
"""

from verispec.spec.vectors.answers import ANSWERS, reference_answer
from verispec.spec.vectors.cases import GENERATORS, PROB_TOLERANCE, TOLERANCES, VectorSet, build_cases, build_vectors
from verispec.spec.vectors.compare import compare
from verispec.spec.vectors.files import FORMAT_MARKDOWN, format_markdown, manifest_for, read_vectors, write_vectors
from verispec.spec.vectors.kinds import DEFAULT_COUNT, DEFAULT_SEED, FORMAT_VERSION, KINDS, VectorError
from verispec.spec.vectors.wire import (
    Case,
    Json,
    encode_case,
    encode_float,
    f32_bits,
    params_from_json,
    params_to_json,
)

__all__ = [
    "ANSWERS",
    "DEFAULT_COUNT",
    "DEFAULT_SEED",
    "FORMAT_MARKDOWN",
    "FORMAT_VERSION",
    "GENERATORS",
    "KINDS",
    "PROB_TOLERANCE",
    "TOLERANCES",
    "Case",
    "Json",
    "VectorError",
    "VectorSet",
    "build_cases",
    "build_vectors",
    "compare",
    "encode_case",
    "encode_float",
    "f32_bits",
    "format_markdown",
    "manifest_for",
    "params_from_json",
    "params_to_json",
    "read_vectors",
    "reference_answer",
    "write_vectors",
]
