"""`verispec check-decoder`: the law of a whole speculative decoder's first tokens, on a real GGUF.

    verispec check-decoder (--engine MOD:FACTORY | --engine-cmd CMD | --ours | --mutant NAME)
        [--model NAME|PATH] [--prompt TEXT ... | --bench-prompts] [--depth 64 | --depth 0 --m 3]
        [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--min-tokens N]
        [--draft-temperature T] [--draft-top-k K] [--k 2]
        [--target-law reference|engine-logits|two-sample] [--tv TV] [--fraction F] [--alpha A]
        [--budget SECONDS] [--greedy --max-tokens N] [--json]

``--depth N`` (default 64): the sampled modes test EVERY token of whole generations of up to N
tokens (spec/decoder_depth.py: the engine's ``generate``; power 0.99 against TV ``--tv`` (default
0.05) on ``--fraction`` (default 0.1) of positions; ``--budget`` seconds per prompt, exit 3 when
it ends short of that power). ``--depth 0``: the first-m test of the first ``--m`` tokens
(spec/decoder_law.py, default TV 0.2); two-sample mode is always first-m.

``--engine MOD:FACTORY``: ``FACTORY(model_path)`` returns an engine with
``sample(prompt_ids, params, m, n, seed) -> [[t1..tm], ...]`` (and ``greedy(prompt_ids,
max_tokens, speculative) -> ids`` for ``--greedy``); ``--engine-cmd``: the JSON-lines ops of
spec/decoder_check.py. ``--ours``: our decode loop (reference.decode); ``--mutant NAME``: a mutant
decoder of spec/decoder_mutants.py. ``--target-law``: ``reference`` (default) builds the target law
from our reference forward on --model (an engine of our numerics); ``engine-logits`` from the
engine's own reported logits (``logits(prefix_ids, split_at)`` / the ``logits`` op) through our
processors; ``two-sample`` tests speculation on against the same engine's ``sample_plain``
(speculation off). Greedy mode takes the margin and the batch-shape noise from the engine's own
logits when it reports them, else from our forward (the report says which).
Exit status 0: every prompt passed; 1: a prompt failed (a law off the target, or a greedy
divergence beyond the batch-shape noise); 2: a usage error (a mode the engine does not offer);
3: inconclusive (the depth test's budget ended before its power, nothing failed).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("check-decoder", help="law test of a whole speculative decoder on a real GGUF")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--engine", metavar="MOD:FACTORY", help="FACTORY(model_path) -> engine with sample(...)")
    which.add_argument("--engine-cmd", metavar="CMD", help="a program speaking the sample/greedy JSON-lines ops")
    which.add_argument("--ours", action="store_true", help="our own decode loop (reference.decode)")
    which.add_argument("--mutant", metavar="NAME", help="a mutant decoder of spec/decoder_mutants.py")
    parser.add_argument("--model", default="smollm2-135m", help="registry name or .gguf path (default smollm2-135m)")
    parser.add_argument("--prompt", nargs="+", default=["The cat sat on the"], metavar="TEXT")
    parser.add_argument("--bench-prompts", action="store_true", help="the five prompts of `verispec bench` instead of --prompt")
    parser.add_argument("--depth", type=int, default=64, help="tokens per generation of the depth test (0: the first-m test)")
    parser.add_argument("--m", type=int, default=3, help="--depth 0: first tokens whose law is tested (1..3)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--min-p", type=float, default=0.0)
    parser.add_argument("--repeat-penalty", type=float, default=1.5)
    parser.add_argument("--min-tokens", type=int, default=0, help="--depth: end-of-generation banned before this many tokens")
    parser.add_argument("--draft-temperature", type=float, default=2.0, help="--ours/--mutant: the draft's law")
    parser.add_argument("--draft-top-k", type=int, default=4, help="--ours/--mutant: the draft's law")
    parser.add_argument("--k", type=int, default=2, help="--ours/--mutant: drafts per cycle")
    parser.add_argument(
        "--target-law",
        choices=("reference", "engine-logits", "two-sample"),
        default="reference",
        help="where the law comes from: our forward (default), the engine's own logits, or its plain decoding",
    )
    parser.add_argument("--tv", type=float, default=None, help="deviation detected with power 0.99 (default: 0.05 at depth, 0.2 first-m)")
    parser.add_argument("--fraction", type=float, default=0.1, help="--depth: share of positions the deviation hits (default 0.1)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS", help="--depth: seconds per prompt (exit 3 if short of power)")
    parser.add_argument("--alpha", type=float, default=None, help="false-alarm probability of the run (default 1e-3)")
    parser.add_argument("--min-mass", type=float, default=0.01, help="sequences at least this likely are cells")
    parser.add_argument("--greedy", action="store_true", help="greedy mode: speculative == plain greedy, or a near-tie")
    parser.add_argument("--max-tokens", type=int, default=16, help="--greedy: tokens compared")
    parser.add_argument("--timeout", type=float, default=600.0, help="--engine-cmd: seconds per response")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


class FreshMemos:
    """A mutant decoder whose whole generations (``generate``) run on fresh memos per call: at depth
    every prefix is new, and a memo of real-vocabulary rows would only grow (GBs over a run)."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        from dataclasses import replace

        from verispec.spec.decoder_check import ReferenceLogits
        from verispec.spec.decoder_law import CachedLaw

        fresh = replace(self.decoder, logits_of=ReferenceLogits(self.decoder.logits_of.model), law=CachedLaw())
        return fresh.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # sample, sample_plain, logits, greedy: the decoder's own
        return getattr(self.decoder, name)


def _engine(args: argparse.Namespace, path: Any, logits: Any, tokenizer: Any) -> Any:
    from verispec.reference.sampling import SamplingParams
    from verispec.spec.check import CheckError, load_callable
    from verispec.spec.decoder_check import CommandEngine, ReferenceDecoder
    from verispec.spec.decoder_mutants import DEPTH_MUTANTS, MUTANT_BUGS, LoopDecoder

    draft = SamplingParams(temperature=args.draft_temperature, top_k=args.draft_top_k)
    if args.ours:
        return ReferenceDecoder(logits, tokenizer, draft, args.k)
    if args.mutant:
        known = {**MUTANT_BUGS, **DEPTH_MUTANTS}
        if args.mutant not in known:
            raise CheckError(f"unknown mutant decoder {args.mutant!r}; known: {', '.join(known)}")

        def positioned(ids: Any, positions: Any) -> Any:
            model = logits.model
            return model.forward(list(ids), model.new_cache(len(ids)), positions=list(positions)).logits[-1]

        return FreshMemos(LoopDecoder(logits, draft, args.k, known[args.mutant][1], eog=frozenset(tokenizer.eog_ids), positioned=positioned))
    if args.engine_cmd:
        return CommandEngine(args.engine_cmd, args.timeout)
    return load_callable(args.engine)(path)


def run(args: argparse.Namespace) -> int:
    from verispec.reference.model import Model
    from verispec.reference.sampling import SamplingParams
    from verispec.reference.tokenizer import Tokenizer
    from verispec.spec.check import CheckError
    from verispec.spec.decoder_check import EngineLogits, LawCase, ReferenceLogits, check_greedy, check_law, law_json, reports_logits
    from verispec.spec.decoder_law import MAX_M
    from verispec.spec.decoder_two_sample import check_two_sample
    from verispec.registry import resolve_model

    if not 1 <= args.m <= MAX_M:
        raise CheckError(f"--m must be in [1, {MAX_M}], got {args.m}")
    if args.depth < 0 or args.min_tokens < 0:
        raise CheckError("--depth and --min-tokens must be >= 0")
    if args.tv is None:
        args.tv = 0.05 if args.depth else 0.2
    if not 0 < args.tv <= 1:
        raise CheckError(f"--tv must be in (0, 1], got {args.tv}")
    if not 0 < args.fraction <= 1:
        raise CheckError(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.budget is not None and not args.budget > 0:
        raise CheckError(f"--budget must be > 0 seconds, got {args.budget}")
    if args.ours and args.min_tokens:
        raise CheckError("--ours: our decode loop has no min_tokens")
    if args.alpha is not None and not 0 < args.alpha < 1:
        raise CheckError(f"--alpha must be in (0, 1), got {args.alpha}")
    if args.k < 1 or args.max_tokens < 1:
        raise CheckError("--k and --max-tokens must be >= 1")
    params = SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, repeat_penalty=args.repeat_penalty
    )
    params.validate()
    path = resolve_model(args.model)
    model, tokenizer = Model.load(path), Tokenizer.from_file(path)
    logits = ReferenceLogits(model)
    engine = _engine(args, path, logits, tokenizer)
    if args.bench_prompts:
        from verispec.engine.bench import PROMPTS

        args.prompt = [text for _, text in PROMPTS]
    alpha = (args.alpha if args.alpha is not None else 1e-3) / len(args.prompt)  # Bonferroni over prompts
    eog = frozenset(tokenizer.eog_ids)
    results: list[dict[str, Any]] = []
    try:
        own = reports_logits(engine)
        if args.target_law == "engine-logits" and not own:
            raise CheckError("--target-law engine-logits needs an engine that reports its logits (logits / the logits op)")
        if args.target_law == "two-sample" and not args.greedy and not callable(getattr(engine, "sample_plain", None)):
            raise CheckError("--target-law two-sample needs an engine with sample_plain (the sample_plain op)")
        target = EngineLogits(engine) if own and (args.greedy or args.target_law == "engine-logits") else logits
        for text in args.prompt:
            prompt = tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True))  # as the bench
            if args.greedy:
                g = check_greedy(engine, target, prompt, args.max_tokens, eog)
                results.append({"prompt": text, "mode": "greedy", "passed": g.passed, "detail": g.detail(),
                                "margin": g.margin, "noise": g.noise, "noise_source": g.noise_source,
                                "divergence": g.divergence})
            elif args.depth and args.target_law != "two-sample":
                results.append(_depth(args, engine, model, target, prompt, params, eog, alpha, text))
            elif args.target_law == "two-sample":
                v = check_two_sample(engine, prompt, params, args.m, alpha=alpha, tv=args.tv, eog=eog, min_mass=args.min_mass)
                results.append({"prompt": text, "mode": "two-sample", **law_json(v)})
            else:
                case = LawCase(prompt, params, args.m, args.min_mass, eog)
                v = check_law(engine, target, case, alpha=alpha, tv=args.tv)
                results.append({"prompt": text, "mode": f"law ({target.source})", **law_json(v)})
    finally:
        close = getattr(engine, "close", None)
        if callable(close):
            close()
    passed = all(r["passed"] for r in results)
    status = 1 if not all(r["passed"] or r.get("state") == "inconclusive" for r in results) else 0 if passed else 3
    if args.json:
        print(json.dumps({"passed": passed, "model": str(path), "results": results}, indent=2))
    else:
        for r in results:
            print(f"{'PASS' if r['passed'] else 'INCONCLUSIVE' if r.get('state') == 'inconclusive' else 'FAIL'}  {r['prompt']!r}: {r['detail']}"
                  + (f"  N={r['n']}{'/arm' if r['mode'] == 'two-sample' else ''} alpha={r['alpha']:.2g} power={r['power']:.4f} vs TV>={r['tv']}"
                     if r["mode"] not in ("greedy", "depth") else ""))
        print({0: "PASSED", 1: "FAILED", 3: "INCONCLUSIVE"}[status])
    sys.stdout.flush()
    return status


def _depth(args: argparse.Namespace, engine: Any, model: Any, target: Any, prompt: tuple[int, ...], params: Any,
           eog: frozenset[int], alpha: float, text: str) -> dict[str, Any]:
    """The depth test of one prompt (spec/decoder_depth.py) as a result row."""
    from verispec.spec.check import CheckError
    from verispec.spec.decoder_check import EngineLogits
    from verispec.spec.decoder_depth import DepthCase, check_depth, per_prefix_rows, reference_rows, verdict_json

    if not callable(getattr(engine, "generate", None)):
        raise CheckError("--depth needs an engine with generate (the generate op); --depth 0 runs the first-m test")
    rows = per_prefix_rows(target.fresh) if isinstance(target, EngineLogits) else reference_rows(model)
    case = DepthCase(prompt, params, args.depth, eog, args.min_tokens)
    verdict = check_depth(engine, rows, case, alpha=alpha, tv=args.tv, fraction=args.fraction, budget_s=args.budget)
    row = verdict_json(verdict)
    label = {"passed": "PASS", "failed": "FAIL", "inconclusive": "INCONCLUSIVE"}[verdict.state]
    row["detail"] = (f"[{label}] {verdict.where + '; ' if verdict.where else ''}{verdict.detail}; design {verdict.design.tokens} tokens "
                     f"for power 0.99 vs TV {verdict.design.tv} on {verdict.design.fraction:.0%} of positions, alpha={alpha:.2g}, power reached {verdict.power:.4f}")
    return {"prompt": text, "mode": "depth", **row}
