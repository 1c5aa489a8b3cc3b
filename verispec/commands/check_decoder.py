"""`verispec check-decoder`: the law of a whole speculative decoder's first tokens, on a real GGUF.

    verispec check-decoder (--engine MOD:FACTORY | --engine-cmd CMD | --ours | --mutant NAME)
        [--model NAME|PATH] [--prompt TEXT ... | --bench-prompts] [--depth 64 | --depth 0 --m 3]
        [--law verispec|llama.cpp|transformers|vllm]
        [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--min-tokens N]
        [--repetition-penalty R] [--frequency-penalty F] [--presence-penalty P] [--penalty-last-n N]
        [--draft-temperature T] [--draft-top-k K] [--k 2] [--weights MODE [--draft-kind auto|ngram]]
        [--target-law reference|engine-logits|two-sample] [--tv TV] [--fraction F] [--alpha A]
        [--budget SECONDS] [--workers N] [--greedy --max-tokens N] [--json] [--junit-xml PATH]

``--depth N`` (default 64): the sampled modes test EVERY token of whole generations of up to N
tokens (spec/decoder/depth/law.py: the engine's ``generate``; power 0.99 against TV ``--tv`` (default
0.05) on ``--fraction`` (default 0.1) of positions; ``--budget`` seconds per prompt: without
``--tv`` budget-led, the design is for the smallest TV the budget affords at the pilot's cost per
token (stated up front and in the verdict), with ``--tv`` a stop, exit 3 when it ends short of
that power; the first-m test of the first ``--m`` tokens runs first, on 10% of the alpha, unless
``--no-first-m`` (spec/decoder/depth/first_m.py); progress on stderr: the pilot's cost and the design
with its projected time up front, then a line at most every ``--progress-every`` seconds;
``--workers N``: its generations decoded by N engine processes,
spec/decoder/depth/pool.py, the same verdict with any N). ``--depth 0``: the first-m test of the first ``--m`` tokens
(spec/decoder/first_tokens.py, default TV 0.2). ``--target-law two-sample --depth N``: whole generations
with speculation on against the same engine's plain ones (``generate_plain``), position-binned
law-free features (spec/decoder/depth/two_sample.py: power 0.99 against TV ``--tv`` (default 0.1)
on each feature's law).

``--law`` (default ``verispec``): whose target law each token must follow (spec/decoder/laws/, one chain per
ecosystem: ``llama.cpp`` = llama-cpp-python's sampler chain, ``transformers`` = ``generate``'s
processors, ``vllm`` = vLLM's V1 sampler). A sampling flag left out takes that ecosystem's default
(``verispec``: temperature 1, top-k 4, repeat penalty 1.5); a flag the law does not have is a usage
error naming it. The engine receives a non-default law (``law=`` / the wire's ``"law"`` field).

``--engine MOD:FACTORY``: ``FACTORY(model_path)`` returns an engine with
``sample(prompt_ids, params, m, n, seed) -> [[t1..tm], ...]`` (and ``greedy(prompt_ids,
max_tokens, speculative) -> ids`` for ``--greedy``); ``--engine-cmd``: the JSON-lines ops of
spec/decoder/check.py. ``--ours``: our decode loop (reference.decode; with ``--weights MODE`` the fast
engine's own speculative decoder, judged against the same engine's teacher-forced rows:
verispec/decoder/ours.py, its draft ``--draft-kind``: ``auto``, the default, the token-tree draft
``generate --draft`` runs, or ``ngram``, the n-gram chain); ``--mutant NAME``: a mutant
decoder of spec/decoder/mutants.py. ``--target-law``: ``reference`` (default) builds the target law
from our reference forward on --model (an engine of our numerics); ``engine-logits`` from the
engine's own reported logits (``logits(prefix_ids, split_at)`` / the ``logits`` op) through our
processors; ``two-sample`` tests speculation on against the same engine's ``sample_plain`` (``generate_plain`` at depth)
(speculation off). Greedy mode takes the margin and the batch-shape noise from the engine's own
logits when it reports them, else from our forward (the report says which).
Exit status 0: every prompt passed; 1: a prompt failed (a law off the target, or a greedy
divergence beyond the batch-shape noise); 2: a usage error (a mode the engine does not offer);
3: inconclusive (the depth test's budget ended before its power, nothing failed).
The same run from Python: ``verispec.check_decoder(...)`` (verispec/decoder/api.py), the flags
built into the same objects (verispec/decoder/options.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from verispec.exit_codes import EPILOG

    parser = subparsers.add_parser(
        "check-decoder", help="law test of a whole speculative decoder on a real GGUF", epilog=EPILOG
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--engine", metavar="MOD:FACTORY", help="FACTORY(model_path) -> engine with sample(...)")
    which.add_argument("--engine-cmd", metavar="CMD", help="a program speaking the sample/greedy JSON-lines ops")
    which.add_argument("--ours", action="store_true", help="our own decode loop (reference.decode)")
    which.add_argument("--mutant", metavar="NAME", help="a mutant decoder of spec/decoder/mutants.py")
    parser.add_argument(
        "--weights",
        default=None,
        choices=("auto", "int8", "exact", "f32"),
        help="--ours: the fast engine's own speculative decoder in this mode, judged against its own rows",
    )
    parser.add_argument("--model", default="smollm2-135m", help="registry name or .gguf path (default smollm2-135m)")
    parser.add_argument("--prompt", dest="prompts", nargs="+", default=["The cat sat on the"], metavar="TEXT")
    parser.add_argument(
        "--bench-prompts", action="store_true", help="the five prompts of `verispec bench` instead of --prompt"
    )
    parser.add_argument(
        "--depth", type=int, default=64, help="tokens per generation of the depth test (0: the first-m test)"
    )
    parser.add_argument("--m", type=int, default=3, help="--depth 0: first tokens whose law is tested (1..3)")
    parser.add_argument(
        "--law",
        choices=("verispec", "llama.cpp", "transformers", "vllm"),
        default="verispec",
        help="whose target law: its chain, names and defaults (default verispec)",
    )
    parser.add_argument("--temperature", type=float, default=None, help="(verispec default 1.0)")
    parser.add_argument("--top-k", type=int, default=None, help="(verispec default 4)")
    parser.add_argument("--top-p", type=float, default=None, help="(verispec default 1.0)")
    parser.add_argument("--min-p", type=float, default=None, help="(verispec default 0.0)")
    parser.add_argument("--repeat-penalty", type=float, default=None, help="verispec, llama.cpp (verispec default 1.5)")
    parser.add_argument("--repetition-penalty", type=float, default=None, help="transformers, vllm")
    parser.add_argument("--frequency-penalty", type=float, default=None, help="llama.cpp, vllm")
    parser.add_argument("--presence-penalty", type=float, default=None, help="llama.cpp, vllm")
    parser.add_argument(
        "--penalty-last-n", type=int, default=None, help="verispec, llama.cpp: the penalty window (default 64)"
    )
    parser.add_argument(
        "--min-tokens",
        type=int,
        default=None,
        help="verispec, transformers, vllm: end-of-generation banned before this many tokens",
    )
    parser.add_argument("--draft-temperature", type=float, default=2.0, help="--ours/--mutant: the draft's law")
    parser.add_argument("--draft-top-k", type=int, default=4, help="--ours/--mutant: the draft's law")
    parser.add_argument("--k", type=int, default=2, help="--ours/--mutant: drafts per cycle")
    parser.add_argument(
        "--draft-kind",
        choices=("auto", "ngram"),
        default=None,
        help="--ours --weights: the engine decoder's draft, auto (default: the token trees `generate --draft` runs) "
        "or ngram (the n-gram chain)",
    )
    parser.add_argument(
        "--target-law",
        choices=("reference", "engine-logits", "two-sample"),
        default="reference",
        help="where the law comes from: our forward (default), the engine's own logits, or its plain decoding",
    )
    parser.add_argument(
        "--tv",
        type=float,
        default=None,
        help="deviation detected with power 0.99 (default: 0.05 at depth, 0.1 two-sample at depth, 0.2 first-m)",
    )
    parser.add_argument(
        "--fraction", type=float, default=0.1, help="--depth: share of positions the deviation hits (default 0.1)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="--depth: seconds per prompt; without --tv budget-led (the smallest TV it affords), with --tv a stop (exit 3 if short of power)",
    )
    parser.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a progress line on stderr at most every SECONDS (default 30; 0: no progress lines)",
    )
    parser.add_argument(
        "--no-first-m",
        dest="first_m",
        action="store_false",
        help="--depth: skip the first-m test the default mode runs first (on 10%% of the alpha)",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="--depth: the batch form (generate_batch: requests of other params and seeds in one call, each "
        "judged against its own law, plus cross-request independence)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="--depth: decode the generations in N engine processes (same verdict for any N)",
    )
    parser.add_argument("--alpha", type=float, default=None, help="false-alarm probability of the run (default 1e-3)")
    parser.add_argument("--min-mass", type=float, default=0.01, help="sequences at least this likely are cells")
    parser.add_argument("--greedy", action="store_true", help="greedy mode: speculative == plain greedy, or a near-tie")
    parser.add_argument("--max-tokens", type=int, default=16, help="--greedy: tokens compared")
    parser.add_argument("--timeout", type=float, default=600.0, help="--engine-cmd: seconds per response")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--junit-xml", type=Path, metavar="PATH", help="also write the report as JUnit XML (one testcase per prompt)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from verispec.commands import import_from_current_folder
    from verispec.decoder import api
    from verispec.decoder.options import DECODER_KEYWORDS, decoder_options
    from verispec.junit import check_junit_target, write_decoder_junit, write_side_output
    from verispec.options import flag_values
    from verispec.progress import to_stderr

    if args.junit_xml is not None:
        check_junit_target(args.junit_xml)
    import_from_current_folder()
    options = decoder_options(  # verispec/decoder/options.py: the flags' checks, one builder for CLI and API
        **flag_values(args, DECODER_KEYWORDS),
        log=None if args.json else (lambda result: print(result.line(), flush=True)),  # each prompt as it is decided
        progress=to_stderr if args.progress_every > 0 else None,  # terminals and CI logs alike
    )
    report = api.run(options)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(report.verdict())
    sys.stdout.flush()
    if args.junit_xml is not None:  # a side output, after the report: its failure is one stderr line
        junit_xml = args.junit_xml
        write_side_output(f"the JUnit XML {junit_xml}", lambda: write_decoder_junit(junit_xml, report))
    return report.exit_status
