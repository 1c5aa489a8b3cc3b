"""mlx-lm's speculative decoding (``speculative_generate_step``) as a ``check-decoder --engine-cmd``
program, run by the python of a venv that has mlx-lm (never the project's own venv):

    verispec check-decoder --model TARGET.gguf --depth 64 --temperature 1 --top-k 0 \\
        --engine-cmd "/work/venvs/mlx/bin/python examples/mlx_lm_decoder_cmd.py \\
                      --target TARGET.gguf --draft DRAFT.gguf"

mlx-lm cannot read a GGUF: the program writes each file as a Hugging Face llama folder with
verispec's own float32 dequantization (verispec/peers/hf_export.py, imported from this checkout)
and loads it with ``mlx_lm.utils.load_model``; mlx then computes in float32 on our numbers (max
|logit difference| to our reference forward ~1e-5 on the tiny models), so the gate's target law
comes from our forward (``--target-law reference``, the default).

Ops (spec/decoder/check.py): ``generate`` = ``speculative_generate_step`` with the draft model
(``--num-draft`` drafts a cycle; mlx-lm verifies by sample-and-match: the target samples every
position with the same sampler and keeps drafts while they equal its own draws), cycles reported
from its ``from_draft`` flags; ``generate_plain`` = ``generate_step`` alone; ``greedy``; ``logits``
(one pass, or ``split_at``: a KV cache fed the rest one token at a time).

The law: mlx-lm's ``make_sampler`` filters the processed log-probabilities with top-p, then min-p,
then top-k, all on the UNTEMPERED law, and draws ``categorical(logprobs / temp)``; its
``make_repetition_penalty`` divides positive (multiplies negative) logits of the last
``repetition_context_size`` tokens of the token history (``generate_step``: prompt and output).
That is verispec's default law (reference/sampling.py: penalty over the last ``repeat_last_n``
ids of prompt + output, then top-k, top-p, min-p untempered, then temperature) except where top-k
and top-p are both on (top-p then renormalizes over another set), so that combination, a logit
bias and another ecosystem's ``law`` are answered with an error. Each call seeds mlx's global
generator (``mx.random.seed(seed)``) and draws its ``n`` generations one after another; a
generation stops at an end-of-generation id of the target's ``config.json`` or at ``max_tokens``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine_cmd_wire import serve  # examples/, on the path when this file runs

REPO = Path(__file__).resolve().parents[1]


def install_fix() -> None:
    """The fix of examples/repros/mlx_lm_speculative_prefill_history.py applied to this process's mlx-lm."""
    import importlib.util

    path = REPO / "examples" / "repros" / "mlx_lm_speculative_prefill_history.py"
    spec = importlib.util.spec_from_file_location("mlx_lm_speculative_prefill_history", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.install_mlx_lm_fix()


def hf_folder(gguf: Path, cache: Path) -> Path:
    """The Hugging Face folder of ``gguf`` (written once per file content, under ``cache``)."""
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()[:16]
    folder = cache / f"{gguf.stem}-{digest}"
    if not (folder / "config.json").exists():
        sys.path.insert(0, str(REPO))
        from verispec.peers.hf_export import export

        tmp = Path(tempfile.mkdtemp(dir=cache))
        export(gguf, tmp)
        tmp.rename(folder)
    return folder


class MlxDecoder:
    """The target (and draft) mlx-lm models and the ops of the wire."""

    def __init__(self, target: Path, draft: Path | None, num_draft: int, cache: Path) -> None:
        from mlx_lm.utils import load_model

        cache.mkdir(parents=True, exist_ok=True)
        folder = hf_folder(target, cache)
        self.model, config = load_model(folder)
        self.draft = None if draft is None else load_model(hf_folder(draft, cache))[0]
        self.num_draft = num_draft
        self.plain = False  # --plain: generate is generate_step as well
        self.eog = frozenset(int(t) for t in config.get("eos_token_id") or [])

    # -- the law ---------------------------------------------------------------------------------

    def sampling(self, params: dict[str, Any], law: Any) -> tuple[Any, list[Any]]:
        """mlx-lm's sampler and logits processors of verispec's params (module docstring)."""
        from mlx_lm.sample_utils import make_logits_processors, make_sampler

        if law is not None:
            raise ValueError(
                f"this adapter samples mlx-lm's law, which is verispec's default law; not --law {law.get('name')!r}"
            )
        if params.get("logit_bias"):
            raise ValueError("the mlx-lm adapter maps no logit_bias")
        top_k, top_p = int(params.get("top_k", 0)), float(params.get("top_p", 1.0))
        if top_k > 0 and top_p < 1.0:
            raise ValueError("mlx-lm applies top-p before top-k: with both on its law is not verispec's")
        sampler = make_sampler(
            temp=float(params.get("temperature", 1.0)),
            top_p=top_p if top_p < 1.0 else 0.0,
            min_p=float(params.get("min_p", 0.0)),
            top_k=top_k,
        )
        penalty = float(params.get("repeat_penalty", 1.0))
        window = int(params.get("repeat_last_n", 64))
        if penalty != 1.0 and window <= 0:
            raise ValueError("repeat_last_n must be positive with a penalty (mlx-lm takes a context size)")
        processors = (
            make_logits_processors(repetition_penalty=penalty, repetition_context_size=window) if penalty != 1.0 else []
        )
        return sampler, processors

    # -- generations -----------------------------------------------------------------------------

    def one(
        self, prompt: list[int], max_tokens: int, sampler: Any, processors: list[Any], speculative: bool
    ) -> dict[str, Any]:
        """One generation: ids, and (speculative) its cycles ``[drafted, accepted]``."""
        import mlx.core as mx
        from mlx_lm.generate import generate_step, speculative_generate_step

        x = mx.array(prompt, dtype=mx.uint32)
        ids: list[int] = []
        cycles: list[list[int]] = []
        if speculative:
            if self.draft is None:
                raise ValueError("speculative generation needs --draft")
            steps: Any = speculative_generate_step(
                x,
                self.model,
                self.draft,
                num_draft_tokens=self.num_draft,
                max_tokens=max_tokens,
                sampler=sampler,
                logits_processors=processors or None,
            )
        else:
            steps = (
                (t, lp, False)
                for t, lp in generate_step(
                    x, self.model, max_tokens=max_tokens, sampler=sampler, logits_processors=processors or None
                )
            )
        accepted, drafted = 0, min(max_tokens, self.num_draft)
        for token, _logprobs, from_draft in steps:
            ids.append(int(token))
            if from_draft:
                accepted += 1
            else:  # the cycle's last token (its bonus or its repair)
                cycles.append([drafted, accepted])
                accepted, drafted = 0, min(max_tokens - len(ids), self.num_draft)
            if int(token) in self.eog or len(ids) == max_tokens:
                break
        if accepted:  # a cycle cut by an end-of-generation id among its accepted drafts
            cycles.append([drafted, accepted])
        steps.close()
        return {"ids": ids, "cycles": cycles} if speculative else {"ids": ids}

    def generations(self, inp: dict[str, Any], speculative: bool) -> list[dict[str, Any]]:
        import mlx.core as mx

        if int(inp.get("min_tokens", 0)):
            raise ValueError("mlx-lm's generate has no min_tokens")
        sampler, processors = self.sampling(inp["params"], inp.get("law"))
        mx.random.seed(int(inp["seed"]) % 2**32)
        prompt, max_tokens = [int(t) for t in inp["prompt_ids"]], int(inp["max_tokens"])
        return [self.one(prompt, max_tokens, sampler, processors, speculative) for _ in range(int(inp["n"]))]

    def greedy(self, inp: dict[str, Any]) -> list[int]:
        from mlx_lm.sample_utils import make_sampler

        out = self.one(
            [int(t) for t in inp["prompt_ids"]],
            int(inp["max_tokens"]),
            make_sampler(temp=0.0),
            [],
            bool(inp["speculative"]),
        )
        ids: list[int] = out["ids"]
        return ids

    def logits(self, prefix: list[int], split_at: int | None) -> list[float]:
        import mlx.core as mx
        from mlx_lm.models.cache import make_prompt_cache

        if split_at is None:
            row = self.model(mx.array([prefix], dtype=mx.uint32))[0, -1]
        else:
            cache = make_prompt_cache(self.model)
            row = self.model(mx.array([prefix[:split_at]], dtype=mx.uint32), cache=cache)[0, -1]
            for token in prefix[split_at:]:
                row = self.model(mx.array([[token]], dtype=mx.uint32), cache=cache)[0, -1]
        return [float(v) for v in row.astype(mx.float32).tolist()]

    # -- the wire --------------------------------------------------------------------------------

    def answer(self, op: str, inp: dict[str, Any]) -> dict[str, Any]:
        if op == "generate":
            return {"samples": self.generations(inp, speculative=not self.plain)}
        if op == "generate_plain":
            return {"samples": self.generations(inp, speculative=False)}
        if op == "greedy":
            return {"ids": self.greedy(inp)}
        if op == "logits":
            return {"logits": self.logits([int(t) for t in inp["prefix_ids"]], inp.get("split_at"))}
        raise LookupError(op)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlx_lm_decoder_cmd.py")
    parser.add_argument("--target", type=Path, required=True, help="the target GGUF (llama architecture)")
    parser.add_argument("--draft", type=Path, help="the draft GGUF (same vocabulary)")
    parser.add_argument(
        "--num-draft", type=int, default=2, help="drafts per cycle (num_draft_tokens; mlx-lm's default 2)"
    )
    parser.add_argument("--plain", action="store_true", help="answer generate with generate_step too (the control)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "verispec-mlx-models")
    parser.add_argument(
        "--patched",
        action="store_true",
        help="speculative_generate_step with the prompt-history fix of examples/repros/mlx_lm_speculative_prefill_history.py",
    )
    args = parser.parse_args(argv)
    if args.patched:
        install_fix()
    decoder = MlxDecoder(args.target, None if args.plain else args.draft, args.num_draft, args.cache)
    decoder.plain = args.plain
    serve(decoder.answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
