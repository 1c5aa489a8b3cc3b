"""transformers' universal assisted generation (sampled) does not sample the target's law.

    python -m tests.support.peer_verdicts --out /tmp/peers --write-only     # the tiny GGUF models
    python examples/transformers_universal_repro.py /tmp/peers/tinyllama.gguf /tmp/peers/phi3.gguf
    python examples/transformers_universal_repro.py SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf

The target is a 3-layer llama-shaped GGUF, the assistant a Phi-3-shaped one whose tokenizer has
four more tokens (so transformers takes the different-tokenizer path: ``assistant_model`` +
``tokenizer`` + ``assistant_tokenizer`` with ``do_sample=True``, i.e. its
``UniversalSpeculativeDecodingGenerator``). Everything here is transformers' own: its GGUF loader,
its forward, its generate(). The law of the FIRST generated token is the target's own
``softmax(logits / T)`` (plain ``generate(do_sample=True)`` samples it; speculative sampling must
too). The script draws ``N`` speculative generations, takes each first token, and compares its
frequencies with that law: the total-variation distance, the most over-drawn token, and an exact
binomial tail for it, times the vocabulary size (Bonferroni: the token is chosen after the draw,
from V candidates, so V x tail bounds the chance that ANY token is drawn that often). Exit status 1
when that p-value is below 1e-6 (the law is not the target's), 0 otherwise. Nothing of verispec is
imported. (TV alone proves nothing on a real vocabulary: 60 draws of a law spread over 49k tokens
are far from it in TV however they are drawn.)
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

PROMPT = "The cat sat on the"
TEMPERATURE = 0.7
N = 60
MAX_NEW = 4  # the assistant drafts only when at least 2 new tokens remain


def _load(path: Path) -> tuple[object, object]:
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model.eval(), tokenizer


def binomial_upper_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def main(target_path: Path, assistant_path: Path) -> int:
    import torch

    torch.set_num_threads(1)
    target, target_tokenizer = _load(target_path)
    assistant, assistant_tokenizer = _load(assistant_path)
    ids = target_tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        law = torch.softmax(target(ids).logits[0, -1].double() / TEMPERATURE, dim=-1)  # type: ignore[operator]
    eos = target.generation_config.eos_token_id  # type: ignore[attr-defined]
    pad = eos[0] if isinstance(eos, list) else eos
    torch.manual_seed(0)
    firsts = Counter()
    for _ in range(N):
        out = target.generate(  # type: ignore[attr-defined]
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=TEMPERATURE,
            top_k=0,
            max_new_tokens=MAX_NEW,
            assistant_model=assistant,
            tokenizer=target_tokenizer,
            assistant_tokenizer=assistant_tokenizer,
            pad_token_id=pad,
        )
        firsts[int(out[0, ids.shape[1]])] += 1
    empirical = torch.zeros_like(law)
    for token, count in firsts.items():
        empirical[token] = count / N
    tv = 0.5 * float((empirical - law).abs().sum())
    token, count = firsts.most_common(1)[0]
    p = float(law[token])
    tail = min(1.0, law.shape[0] * binomial_upper_tail(count, N, p))
    print(f"transformers universal assisted generation, T={TEMPERATURE}, first token of {N} generations")
    print(
        f"TV(empirical, target law) = {tv:.3f}; token {token} ({target_tokenizer.convert_ids_to_tokens(token)!r}) "
        f"drawn {count}/{N} times, target probability {p:.2e}, V x P(X >= {count}) = {tail:.3g} (V = {law.shape[0]})"
    )
    return 1 if tail < 1e-6 else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: transformers_universal_repro.py TARGET.gguf ASSISTANT.gguf (another tokenizer)")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
