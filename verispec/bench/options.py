"""What `verispec bench` measures and how much: the prompt set, the draft sources, the budget."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verispec.workload import WorkloadItem

# A mixed prompt set (chat, code, structured, prose, repetitive). Kinds "structured" and
# "repetitive" are where the >= 3x speculative target applies.
PROMPTS: tuple[tuple[str, str], ...] = (
    ("chat", "<|im_start|>user\nWhat are three good habits for staying healthy?<|im_end|>\n<|im_start|>assistant\n"),
    (
        "code",
        'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\ndef factorial(n):\n',
    ),
    ("structured", "id,name,city\n1,Alice,Paris\n2,Bob,London\n3,Carol,Berlin\n4,Dave,Madrid\n5,Eve,Rome\n6,"),
    ("prose", "The history of the printing press begins in the fifteenth century, when"),
    (
        "repetitive",
        "one two three four five six seven eight nine ten. one two three four five six seven eight nine ten. one two three",
    ),
)
# auto: the default draft (reference/draft_choice.py); ngram: the one llama.cpp's prompt lookup is compared with
DRAFTS: tuple[str, ...] = ("auto", "ngram")
PROMPT_KINDS_FAST = {"structured", "repetitive"}


@dataclass(frozen=True)
class BenchOptions:
    """How much to measure (the tests use a tiny budget)."""

    decode_tokens: int = 48
    prefill_tokens: int = 64
    matmul_repeats: int = 5
    reference_tokens: int = 4
    drafts: tuple[str, ...] = DRAFTS
    k: int = 4
    prompts: tuple[tuple[str, str], ...] = PROMPTS
    sampled_temperature: float = 0.8
    reference: bool = True
    kernels: bool = True  # compare OpenBLAS kernels (child processes: default vs Haswell)
    repeats: int = 2  # speculative vs plain: alternate this many runs of each, keep the best of each
    seed: int = 0
    early_exit: Path | None = None  # a calibration artifact (verispec calibrate) for this model
    backends: bool = True  # every backend / weights mode in this run (verispec/bench/backends.py)
    rss_children: bool = True  # with backends: a child process per mode for its peak RSS
    workload: "tuple[WorkloadItem, ...]" = ()  # verispec/workload.py requests (chat): a second prompt set
    workload_sampled: bool = True  # also run the workload at sampled_temperature
    workload_length: str = (
        "answer"  # tokens every side decodes per request (verispec/bench/workload.py): "answer", "max"
    )
    workload_weights: str = "auto"  # the engine mode the workload runs on ("auto": the headline's; "f32", "int8")
    weights: str = "auto"  # the headline model's weights mode (verispec.engine_load.resolve_weights)
    head: str = "full"  # "sparse": the head section, the sparse head beside the full one (verispec/bench/head.py)
