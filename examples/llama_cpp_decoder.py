"""llama-cpp-python's prompt-lookup decoding as a decoder under `verispec check-decoder`.

    pip install llama-cpp-python        # builds llama.cpp from source (~10 min); NOT in CI
    verispec check-decoder --engine examples.llama_cpp_decoder:prompt_lookup --greedy --max-tokens 32
    verispec check-decoder --engine examples.llama_cpp_decoder:prompt_lookup --tv 0.2
    verispec models synth --arch llama --out models/    # tiny: the default depth mode at full power
    verispec check-decoder --engine examples.llama_cpp_decoder:prompt_lookup --model models/llama-seed0.gguf \
        --target-law engine-logits

Run against llama-cpp-python 0.3.36 (greedy mode on the bench prompts: docs/checking-decoders.md,
the llama-cpp-python verdict); `make test` never installs it (it compiles llama.cpp: the optional
``llama`` extra), and its test skips without it. API used: ``Llama(draft_model=
LlamaPromptLookupDecoding(...))``, ``Llama.generate`` yielding token ids, ``set_seed``, and a
``logits_all`` context's ``eval``/``scores`` for :meth:`LlamaCppLookupDecoder.logits`.

Numerics: llama.cpp computes with its own quantized kernels (Q4_1 dot products in integer/float16
blocks, not our float32 on dequantized weights), so the target law from verispec's reference
forward is off by that engine's numerical noise: a law test with a small ``--tv`` can fail for
numerics alone. Use ``--target-law engine-logits`` (its own logits, our processors) or
``two-sample`` (its plain decoding) instead; greedy mode judges a divergence by llama.cpp's own
margin and batch-shape noise (the adapter reports its logits).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verispec.peers.llama_cpp_peer import plain_logits
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer

LOOKUP_TOKENS = 10  # num_pred_tokens, llama-cpp-python's default


class LlamaCppLookupDecoder:
    """``generate`` / ``sample`` / ``greedy`` / ``logits`` (and the plain twins) of
    :mod:`spec.decoder.check` over ``llama_cpp.Llama.generate``."""

    def __init__(self, path: Path, lookup_tokens: int = LOOKUP_TOKENS) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.path = path
        self.plain = Llama(model_path=str(path), n_ctx=512, verbose=False)
        self.speculative = Llama(
            model_path=str(path),
            n_ctx=512,
            verbose=False,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens),
        )
        self.scorer = Llama(model_path=str(path), n_ctx=512, verbose=False, logits_all=True)
        self.eog = Tokenizer.from_file(path).eog_ids  # where a sample legitimately ends early

    def _take(self, llm: Any, prompt_ids: Sequence[int], n: int, **sampling: Any) -> list[int]:
        """The first n generated ids (fewer at an end-of-generation id). The context is reset first:
        ``generate`` otherwise reuses the cached prompt and re-evaluates only its last token, so a
        run's batch shapes (and rounding) would depend on the previous call."""
        out: list[int] = []
        llm.reset()
        for token in llm.generate(list(prompt_ids), reset=True, **sampling):
            out.append(int(token))
            if len(out) == n or int(token) in self.eog:
                break
        return out

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> list[list[int]]:
        return self._sample(self.speculative, prompt_ids, params, m, n, seed)

    def _sample(
        self, llm: Any, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int
    ) -> list[list[int]]:
        if params.logit_bias:
            raise ValueError("this adapter does not map logit_bias")
        sampling = {
            "temp": params.temperature,
            "top_k": params.top_k,  # 0: off in llama.cpp as in verispec
            "top_p": params.top_p,
            "min_p": params.min_p,  # llama-cpp-python defaults to 0.05: pass ours
            "repeat_penalty": params.repeat_penalty,
        }
        out = []
        for i in range(n):
            llm.set_seed(seed + i)
            out.append(self._take(llm, prompt_ids, m, **sampling))
        return out

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        """n whole generations (the default depth mode): each stops at an end-of-generation id (kept)
        or after max_tokens."""
        return self._generations(self.speculative, prompt_ids, params, max_tokens, n, seed, min_tokens)

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        return self._generations(self.plain, prompt_ids, params, max_tokens, n, seed, min_tokens)

    def _generations(
        self,
        llm: Any,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int,
    ) -> list[list[int]]:
        if min_tokens:
            raise ValueError("llama-cpp-python's generate has no min_tokens (run check-decoder without --min-tokens)")
        return self._sample(llm, prompt_ids, params, max_tokens, n, seed)

    def sample_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int
    ) -> list[list[int]]:
        """The same samples with speculation off (``--target-law two-sample``)."""
        return self._sample(self.plain, prompt_ids, params, m, n, seed)

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        llm = self.speculative if speculative else self.plain
        return self._take(llm, prompt_ids, max_tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0)

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> list[float]:
        """llama.cpp's own plain next-token logits after the prefix (a ``logits_all`` context,
        the shipped adapter's :func:`verispec.peers.llama_cpp_peer.plain_logits`): one batch of the
        whole prefix, or (``split_at`` s) ``prefix[:s]`` in one batch, then each later token alone,
        as plain decoding feeds a generation (speculative verification feeds the last token and
        its drafts in one batch: another shape again)."""
        return plain_logits(self.scorer, prefix_ids, split_at)


def prompt_lookup(path: Path) -> LlamaCppLookupDecoder:
    """The ``--engine`` factory."""
    return LlamaCppLookupDecoder(Path(path))


def divergence_rows(engine: LlamaCppLookupDecoder, prompt_ids: Sequence[int], max_tokens: int) -> dict[str, Any]:
    """At the first divergence of speculative from plain greedy: the exact row each path drew the
    token from. The speculative context keeps ``logits_all`` scores, and positions before a
    rejected draft are never re-evaluated, so its row at the divergence is still there after the
    run; the plain path's row is replayed on the scorer in plain decoding's shapes (the prompt in
    one batch, then one token at a time)."""
    import numpy as np

    prompt = [int(t) for t in prompt_ids]
    plain = engine.greedy(prompt, max_tokens, False)
    spec = engine.greedy(prompt, max_tokens, True)
    j = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
    if j is None:
        return {"divergence": None, "tokens": min(len(plain), len(spec))}
    row_spec = np.array(engine.speculative.scores[len(prompt) + j - 1], dtype=np.float64)
    row_plain = np.asarray(engine.logits(prompt + plain[:j], split_at=len(prompt)), dtype=np.float64)
    a, b = plain[j], spec[j]
    return {
        "divergence": j,
        "plain_token": a,
        "speculative_token": b,
        "argmax_plain_row": int(row_plain.argmax()),
        "argmax_speculative_row": int(row_spec.argmax()),
        "gap_plain_row": float(row_plain[a] - row_plain[b]),  # logit(plain token) - logit(speculative token)
        "gap_speculative_row": float(row_spec[a] - row_spec[b]),
        "max_abs_row_difference": float(np.max(np.abs(row_spec - row_plain))),
    }


if __name__ == "__main__":  # python -m examples.llama_cpp_decoder: the rows at the bench prompts' divergences
    import json

    from verispec.bench.options import PROMPTS
    from verispec.registry import resolve_model

    model = resolve_model("smollm2-135m")
    tokenizer = Tokenizer.from_file(model)
    decoder = prompt_lookup(model)
    for kind, text in PROMPTS:
        ids = tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True)
        print(kind, json.dumps(divergence_rows(decoder, ids, 48)), flush=True)
