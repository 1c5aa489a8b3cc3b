"""openvino-genai's speculative paths as a ``check-decoder --engine-cmd`` program, run by the python
of a venv that has openvino-genai (never the project's own venv):

    verispec check-decoder --model TARGET.gguf --depth 64 --law transformers --temperature 0.7 \\
        --engine-cmd "/work/venvs/openvino/bin/python examples/openvino_genai_decoder_cmd.py \\
                      --target TARGET.gguf --mode prompt-lookup"

openvino-genai reads the GGUF itself (``LLMPipeline(FILE.gguf, "CPU")``, its GGUF reader): a llama
file whose matrices are F16 (``general.file_type`` MOSTLY_F16) and whose tokenizer is byte-level
BPE ("gpt2": the only kind its reader converts), as tests/support/synthetic.py writes with
``quant_types=("F16",), file_type="MOSTLY_F16", tokenizer="bpe"``. With
``INFERENCE_PRECISION_HINT=f32`` and ``KV_CACHE_PRECISION=f32`` it computes in float32 on the same
F16 numbers as our dequantization: greedy tokens equal ours (tests/test_peer_engine_cmd.py) and
its reported score of a greedy generation (the sum of 10 log-probabilities) agreed with ours to
9e-7 when measured, so the target law comes from our reference forward.

Modes (``--mode``): ``plain`` (no speculation; the control), ``prompt-lookup``
(``LLMPipeline(..., prompt_lookup=True)``, ``num_assistant_tokens`` drafts from n-grams of up to
``max_ngram_size``), ``draft`` (``draft_model=`` the IR of ``--draft``, written next to a copy of
it by the pipeline's ``enable_save_ov_model``: ``draft_model`` does not read GGUF).
``--no-prefix-caching`` builds the speculative pipeline with a ``SchedulerConfig`` whose
``enable_prefix_caching`` is False (``LLMPipeline`` turns it on by default: openvino.genai #4190's
crash of sampled draft-model decoding lives there).

The law (openvino-genai's LogitProcessor, src/cpp/src/sampling/logit_processor.hpp): repetition
penalty over the prompt's and the output's distinct tokens (the whole sequence), then top-k, then
temperature, then min-p and top-p on the TEMPERED probabilities. That is ``--law transformers``
(spec/decoder/laws/transformers.py) except with min-p and top-p both on (transformers applies top-p
first), which is refused. Under verispec's default law the adapter answers only where the two
laws coincide: top-k at any temperature, top-p or min-p at temperature 1, a penalty while the
prompt and ``max_tokens`` fit ``repeat_last_n``. Every generation is seeded (``rng_seed``) from
(gate seed, index) and stops at the file's end-of-generation ids (``stop_token_ids``; the stop
token is part of the output) or at ``max_tokens``.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine_cmd_wire import serve  # examples/, on the path when this file runs

PRECISION = {"KV_CACHE_PRECISION": "f32", "INFERENCE_PRECISION_HINT": "f32"}
EOG = (0, 2)  # tests/support/synthetic.py's BPE vocabulary: <|endoftext|>, <|im_end|>


def generation_seed(seed: int, index: int) -> int:
    """A seed per (gate seed, generation index): distinct pairs, distinct streams (splitmix64)."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + int(index) + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0xFFFFFFFF


def ir_folder(gguf: Path, cache: Path) -> Path:
    """The OpenVINO IR of ``gguf`` (the pipeline's own conversion, saved once per file content)."""
    import openvino_genai as g

    folder = cache / f"{gguf.stem}-{hashlib.sha256(gguf.read_bytes()).hexdigest()[:16]}"
    if not (folder / "openvino_model.xml").exists():
        tmp = Path(tempfile.mkdtemp(dir=cache))
        shutil.copy(gguf, tmp / gguf.name)
        g.LLMPipeline(str(tmp / gguf.name), "CPU", enable_save_ov_model=True, **PRECISION)
        (tmp / gguf.name).unlink()
        tmp.rename(folder)
    return folder


def check_verispec_law(params: dict[str, Any], context: int) -> None:
    """Refuse verispec-law params where openvino-genai's law is another (module docstring)."""
    t, top_p, min_p = (
        float(params.get("temperature", 1.0)),
        float(params.get("top_p", 1.0)),
        float(params.get("min_p", 0.0)),
    )
    if (top_p < 1.0 or min_p > 0.0) and t != 1.0:
        raise ValueError(
            "openvino-genai applies top-p and min-p after temperature: verispec's law only at temperature 1"
        )
    if float(params.get("repeat_penalty", 1.0)) != 1.0 and not 0 < context <= int(params.get("repeat_last_n", 64)):
        raise ValueError(
            "openvino-genai penalizes the whole sequence: verispec's law only while prompt + max_tokens fit repeat_last_n"
        )
    if params.get("logit_bias"):
        raise ValueError("the openvino-genai adapter maps no logit_bias")


def sampling(params: dict[str, Any], law: Any, context: int) -> dict[str, Any]:
    """GenerationConfig fields of the gate's law: verispec's params where they coincide, or the
    ``--law transformers`` profile's fields as they are."""
    if law is None:
        check_verispec_law(params, context)
        p = {
            "temperature": params.get("temperature", 1.0),
            "top_k": params.get("top_k", 0),
            "top_p": params.get("top_p", 1.0),
            "min_p": params.get("min_p", 0.0),
            "repetition_penalty": params.get("repeat_penalty", 1.0),
            "min_new_tokens": 0,
        }
    elif law.get("name") == "transformers":
        lp = law["params"]
        if not lp.get("do_sample", True):
            raise ValueError("do_sample false is greedy: run check-decoder --greedy")
        p = {
            "temperature": lp.get("temperature", 1.0),
            "top_k": lp.get("top_k", 50),
            "top_p": lp.get("top_p", 1.0),
            "min_p": lp.get("min_p") or 0.0,
            "repetition_penalty": lp.get("repetition_penalty", 1.0),
            "min_new_tokens": lp.get("min_new_tokens", 0),
        }
    else:
        raise ValueError(
            f"openvino-genai samples transformers' law (or verispec's where they coincide), not --law {law.get('name')!r}"
        )
    if float(p["top_p"]) < 1.0 and float(p["min_p"]) > 0.0:
        raise ValueError("openvino-genai applies min-p before top-p, transformers after: not both")
    return p


class OpenVinoDecoder:
    """One LLMPipeline (plain, prompt lookup or a draft model) and the ops of the wire."""

    def __init__(
        self,
        target: Path,
        mode: str,
        draft: Path | None,
        num_assistant: int,
        ngram: int,
        cache: Path,
        prefix_caching: bool = True,
    ) -> None:
        import openvino_genai as g

        cache.mkdir(parents=True, exist_ok=True)
        extra: dict[str, Any] = {}
        if not prefix_caching:
            scheduler = g.SchedulerConfig()
            scheduler.enable_prefix_caching = False
            extra["scheduler_config"] = scheduler
        if mode == "prompt-lookup":
            extra["prompt_lookup"] = True
        elif mode == "draft":
            if draft is None:
                raise SystemExit("--mode draft needs --draft")
            extra["draft_model"] = g.draft_model(str(ir_folder(draft, cache)), "CPU", **PRECISION)
        self.pipe = g.LLMPipeline(str(target), "CPU", **extra, **PRECISION)
        self.plain_pipe = self.pipe if mode == "plain" else None  # made when an op needs it
        self.target, self.mode, self.num_assistant, self.ngram = target, mode, num_assistant, ngram

    def pipeline(self, speculative: bool) -> Any:
        """This mode's pipeline, or (speculation off) a plain one of the same file."""
        import openvino_genai as g

        if speculative:
            return self.pipe
        if self.plain_pipe is None:
            self.plain_pipe = g.LLMPipeline(str(self.target), "CPU", **PRECISION)
        return self.plain_pipe

    def config(self, fields: dict[str, Any], max_tokens: int, do_sample: bool, speculative: bool) -> Any:
        cfg = self.pipeline(speculative).get_generation_config()
        cfg.max_new_tokens = max_tokens
        cfg.stop_token_ids = set(EOG)
        cfg.do_sample = do_sample
        if do_sample:
            cfg.temperature = float(fields["temperature"])
            cfg.top_k = int(fields["top_k"])
            cfg.top_p = float(fields["top_p"])
            cfg.min_p = float(fields["min_p"])
            cfg.repetition_penalty = float(fields["repetition_penalty"])
            cfg.min_new_tokens = int(fields["min_new_tokens"])
        if speculative and self.mode != "plain":
            cfg.num_assistant_tokens = self.num_assistant
        if speculative and self.mode == "prompt-lookup":
            cfg.max_ngram_size = self.ngram
        return cfg

    def run(self, prompt: list[int], cfg: Any, speculative: bool) -> list[int]:
        import numpy as np
        import openvino as ov
        import openvino_genai as g

        ids = np.array([prompt], dtype=np.int64)
        out = self.pipeline(speculative).generate(g.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), cfg)
        return [int(t) for t in out.tokens[0]]

    def generations(self, inp: dict[str, Any], speculative: bool) -> list[list[int]]:
        prompt, max_tokens = [int(t) for t in inp["prompt_ids"]], int(inp["max_tokens"])
        fields = sampling(inp["params"], inp.get("law"), len(prompt) + max_tokens)
        if int(inp.get("min_tokens", 0)):
            fields["min_new_tokens"] = int(inp["min_tokens"])
        cfg = self.config(fields, max_tokens, True, speculative)
        out = []
        for i in range(int(inp["n"])):
            cfg.rng_seed = generation_seed(int(inp["seed"]), i)
            out.append(self.run(prompt, cfg, speculative))
        return out

    def answer(self, op: str, inp: dict[str, Any]) -> dict[str, Any]:
        if op in ("generate", "generate_plain"):
            return {"samples": self.generations(inp, speculative=op == "generate")}
        if op == "greedy":
            speculative = bool(inp["speculative"])
            cfg = self.config({}, int(inp["max_tokens"]), False, speculative)
            return {"ids": self.run([int(t) for t in inp["prompt_ids"]], cfg, speculative)}
        raise LookupError(op)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openvino_genai_decoder_cmd.py")
    parser.add_argument("--target", type=Path, required=True, help="the target GGUF (F16, BPE tokenizer)")
    parser.add_argument("--mode", choices=("plain", "prompt-lookup", "draft"), default="prompt-lookup")
    parser.add_argument("--draft", type=Path, help="--mode draft: the draft GGUF (same vocabulary)")
    parser.add_argument("--num-assistant", type=int, default=3, help="num_assistant_tokens")
    parser.add_argument("--ngram", type=int, default=3, help="--mode prompt-lookup: max_ngram_size")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "verispec-openvino-models")
    parser.add_argument(
        "--no-prefix-caching", action="store_true", help="SchedulerConfig.enable_prefix_caching=False (default: on)"
    )
    args = parser.parse_args(argv)
    decoder = OpenVinoDecoder(
        args.target, args.mode, args.draft, args.num_assistant, args.ngram, args.cache, not args.no_prefix_caching
    )
    serve(decoder.answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
