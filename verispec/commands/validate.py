"""Every command-line argument checked before any model is loaded.

A command calls its ``check_*`` first thing in ``run``: a bad flag is a one-line typed error
(exit status 2) in milliseconds, not after the 8-11 s it takes to dequantize a model. The checks
read at most the GGUF header and metadata (memory-mapped; no tensor is decoded), for the bounds
that depend on the model: the context length and the layer count.

Bounds set here, beyond what the library itself refuses (and why):

* ``--temperature`` in [0, ``MAX_TEMPERATURE`` = 100]. Logits are divided by T: at T = 100 a gap
  of 20 nats between two candidates (wider than the top of a real model's distribution) shrinks to
  0.2, i.e. the law is within a factor e^0.2 of uniform over the candidates top-k/top-p/min-p
  keep; a larger T changes nothing but the rounding, and 1e308 is a typo, not a setting.
* ``--k`` in [1, ``MAX_K`` = 64]. With per-draft acceptance alpha, a cycle yields
  (1 - alpha^(k+1)) / (1 - alpha) tokens on average; drafts past k = 64 add at most
  alpha^65 / (1 - alpha): 0.01 tokens a cycle at alpha = 0.9. A verification pass costs more with
  every row (k + 1 rows; --k 10000 measured 0.33x plain decoding).
* ``--max-tokens`` in [0, context length - 1]: the prompt needs at least one position.
* ``--seed`` >= 0 (numpy's generators take no negative seed).

The sampling ranges themselves (top-p in (0, 1], ...) are :meth:`SamplingParams.validate`'s; the
draft options are :mod:`reference.drafts`'s; this module runs them early and adds the bounds above.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from verispec.reference.config import Config
from verispec.reference.drafts import check_exit_layer, check_options, parse_draft_spec
from verispec.reference.errors import ContextOverflow, DraftError, SamplingError
from verispec.reference.errors import UsageError as UsageError
from verispec.reference.gguf import GGUFFile
from verispec.reference.sampling import SamplingParams
from verispec.registry import resolve_model

MAX_TEMPERATURE = 100.0
MAX_K = 64


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    """The sampling flags of ``generate`` as parameters (not yet validated)."""
    return SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
    )


def check_generate(args: argparse.Namespace) -> None:
    """``verispec generate`` (plain, ``--draft`` and ``--early-exit``): every flag, before loading."""
    params = sampling_params(args)
    params.validate()
    if args.temperature > MAX_TEMPERATURE:
        raise SamplingError(f"temperature must be <= {MAX_TEMPERATURE:g}, got {args.temperature!r}")
    check_seed(args.seed)
    if args.max_tokens < 0:
        raise SamplingError(f"--max-tokens must be >= 0, got {args.max_tokens}")
    for stop in args.stop:
        if not stop:
            raise UsageError("--stop needs a non-empty string")
    early_exit = getattr(args, "early_exit", None)
    draft = getattr(args, "draft", None)
    if getattr(args, "audit", False) and early_exit is None:
        raise UsageError("--audit goes with --early-exit")
    if early_exit is not None and draft is not None:
        raise UsageError("--early-exit and --draft are two decoding modes: give one")
    if early_exit is not None:
        _check_greedy(args)
    spec = None
    if draft is not None:
        spec = parse_draft_spec(draft)
        check_options(args.k, args.p_min)
        if args.k > MAX_K:
            raise DraftError(f"k must be <= {MAX_K} (drafts past 64 add under 1% of a cycle's tokens), got {args.k}")
        if spec.kind == "model" and not Path(spec.path).is_file():
            raise DraftError(f"draft model {spec.path!r} is not a file")
    config = model_config(args.model)
    if args.max_tokens >= config.context_length:
        raise ContextOverflow(
            f"--max-tokens {args.max_tokens} leaves no room for the prompt in the context length "
            f"{config.context_length}"
        )
    if spec is not None and spec.kind == "layerskip":
        check_exit_layer(spec.layer, config.n_layer)


def check_logits(args: argparse.Namespace) -> None:
    """``verispec logits``: the output's folder exists and the model's metadata reads."""
    check_output_file(args.out)
    model_config(args.model)


def check_vectors(args: argparse.Namespace) -> None:
    """``verispec vectors``: count and seed in range, the output folder writable (before building)."""
    from verispec.atomic import check_target

    if args.count < 0:
        raise UsageError(f"--count must be >= 0, got {args.count}")
    check_seed(args.seed)
    check_target(args.out, force=args.force)


def check_seed(seed: int | None) -> None:
    if seed is not None and seed < 0:
        raise UsageError(f"--seed must be >= 0, got {seed}")


def check_output_file(path: str | Path) -> None:
    """OutputError (a usage error) unless ``path`` can be written by :func:`verispec.atomic.replace_file`:
    absent or a regular file (never a FIFO, device or unasked-for symlink), in a writable folder."""
    from verispec.atomic import output_file

    output_file(Path(path))


def model_config(name_or_path: str) -> Config:
    """The model's :class:`Config` from its metadata alone (RegistryError, GGUFError, ModelError)."""
    with GGUFFile.open(resolve_model(name_or_path)) as f:
        return Config.from_gguf(f)


def _check_greedy(args: argparse.Namespace) -> None:
    # early exit certifies greedy decoding only (reference/early_exit.py refuses the rest, after
    # the load); the calibration artifact itself is read before the load by the early-exit command
    if args.temperature != 0 or args.repeat_penalty != 1.0:
        raise SamplingError(
            f"--early-exit serves greedy decoding only: --temperature must be 0 (got {args.temperature!r}) "
            f"and --repeat-penalty 1 (got {args.repeat_penalty!r})"
        )
