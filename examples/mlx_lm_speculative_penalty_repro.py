"""mlx-lm's speculative decoding drops the prompt from the logits processors' token history.

Run with a python that has mlx-lm (nothing of verispec is used):

    /work/venvs/mlx/bin/python examples/mlx_lm_speculative_penalty_repro.py

``generate_step`` hands each logits processor the whole history: the prompt (added during
prefill) and the output so far. ``speculative_generate_step`` starts its history (``prev_tokens``)
at None and its prefill does not add the prompt, so at the first generated position a processor
sees only the LAST prompt token, and later ones the last prompt token plus the output. A
repetition penalty (``make_logits_processors(repetition_penalty=...)``) therefore does not
penalize the prompt's tokens under speculation: its law differs from plain decoding's.

The script shows it twice on a tiny random llama built in mlx (no weights are downloaded):

1. deterministic: a recording processor's first call sees the 12-token prompt under
   ``generate_step`` and 1 token under ``speculative_generate_step`` (the model itself as the
   draft, so every verification path is mlx-lm's own);
2. statistical: the first generated token under repetition penalty 3 (context 20), 1,500 draws
   each way. The plain law gives the prompt's other tokens a small mass; the speculative draws
   land there at the UNPENALIZED rate. The exact masses come from the model's logits; each path's
   frequency is tested against them with an exact binomial tail.

Exit 1 when speculation changes the processors' history or the first token's law (the defect
present), 0 otherwise.
"""

from __future__ import annotations

import math
import sys

import mlx.core as mx
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.models import llama
from mlx_lm.sample_utils import make_logits_processors, make_sampler

PROMPT = [5, 9, 14, 22, 31, 40, 47, 52, 58, 3, 17, 60]
PENALTY, CONTEXT, DRAWS = 3.0, 20, 1500


def tiny_model() -> llama.Model:
    mx.random.seed(0)
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        rms_norm_eps=1e-5,
        vocab_size=64,
    )
    model = llama.Model(args)
    # a head that likes the prompt's tokens, so the penalty has mass to move
    embed = model.model.embed_tokens.weight
    model.model.embed_tokens.weight = embed * 4.0
    mx.eval(model.parameters())
    return model


def first_history(model: llama.Model, speculative: bool) -> list[int]:
    seen: list[list[int]] = []

    def record(tokens: mx.array, logits: mx.array) -> mx.array:
        seen.append([int(t) for t in tokens.tolist()])
        return logits

    prompt = mx.array(PROMPT, dtype=mx.uint32)
    if speculative:
        steps = speculative_generate_step(
            prompt,
            model,
            model,
            num_draft_tokens=2,
            max_tokens=1,
            sampler=make_sampler(temp=0.0),
            logits_processors=[record],
        )
    else:
        steps = generate_step(prompt, model, max_tokens=1, sampler=make_sampler(temp=0.0), logits_processors=[record])
    for _ in steps:
        break
    # plain: one call. speculative with max_tokens 1: one draft call (num_draft = min(1, 2)), then
    # the target's calls for its rows 0 and 1; row 0 is the emitted token's
    return seen[0] if not speculative else seen[1]


def first_token_mass(model: llama.Model, tokens: set[int], history: list[int]) -> float:
    """The exact probability of ``tokens`` at the first position when the penalty sees ``history``."""
    logits = model(mx.array([PROMPT], dtype=mx.uint32))[:, -1, :]
    penalized = make_logits_processors(repetition_penalty=PENALTY, repetition_context_size=CONTEXT)[0](
        mx.array(history, dtype=mx.uint32), logits
    )
    probs = mx.softmax(penalized[0].astype(mx.float32))
    return float(sum(probs[t].item() for t in tokens))


def frequency(model: llama.Model, tokens: set[int], speculative: bool) -> int:
    processors = make_logits_processors(repetition_penalty=PENALTY, repetition_context_size=CONTEXT)
    sampler = make_sampler(temp=1.0)
    prompt = mx.array(PROMPT, dtype=mx.uint32)
    mx.random.seed(1)
    hits = 0
    for _ in range(DRAWS):
        if speculative:
            steps = speculative_generate_step(
                prompt, model, model, num_draft_tokens=2, max_tokens=1, sampler=sampler, logits_processors=processors
            )
        else:
            steps = generate_step(prompt, model, max_tokens=1, sampler=sampler, logits_processors=processors)
        token = next(iter(steps))[0]
        hits += int(token) in tokens
    return hits


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(|X - np| >= |k - np|) for X ~ Binomial(n, p), two-sided, exact (sum of the pmf)."""
    mean = n * p
    pmf = [
        math.exp(
            math.lgamma(n + 1)
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * math.log(p)
            + (n - i) * math.log1p(-p)
        )
        for i in range(n + 1)
    ]
    return min(1.0, sum(q for i, q in enumerate(pmf) if abs(i - mean) >= abs(k - mean)))


def main() -> int:
    model = tiny_model()
    plain_history = first_history(model, speculative=False)
    spec_history = first_history(model, speculative=True)
    print(
        f"processor history at the first position: generate_step {len(plain_history)} tokens {plain_history}, "
        f"speculative_generate_step {len(spec_history)} tokens {spec_history}"
    )
    others = set(PROMPT[:-1]) - {PROMPT[-1]}
    p_plain = first_token_mass(model, others, PROMPT)
    p_dropped = first_token_mass(model, others, PROMPT[-1:])
    k_plain, k_spec = frequency(model, others, False), frequency(model, others, True)
    tail_plain, tail_spec = binomial_tail(k_plain, DRAWS, p_plain), binomial_tail(k_spec, DRAWS, p_plain)
    print(
        f"mass of the prompt's other tokens at the first position, penalty {PENALTY}: plain law {p_plain:.4f}, "
        f"law with only the last prompt token penalized {p_dropped:.4f}"
    )
    print(
        f"generate_step: {k_plain}/{DRAWS} = {k_plain / DRAWS:.4f} (two-sided exact p = {tail_plain:.3g} against the plain law)"
    )
    print(
        f"speculative_generate_step: {k_spec}/{DRAWS} = {k_spec / DRAWS:.4f} (p = {tail_spec:.3g} against the plain law)"
    )
    defect = len(spec_history) != len(plain_history) or tail_spec < 1e-6
    print("DEFECT: speculation changes the repetition penalty's law" if defect else "no difference")
    return 1 if defect else 0


if __name__ == "__main__":
    sys.exit(main())
