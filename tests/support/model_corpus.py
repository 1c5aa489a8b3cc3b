"""A seeded corpus of mutated GGUF models, and the pipeline each one is pushed through.

The GGUF parser is fuzzed on its own (tests/test_gguf_fuzz.py); this corpus aims past it: small
*valid* llama, gemma3 and phi3 models (written field by field with tests/support/gguf_builder.py, so nothing here
trusts reference/gguf.py) are mutated where model building goes wrong -- hyperparameter values
(zero, negative, 2^32 - 1, 2^63, 2^64 - 1, NaN, the wrong type, an array), missing or extra keys,
tensor shapes and types, dropped and renamed tensors, tokenizer arrays and special ids -- plus a
share of byte-level damage (overwritten fields, truncation). Case ``n`` is a pure function of
``n``: the same seed list gives the same files on every machine.

:func:`exercise` runs one file through everything a command does with a model -- parse, inspect,
:meth:`Config.from_gguf`, the tokenizer (build, encode, decode), the reference model (load, one
forward) and the fast engine (load f32 and quantized, one forward) -- and returns the outcome of
each stage: ``"ok"`` or the name of the typed :class:`VerispecError` subclass it raised. Anything
else (an untyped exception, or running past the per-case time bound) escapes as is.

    python -m tests.support.model_corpus --cases 20000      # the long run: totals by stage and error class
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tests.support.gguf_builder import F16, F32, Q8_0, VT, Array, Meta, Tensor, Value, build
from verispec.reference.tokenizer_bpe import byte_to_unicode

# -- the two seeds ---------------------------------------------------------------------------------

N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_LAYER, CONTEXT = 32, 4, 2, 8, 48, 2, 64
GPT2_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "a n", "Ġa n", "Ġan d", "l l", "o w"]
SPM_PIECES = ["▁", "▁h", "▁hi", "h", "i", "▁the", "e", "l", "o", "▁hello"]
TIME_LIMIT_S = 5.0  # CPU seconds per case: a case takes ~7 ms on average, the seeds ~20 ms


@dataclass(frozen=True)
class ModelFile:
    """A GGUF model as editable parts: metadata in file order, and tensors."""

    metadata: list[tuple[str, Meta]]
    tensors: list[Tensor]

    def to_bytes(self) -> bytes:
        return build(list(self.metadata), list(self.tensors)).data


def _f32(values: np.ndarray) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def _q8_0(values: np.ndarray) -> bytes:
    """Q8_0 blocks (f16 scale, 32 int8) of a 1-D float array whose length is a multiple of 32."""
    out = bytearray()
    for block in np.asarray(values, dtype=np.float32).reshape(-1, 32):
        scale = float(np.abs(block).max()) / 127 or 1.0
        out += np.float16(scale).tobytes() + np.round(block / scale).astype(np.int8).tobytes()
    return bytes(out)


def _tensors(arch: str, n_vocab: int, rng: np.random.Generator) -> list[Tensor]:
    """Every tensor a llama, phi3 or gemma3 file of the seed shape holds (ggml dims: [in, out]).
    phi3 fuses Q|K|V into ``attn_qkv`` and gate|up into ``ffn_up`` (reference/model.py splits them)."""

    def matrix(name: str, n_out: int, n_in: int, ggml_type: int = F32) -> Tensor:
        w = (rng.standard_normal(n_out * n_in) / math.sqrt(n_in)).astype(np.float32)
        if ggml_type == Q8_0:
            return Tensor(name, Q8_0, [n_in, n_out], _q8_0(w))
        if ggml_type == F16:
            return Tensor(name, F16, [n_in, n_out], w.astype("<f2").tobytes())
        return Tensor(name, F32, [n_in, n_out], _f32(w))

    def norm(name: str, n: int) -> Tensor:
        return Tensor(name, F32, [n], _f32(1.0 + 0.1 * rng.standard_normal(n)))

    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    out = [matrix("token_embd.weight", n_vocab, N_EMBD), norm("output_norm.weight", N_EMBD)]
    for il in range(N_LAYER):
        p = f"blk.{il}."
        if arch == "phi3":
            out += [
                matrix(p + "attn_qkv.weight", q + 2 * kv, N_EMBD, Q8_0 if il == 0 else F32),
                matrix(p + "ffn_up.weight", 2 * N_FF, N_EMBD),
            ]
        else:
            out += [
                matrix(p + "attn_q.weight", q, N_EMBD, F16),
                matrix(p + "attn_k.weight", kv, N_EMBD),
                matrix(p + "attn_v.weight", kv, N_EMBD),
                matrix(p + "ffn_gate.weight", N_FF, N_EMBD, Q8_0 if il == 0 else F32),
                matrix(p + "ffn_up.weight", N_FF, N_EMBD),
            ]
        out += [
            norm(p + "attn_norm.weight", N_EMBD),
            matrix(p + "attn_output.weight", N_EMBD, q),
            norm(p + "ffn_norm.weight", N_EMBD),
            matrix(p + "ffn_down.weight", N_EMBD, N_FF),
        ]
        if arch == "gemma3":
            out += [
                norm(p + "attn_q_norm.weight", HEAD_DIM),
                norm(p + "attn_k_norm.weight", HEAD_DIM),
                norm(p + "post_attention_norm.weight", N_EMBD),
                norm(p + "post_ffw_norm.weight", N_EMBD),
            ]
    return out


def _hyperparameters(arch: str) -> list[tuple[str, Meta]]:
    a = arch + "."
    meta: list[tuple[str, Meta]] = [
        ("general.architecture", Value(VT.STRING, arch)),
        ("general.name", Value(VT.STRING, f"fuzz-{arch}")),
        (a + "context_length", Value(VT.UINT32, CONTEXT)),
        (a + "embedding_length", Value(VT.UINT32, N_EMBD)),
        (a + "block_count", Value(VT.UINT32, N_LAYER)),
        (a + "feed_forward_length", Value(VT.UINT32, N_FF)),
        (a + "attention.head_count", Value(VT.UINT32, N_HEAD)),
        (a + "attention.head_count_kv", Value(VT.UINT32, N_HEAD_KV)),
        (a + "attention.key_length", Value(VT.UINT32, HEAD_DIM)),
        (a + "attention.value_length", Value(VT.UINT32, HEAD_DIM)),
        (a + "attention.layer_norm_rms_epsilon", Value(VT.FLOAT32, 1e-6)),
        (a + "rope.freq_base", Value(VT.FLOAT32, 10000.0)),
        (a + "rope.dimension_count", Value(VT.UINT32, HEAD_DIM)),
    ]
    if arch in ("gemma3", "phi3"):  # phi3 reads it and then attends globally, as llama.cpp does
        meta += [(a + "attention.sliding_window", Value(VT.UINT32, 4))]
    return meta


def _gpt2_tokenizer() -> tuple[list[tuple[str, Meta]], int]:
    """A byte-level BPE vocabulary (specials, the 256 byte characters, every merge result)."""
    tokens = ["<|endoftext|>"] + list(byte_to_unicode())
    for merge in GPT2_MERGES:
        if merge.replace(" ", "") not in tokens:
            tokens.append(merge.replace(" ", ""))
    types = [3] + [1] * (len(tokens) - 1)
    k = "tokenizer.ggml."
    return [
        (k + "model", Value(VT.STRING, "gpt2")),
        (k + "pre", Value(VT.STRING, "smollm")),
        (k + "tokens", Array(VT.STRING, list(tokens))),
        (k + "token_type", Array(VT.INT32, list(types))),
        (k + "merges", Array(VT.STRING, list(GPT2_MERGES))),
        (k + "bos_token_id", Value(VT.UINT32, 0)),
        (k + "eos_token_id", Value(VT.UINT32, 0)),
    ], len(tokens)


def _spm_tokenizer() -> tuple[list[tuple[str, Meta]], int]:
    """A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then scored pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + SPM_PIECES
    scores = [0.0] * 259 + [-float(i) for i in range(len(SPM_PIECES))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_PIECES)
    k = "tokenizer.ggml."
    return [
        (k + "model", Value(VT.STRING, "llama")),
        (k + "tokens", Array(VT.STRING, list(tokens))),
        (k + "scores", Array(VT.FLOAT32, list(scores))),
        (k + "token_type", Array(VT.INT32, list(types))),
        (k + "bos_token_id", Value(VT.UINT32, 1)),
        (k + "eos_token_id", Value(VT.UINT32, 2)),
        (k + "add_bos_token", Value(VT.BOOL, True)),
    ], len(tokens)


def seed_model(arch: str) -> ModelFile:
    """The valid seed: llama with a gpt2 tokenizer; gemma3 and phi3 with a SentencePiece one."""
    tokenizer, n_vocab = _gpt2_tokenizer() if arch == "llama" else _spm_tokenizer()
    rng = np.random.default_rng(ARCHITECTURES.index(arch))
    return ModelFile(_hyperparameters(arch) + tokenizer, _tensors(arch, n_vocab, rng))


ARCHITECTURES = ("llama", "gemma3", "phi3")  # gemma4 has no seed yet (its per-layer arrays)
SEEDS: dict[str, ModelFile] = {arch: seed_model(arch) for arch in ARCHITECTURES}

# -- mutations -------------------------------------------------------------------------------------

_INTEGERS = [
    0,
    1,
    2,
    3,
    7,
    8,
    16,
    17,
    63,
    64,
    65,
    255,
    4096,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -1,
    -2,
    -(2**31),
    -(2**63),
]
_FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, 3.4e38, math.inf, -math.inf, math.nan, 0.5, 2.0]
_INT_TYPES = {
    VT.UINT8: (0, 2**8 - 1),
    VT.INT8: (-(2**7), 2**7 - 1),
    VT.UINT16: (0, 2**16 - 1),
    VT.INT16: (-(2**15), 2**15 - 1),
    VT.UINT32: (0, 2**32 - 1),
    VT.INT32: (-(2**31), 2**31 - 1),
    VT.UINT64: (0, 2**64 - 1),
    VT.INT64: (-(2**63), 2**63 - 1),
}
# keys a real file may carry that the seeds leave out (each read by reference/config.py or the tokenizer)
_EXTRA_KEYS = [
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "final_logit_softcapping",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scale_linear",
    "attention.key_length_swa",
    "vocab_size",
    "embedding_length_per_layer_input",
]
_EXTRA_TOKENIZER_KEYS = [
    "unknown_token_id",
    "padding_token_id",
    "eot_token_id",
    "add_eos_token",
    "add_space_prefix",
    "pre",
    "merges",
    "scores",
    "token_type",
]


def _random_value(rng: random.Random, like: Meta | None) -> Meta:
    """A replacement value: mostly an edge integer in some integer type, else a float, a string,
    a bool or an array (of integers, floats or strings)."""
    pick = rng.random()
    if pick < 0.55:
        kind = rng.choice(list(_INT_TYPES))
        low, high = _INT_TYPES[kind]
        candidates = [v for v in _INTEGERS if low <= v <= high] or [low]
        value = rng.choice(candidates) if rng.random() < 0.8 else rng.randint(low, high)
        return Value(kind, value)
    if pick < 0.7:
        return Value(rng.choice([VT.FLOAT32, VT.FLOAT64]), rng.choice(_FLOATS))
    if pick < 0.78:
        return Value(VT.STRING, rng.choice(["", "x", "none", "linear", "yarn", "é" * 40, "1e9"]))
    if pick < 0.84:
        return Value(VT.BOOL, rng.choice([True, False]))
    n = rng.choice([0, 1, 2, 3, 5, 64])
    item = rng.choice([VT.INT32, VT.UINT64, VT.FLOAT32, VT.STRING, VT.BOOL])
    if item == VT.STRING:
        return Array(item, [rng.choice(["a", "", "<s>", "Ġt"]) for _ in range(n)])
    if item == VT.FLOAT32:
        return Array(item, [rng.choice(_FLOATS) for _ in range(n)])
    if item == VT.BOOL:
        return Array(item, [rng.random() < 0.5 for _ in range(n)])
    low, high = _INT_TYPES[item]
    return Array(item, [rng.choice([v for v in _INTEGERS if low <= v <= high]) for _ in range(n)])


def _mutate_metadata(rng: random.Random, m: ModelFile, arch: str) -> ModelFile:
    meta = list(m.metadata)
    action = rng.random()
    if action < 0.6:  # a new value for an existing key (the hyperparameters most often)
        i = rng.randrange(len(meta))
        key, old = meta[i]
        if key == "general.architecture" and rng.random() < 0.8:
            i = rng.randrange(2, len(meta))
            key, old = meta[i]
        if isinstance(old, Array) and rng.random() < 0.5:  # damage the array's items instead
            meta[i] = (key, _mutate_array(rng, old))
        else:
            meta[i] = (key, _random_value(rng, old))
    elif action < 0.75:  # a key dropped
        del meta[rng.randrange(1, len(meta))]
    else:  # a key added that the seed does not carry
        if rng.random() < 0.7:
            key = f"{arch}.{rng.choice(_EXTRA_KEYS)}"
        else:
            key = f"tokenizer.ggml.{rng.choice(_EXTRA_TOKENIZER_KEYS)}"
        if all(k != key for k, _ in meta):
            meta.append((key, _random_value(rng, None)))
    return replace(m, metadata=meta)


def _mutate_array(rng: random.Random, array: Array) -> Array:
    items = list(array.items)
    action = rng.random()
    if action < 0.3 and items:  # truncated (fewer tokens / scores / types than the vocabulary)
        items = items[: rng.randrange(len(items))]
    elif action < 0.5 and items:  # duplicated entries
        i = rng.randrange(len(items))
        items.insert(rng.randrange(len(items)), items[i])
    elif action < 0.8 and items:  # one item replaced by an edge value of the array's type
        i = rng.randrange(len(items))
        if array.item_type == VT.STRING:
            items[i] = rng.choice(["", " ", "Ġ", "<s>", "\u2581", "a b", "x" * 63])
        elif array.item_type in (VT.FLOAT32, VT.FLOAT64):
            items[i] = rng.choice(_FLOATS)
        elif array.item_type in _INT_TYPES:
            low, high = _INT_TYPES[array.item_type]
            items[i] = rng.choice([v for v in _INTEGERS if low <= v <= high])
    else:  # extended
        items += items[: rng.randrange(1, 4)] if items else []
    return Array(array.item_type, items)


_GGML_TYPES = [0, 1, 2, 3, 6, 7, 8, 10, 12, 14, 16, 30, 39]


def _mutate_tensors(rng: random.Random, m: ModelFile) -> ModelFile:
    tensors = list(m.tensors)
    i = rng.randrange(len(tensors))
    t = tensors[i]
    action = rng.random()
    if action < 0.35:  # one dim changed (zero, one, a neighbour, huge), the data left as it was
        dims = list(t.dims)
        j = rng.randrange(len(dims))
        dims[j] = rng.choice([0, 1, dims[j] - 1, dims[j] + 1, dims[j] * 2, 2**31, 2**40, 2**62])
        tensors[i] = replace(t, dims=[max(d, 0) for d in dims], data=_fit(t.data, t.ggml_type, dims))
    elif action < 0.45:  # dims dropped, added or reordered
        dims = list(t.dims)
        choice = rng.random()
        if choice < 0.33:
            dims = dims[:-1]
        elif choice < 0.66:
            dims = dims + [rng.choice([1, 2, 0])]
        else:
            dims = dims[::-1]
        tensors[i] = replace(t, dims=dims, data=_fit(t.data, t.ggml_type, dims))
    elif action < 0.55:  # another ggml type, data resized to what the new type needs
        kind = rng.choice(_GGML_TYPES)
        tensors[i] = replace(t, ggml_type=kind, data=_fit(t.data, kind, t.dims))
    elif action < 0.7:  # a tensor dropped
        del tensors[i]
    elif action < 0.8:  # a tensor renamed (a layer index out of range, a typo, a duplicate name)
        name = t.name if isinstance(t.name, str) else ""
        new = rng.choice(
            [
                name.replace("blk.0.", "blk.7."),
                name.replace("blk.1.", "blk.99999999999."),
                name + "x",
                "blk.0.ffn_gate_inp.weight",
                "output.weight",
                "rope_freqs.weight",
                "blk.0.attn_qkv.weight",
                "blk.0.attn_q.bias",
            ]
        )
        tensors[i] = replace(t, name=new)
    else:  # the values: NaN, inf or huge floats written into an F32 tensor
        if t.ggml_type == F32 and t.data:
            values = np.frombuffer(t.data, dtype="<f4").copy()
            values[rng.randrange(values.size)] = rng.choice([math.nan, math.inf, -math.inf, 3e38])
            tensors[i] = replace(t, data=values.tobytes())
    return replace(m, tensors=tensors)


_BLOCKS = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    10: (256, 84),
    12: (256, 144),
    14: (256, 210),
    16: (256, 66),
    30: (1, 2),
    39: (32, 17),
}


def _fit(data: bytes, ggml_type: int, dims: list[int]) -> bytes:
    """The tensor's bytes resized to what ``dims`` of ``ggml_type`` need (repeated or cut), capped
    at 64 KiB: a huge claimed shape keeps its small data and the parser must refuse it."""
    n = 1
    for d in dims:
        n *= max(d, 0)
    per_block, block_bytes = _BLOCKS.get(ggml_type, (1, 4))
    want = min(n // per_block * block_bytes, 1 << 16)
    if not data:
        return bytes(want)
    return (data * (want // len(data) + 1))[:want]


def _damage_bytes(rng: random.Random, data: bytes) -> bytes:
    """Byte-level damage after the metadata was chosen: an overwritten u64/u32, a cut."""
    out = bytearray(data)
    if rng.random() < 0.5:
        pos = rng.randrange(8, len(out) - 8)
        if rng.random() < 0.5:
            out[pos : pos + 8] = struct.pack("<Q", rng.choice([v for v in _INTEGERS if 0 <= v < 2**64]))
        else:
            out[pos : pos + 4] = struct.pack("<I", rng.choice([v for v in _INTEGERS if 0 <= v < 2**32]))
    else:
        out = out[: rng.randrange(len(out))]
    return bytes(out)


def case(n: int) -> bytes:
    """Corpus case ``n``: a seed with 1-3 structural mutations, sometimes byte-level damage."""
    rng = random.Random(n)
    arch = ARCHITECTURES[n % len(ARCHITECTURES)]
    m = SEEDS[arch]
    for _ in range(rng.choice([1, 1, 2, 3])):
        m = _mutate_metadata(rng, m, arch) if rng.random() < 0.65 else _mutate_tensors(rng, m)
    data = m.to_bytes()
    if rng.random() < 0.1:
        data = _damage_bytes(rng, data)
    return data


# -- the pipeline ----------------------------------------------------------------------------------


class Hang(Exception):
    """A case ran past its time bound (raised by the CPU timer; never a VerispecError)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread once the block has used ``seconds`` of CPU time.

    CPU time (ITIMER_PROF), not wall time: a loop over 2^64 layers is caught however loaded the
    machine is, and a busy neighbour on a shared runner cannot make a quick case look hung.
    """

    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds} CPU seconds")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


STAGES = ("parse", "inspect", "config", "tokenizer", "reference", "engine_f32", "engine_quantized")


def exercise(data: bytes) -> dict[str, str]:
    """Run ``data`` through every stage; stage -> "ok" or the typed error's class name. A stage
    after a failed one it depends on is "skipped". Untyped exceptions propagate."""
    from verispec.commands.inspect import describe, text_report
    from verispec.engine import load_model
    from verispec.reference.config import Config
    from verispec.reference.errors import VerispecError
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.model import Model
    from verispec.reference.tokenizer import Tokenizer

    outcome = dict.fromkeys(STAGES, "skipped")

    def stage(name: str, work: Callable[[], object]) -> bool:
        try:
            work()
        except VerispecError as exc:
            outcome[name] = type(exc).__name__
            return False
        outcome[name] = "ok"
        return True

    box: dict[str, Any] = {}

    def parse() -> None:
        box["f"] = GGUFFile.from_bytes(data)

    if not stage("parse", parse):
        return outcome
    f = box["f"]

    def inspect() -> None:
        report = describe(f)
        json.dumps(report)
        text_report(f, report)

    def tokenizer() -> None:
        tok = Tokenizer.from_gguf(f.metadata)
        ids = tok.encode("hello the and <s> x", add_bos=True, parse_special=True)
        tok.decode(ids)

    def forward(model: Any) -> None:
        cache = model.new_cache(8)
        model.forward([0, model.config.n_vocab - 1], cache)

    stage("inspect", inspect)
    stage("config", lambda: Config.from_gguf(f))
    stage("tokenizer", tokenizer)
    stage("reference", lambda: forward(Model.load(f)))
    # as the CLI loads (engine.load_model): phi3 runs on the reference under "fast"; the fast
    # engine refuses quantized weights for it (UnsupportedArchitecture)
    stage("engine_f32", lambda: forward(load_model(f, engine="fast", weights="f32")))
    stage("engine_quantized", lambda: forward(load_model(f, engine="fast", weights="quantized")))
    return outcome


def run_cases(cases: range, time_limit_s: float = TIME_LIMIT_S) -> tuple[Counter[str], list[str]]:
    """Exercise every case; (counts of "stage: outcome", failures as one line each)."""
    counts: Counter[str] = Counter()
    failures: list[str] = []
    for n in cases:
        data = case(n)
        try:
            with time_limit(time_limit_s):
                outcome = exercise(data)
        except Exception as exc:  # the finding: anything but a typed error (Hang included)
            failures.append(f"case {n}: {type(exc).__name__}: {exc}"[:300])
            counts["untyped: " + type(exc).__name__] += 1
            continue
        for name, result in outcome.items():
            counts[f"{name}: {result}"] += 1
    return counts, failures


def main() -> int:
    parser = argparse.ArgumentParser(description="run the mutated-model corpus; print totals")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    counts, failures = run_cases(range(args.start, args.start + args.cases))
    for line in failures:
        print("FAIL", line)
    print(
        json.dumps(
            {
                "cases": args.cases,
                "start": args.start,
                "seconds": round(time.perf_counter() - started, 1),
                "untyped": len(failures),
                "outcomes": dict(sorted(counts.items())),
            },
            indent=1,
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
