"""Hugging Face transformers' speculative paths as engines for ``verispec check-decoder``.

transformers loads the GGUF file itself (``from_pretrained(dir, gguf_file=...)``: gguf-py's
dequantization, float32), so its logits are our reference forward's up to float32 rounding and the
target law can come from our forward on the same file. The paths (:data:`PATHS`), each a
``generate()`` of transformers 5.x:

* ``plain``: no speculation (the control: the same adapter, the same law, nothing speculative);
* ``prompt-lookup``: prompt lookup decoding (``prompt_lookup_num_tokens``; drafts copied from the
  context, verified by sample-and-match);
* ``assisted``: assisted generation with a same-vocabulary assistant model (``assistant_model``;
  sampled, verified by transformers' ``_speculative_sampling``);
* ``early-exit``: LayerSkip-style self-speculation (``assistant_early_exit``: the model's first
  layers draft through its own head; the model needs >= 2 layers);
* ``universal``: universal assisted generation, an assistant with a DIFFERENT tokenizer
  (``tokenizer`` + ``assistant_tokenizer``; sampled, transformers'
  ``UniversalSpeculativeDecodingGenerator`` over the vocabularies' intersection).

Sampling: ``do_sample=True`` with temperature, top_k (0 passed explicitly: transformers disables
top-k only for 0, and an unset top_k becomes the library default 50), top_p, min_p and
repetition_penalty; ``min_tokens`` is ``min_new_tokens``. ``library_defaults`` sends
``do_sample=True`` alone and takes transformers' own defaults (top_k 50, temperature 1), so it
accepts only the params that state those defaults. What transformers computes is ITS law
(temperature before top-k/top-p/min-p, the penalty over the whole sequence): run the gate with
``--law transformers`` (spec/decoder/laws/transformers.py), and ``generate`` receives that profile as
``law=`` and sends its params as they are; under the default (verispec) law the adapter maps
verispec's params, which is transformers' law only where the two coincide
(:func:`laws_coincide`).

Each ``generate`` call seeds torch's global generator from the gate's seed (``torch.manual_seed``)
and draws its ``n`` generations one after another (assisted generation is batch-size 1 only:
``_assisted_decoding`` raises for more). Models are loaded once per process and path
(:func:`load_causal_lm`). ``generate()`` runs under ``torch.inference_mode()``: the same ops and
numbers as ``no_grad`` (the tokens are identical), without autograd's per-op version counting
(about a tenth of a tiny model's CPU time per token). Needs the ``oracle`` extra (torch,
transformers, accelerate).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from verispec.reference.errors import CheckError
from verispec.reference.sampling import SamplingParams

PATHS = ("plain", "prompt-lookup", "assisted", "early-exit", "universal")
DRAFT_TOKENS = 3  # drafts per cycle: prompt_lookup_num_tokens / num_assistant_tokens (constant schedule)
EARLY_EXIT_LAYER = 1  # assistant_early_exit: draft from the first layer's output
LIBRARY_DEFAULTS = SamplingParams(temperature=1.0, top_k=50)  # GenerationConfig._get_default_generation_params


def _quiet_transformers() -> Any:
    import transformers

    logging: Any = transformers.utils.logging  # untyped helpers
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    return transformers


@functools.cache
def load_causal_lm(path: Path) -> Any:
    """transformers' float32 causal LM of the GGUF at ``path`` (eval mode; one per process and path)."""
    import torch

    transformers = _quiet_transformers()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


@functools.cache
def load_tokenizer(path: Path) -> Any:
    """transformers' tokenizer of the GGUF at ``path`` (one per process and path)."""
    transformers = _quiet_transformers()
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def truncated_assistant(target: Any, layers: int) -> Any:
    """A same-vocabulary assistant built from ``target``: its embedding, first ``layers`` decoder
    layers, final norm and head (copies; the target is left as it was)."""
    config = copy.deepcopy(target.config)
    if not 1 <= layers < config.num_hidden_layers:
        raise CheckError(f"assistant layers must be in [1, {config.num_hidden_layers - 1}], got {layers}")
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:layers]
    assistant = type(target)(config).eval()
    state = {
        k: v
        for k, v in target.state_dict().items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers
    }
    missing, unexpected = assistant.load_state_dict(state, strict=False)
    if unexpected or any(not k.endswith("rotary_emb.inv_freq") for k in missing):
        raise CheckError(f"assistant weights do not fit: missing {missing}, unexpected {unexpected}")
    return assistant.to(next(target.parameters()).dtype)


def laws_coincide(params: SamplingParams, context_tokens: int) -> bool:
    """True where transformers' law equals verispec's default law (reference/sampling.py):
    top-k keeps the same set at any temperature, but top-p and min-p act on the TEMPERED law in
    transformers and on the untempered one in verispec, so they coincide at temperature 1 only; the
    repetition penalty spans the whole sequence in transformers and the last ``repeat_last_n`` ids
    in verispec, the same set while prompt + generation (``context_tokens``) fit the window."""
    filters = params.top_p < 1.0 or params.min_p > 0.0
    window = params.repeat_last_n == -1 or context_tokens <= params.repeat_last_n
    penalty_ok = params.repeat_penalty == 1.0 or window
    return (not filters or params.temperature == 1.0) and penalty_ok and not params.logit_bias


def sampling_kwargs(params: SamplingParams, library_defaults: bool = False) -> dict[str, Any]:
    """``generate()`` keywords of a sampled law; a :class:`CheckError` for what transformers cannot
    be asked (a logit bias; temperature 0 is the greedy mode, not a sampled law)."""
    params.validate()
    if params.logit_bias:
        raise CheckError("the transformers adapter maps no logit_bias")
    if params.greedy:
        raise CheckError("temperature 0 is greedy: run check-decoder --greedy")
    if library_defaults:
        if _filters(params) != _filters(LIBRARY_DEFAULTS):
            raise CheckError(
                f"library_defaults samples transformers' defaults (temperature 1, top_k 50, nothing else): "
                f"run the gate with those params, got {_filters(params)}"
            )
        return {"do_sample": True}
    return {
        "do_sample": True,
        "temperature": float(params.temperature),
        "top_k": int(params.top_k),  # explicit 0: an unset top_k would be transformers' default 50
        "top_p": float(params.top_p),
        "min_p": float(params.min_p) if params.min_p > 0 else None,
        "repetition_penalty": float(params.repeat_penalty),
    }


def profile_kwargs(law: Any, library_defaults: bool = False) -> dict[str, Any]:
    """``generate()`` keywords of a ``--law transformers`` profile (spec/decoder/laws/transformers.py):
    its GenerationConfig fields as they are; a :class:`CheckError` for another ecosystem's law."""
    from verispec.spec.decoder.laws.transformers import NAME, Params

    if getattr(law, "name", None) != NAME:
        raise CheckError(f"the transformers adapter samples transformers' law, not --law {getattr(law, 'name', law)!r}")
    p = law.params
    if not p.do_sample:
        raise CheckError("do_sample false is greedy: run check-decoder --greedy")
    if library_defaults:
        if replace(p, min_new_tokens=0, eos_token_id=()) != Params():
            raise CheckError(
                f"library_defaults samples transformers' defaults: give the gate no sampling flag, got {p}"
            )
        return {"do_sample": True}
    return {
        "do_sample": True,
        "temperature": float(p.temperature),
        "top_k": int(p.top_k),
        "top_p": float(p.top_p),
        "min_p": None if p.min_p is None else float(p.min_p),
        "repetition_penalty": float(p.repetition_penalty),
    }


def _filters(params: SamplingParams) -> tuple[float, int, float, float, float]:
    return (params.temperature, params.top_k, params.top_p, params.min_p, params.repeat_penalty)


@dataclass
class Speculation:
    """Which speculative path and its parts (an assistant model, tokenizers)."""

    path: str
    draft_tokens: int = DRAFT_TOKENS
    assistant: Any = None
    tokenizer: Any = None
    assistant_tokenizer: Any = None
    early_exit: int = EARLY_EXIT_LAYER

    def kwargs(self) -> dict[str, Any]:
        """The ``generate()`` keywords that turn this path on (none for ``plain``)."""
        if self.path == "plain":
            return {}
        if self.path == "prompt-lookup":
            return {"prompt_lookup_num_tokens": self.draft_tokens}
        if self.path == "early-exit":
            return {
                "assistant_early_exit": self.early_exit,
                "num_assistant_tokens": self.draft_tokens,
                "num_assistant_tokens_schedule": "constant",
            }
        if self.path == "assisted":
            return {"assistant_model": self.assistant}
        return {
            "assistant_model": self.assistant,
            "tokenizer": self.tokenizer,
            "assistant_tokenizer": self.assistant_tokenizer,
        }


class TransformersPeer:
    """``generate`` (the depth test) and ``greedy`` (greedy mode) over transformers' ``generate()``."""

    def __init__(self, model: Any, speculation: Speculation, library_defaults: bool = False) -> None:
        if speculation.path not in PATHS:
            raise CheckError(f"unknown transformers path {speculation.path!r}; known: {', '.join(PATHS)}")
        if speculation.path in ("assisted", "universal") and speculation.assistant is None:
            raise CheckError(f"the {speculation.path} path needs an assistant model")
        if speculation.path == "universal" and (
            speculation.tokenizer is None or speculation.assistant_tokenizer is None
        ):
            raise CheckError("the universal path needs the target's and the assistant's tokenizers")
        if speculation.assistant is not None:  # drafts per cycle fixed, so cycles do not drift with acceptance
            speculation.assistant.generation_config.num_assistant_tokens = speculation.draft_tokens
            speculation.assistant.generation_config.num_assistant_tokens_schedule = "constant"
        self.model, self.speculation, self.library_defaults = model, speculation, library_defaults

    def _generate(
        self, prompt_ids: Sequence[int], max_new: int, min_new: int, speculative: bool, **sampling: Any
    ) -> list[int]:
        import torch

        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        extra = self.speculation.kwargs() if speculative else {}
        with torch.inference_mode():  # no autograd bookkeeping at all (no_grad still counts versions); same numerics
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new,
                min_new_tokens=min_new or None,
                num_beams=1,
                pad_token_id=self.model.config.eos_token_id,
                **extra,
                **sampling,
            )
        return [int(t) for t in out[0, len(prompt_ids) :].tolist()]

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int = 0,
        law: Any = None,
    ) -> list[list[int]]:
        """``n`` independent sampled generations of up to ``max_tokens`` tokens, speculation on,
        from torch's generator seeded with ``seed``; ``law``: the gate's non-default profile
        (``--law transformers``), whose params are sent instead of ``params``."""
        import torch

        if law is None:
            sampling = sampling_kwargs(params, self.library_defaults)
        else:
            sampling = profile_kwargs(law, self.library_defaults)
            min_tokens = int(law.params.min_new_tokens)
        torch.manual_seed(seed)
        return [self._generate(prompt_ids, max_tokens, min_tokens, True, **sampling) for _ in range(n)]

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        """Greedy tokens, with this path's speculation on or off (plain greedy)."""
        return self._generate(prompt_ids, max_tokens, 0, speculative, do_sample=False)


def engine(
    path: str | Path,
    speculation: str = "prompt-lookup",
    *,
    assistant: str | Path | None = None,
    assistant_layers: int = 1,
    library_defaults: bool = False,
    draft_tokens: int = DRAFT_TOKENS,
) -> TransformersPeer:
    """The engine of one path on the GGUF at ``path``. ``assisted``: the assistant is the GGUF at
    ``assistant`` (same vocabulary) or else the target's first ``assistant_layers`` layers;
    ``universal``: the GGUF at ``assistant`` with its own tokenizer (required)."""
    target_path = Path(path)
    model = load_causal_lm(target_path)
    spec = Speculation(speculation, draft_tokens=draft_tokens)
    if speculation == "assisted":
        spec.assistant = (
            _assistant_model(Path(assistant)) if assistant else truncated_assistant(model, assistant_layers)
        )
    elif speculation == "universal":
        if assistant is None:
            raise CheckError("the universal path needs an assistant GGUF with another tokenizer")
        spec.assistant = _assistant_model(Path(assistant))
        spec.tokenizer, spec.assistant_tokenizer = load_tokenizer(target_path), load_tokenizer(Path(assistant))
    return TransformersPeer(model, spec, library_defaults)


def _assistant_model(path: Path) -> Any:
    """A private copy of the assistant (universal generation prunes the assistant's head in place)."""
    return copy.deepcopy(load_causal_lm(path))


# -- factories for ``check-decoder --engine verispec.peers.transformers_peer:NAME`` ----------------


def plain(path: Path) -> TransformersPeer:
    """No speculation (the control)."""
    return engine(path, "plain")


def prompt_lookup(path: Path) -> TransformersPeer:
    """Prompt lookup decoding, 3 drafts per cycle."""
    return engine(path, "prompt-lookup")


def assisted(path: Path) -> TransformersPeer:
    """Assisted generation, the target's first layer as the assistant, 3 drafts per cycle."""
    return engine(path, "assisted")


def early_exit(path: Path) -> TransformersPeer:
    """Self-speculation exiting after the first layer, 3 drafts per cycle."""
    return engine(path, "early-exit")


def prompt_lookup_defaults(path: Path) -> TransformersPeer:
    """Prompt lookup with transformers' default sampling (``do_sample=True`` alone: top_k 50)."""
    return engine(path, "prompt-lookup", library_defaults=True)


# -----------------------------------------------------------------------------------------------
# continuous batching: the batch op (spec/decoder/depth/batch.py)


CB_SLOTS = 4  # max_requests_per_batch: a call of more requests has the rest join mid-decode
CB_PER_REQUEST = ("temperature", "top_k", "top_p")  # the per-request processors transformers' CB has
CB_PAGE = 32  # tokens a cache page holds


def cb_request_kwargs(request: Any) -> dict[str, Any]:
    """A batch request's per-request processor keywords (``add_request(**logit_processor_kwargs)``):
    its ``--law transformers`` profile's temperature, top_k and top_p; a :class:`CheckError` for
    what continuous batching cannot take per request (greedy, min_p, a repetition penalty,
    min_new_tokens) or another law."""
    from verispec.spec.decoder.laws.transformers import NAME

    law = request.law
    if getattr(law, "name", None) != NAME:
        raise CheckError(
            "the continuous-batching adapter samples transformers' law: run the gate with --law transformers"
        )
    p = law.params
    if not p.do_sample:
        raise CheckError(
            "continuous batching sets do_sample once for all requests: no greedy request in a sampled batch"
        )
    if p.min_p is not None or p.repetition_penalty != 1.0 or p.min_new_tokens or p.min_length:
        raise CheckError("continuous batching takes only temperature, top_k and top_p per request")
    return {"temperature": float(p.temperature), "top_k": int(p.top_k), "top_p": float(p.top_p)}


class ContinuousBatchingPeer:
    """transformers' continuous batching (``ContinuousBatchingManager``, what ``generate_batch`` runs)
    as the batch op: each request added with its own temperature, top_k and top_p
    (``per_request_processors=True``), at most :data:`CB_SLOTS` requests scheduled at once, so the
    rest join mid-decode as others finish. Sampled (``do_sample`` is one setting for the manager:
    no greedy lane, ``batch_greedy = False``). transformers has no per-request seed: the manager's
    one generator is seeded (``ContinuousBatchingConfig.seed``) from the call's request seeds, so a
    call is reproducible; an unseeded request draws from the same generator as the others, as every
    request does. ``generate_batch`` is a thin wrapper of the same manager that takes one set of
    processor keywords for all its inputs; the manager's ``add_request`` is the per-request path."""

    batch_greedy = False

    def __init__(self, model: Any, slots: int = CB_SLOTS) -> None:
        self.model, self.batch_slots = model, slots

    def generate_batch(self, requests: Sequence[Any]) -> list[list[int]]:
        import numpy as np
        import torch

        transformers = _quiet_transformers()
        kwargs = [cb_request_kwargs(r) for r in requests]
        seeds = [r.seed for r in requests if r.seed is not None]
        seed = int(np.random.SeedSequence(seeds or [0]).generate_state(1)[0])
        eos = self.model.config.eos_token_id
        config = transformers.GenerationConfig(  # processors exist only for non-default values: per request after
            do_sample=True,
            temperature=0.5,
            top_k=50,
            top_p=0.5,
            max_new_tokens=max(r.max_tokens for r in requests),
            eos_token_id=eos,
            pad_token_id=eos,
        )
        longest = max(len(r.prompt_ids) + r.max_tokens for r in requests)
        pages = -(-longest // CB_PAGE)  # a cache sized for the slots (the default sizes it from the machine's memory)
        cb = transformers.ContinuousBatchingConfig(
            per_request_processors=True,
            max_requests_per_batch=self.batch_slots,
            seed=seed,
            page_size=CB_PAGE,
            num_blocks=2 * self.batch_slots * pages + 2,
            max_batch_tokens=max(CB_PAGE, longest) * self.batch_slots,
        )
        results: dict[str, Any] = {}
        with (
            older_objects_left_out_of_gc(),
            torch.inference_mode(),
            self.model.continuous_batching_context_manager(
                generation_config=config, continuous_batching_config=cb, warmup=False
            ) as manager,
        ):
            for i, (request, extra) in enumerate(zip(requests, kwargs)):
                manager.add_request(
                    list(request.prompt_ids), request_id=f"r{i}", max_new_tokens=request.max_tokens, **extra
                )
            while len(results) < len(requests):
                result = manager.get_result(timeout=1)
                if result is not None and result.is_finished():
                    if result.error is not None:
                        raise CheckError(f"continuous batching failed request {result.request_id}: {result.error}")
                    results[result.request_id] = result
                elif result is None and not manager.is_running():
                    raise CheckError("the continuous batching manager stopped before every request finished")
        return [[int(t) for t in results[f"r{i}"].generated_tokens] for i in range(len(requests))]


@contextlib.contextmanager
def older_objects_left_out_of_gc() -> Iterator[None]:
    """While open, the objects that existed before it are out of the collector's view (``gc.freeze``).
    The manager runs a full ``gc.collect()`` twice on each stop (to free its cache); under a test
    runner's or a checker's heap that costs more CPU than the batch's decoding. What a call creates
    (the manager, its cache, their cycles) is still collected there; the older objects go back to
    the oldest generation on exit (``gc.unfreeze``), where the next full collection sees them as
    before. Where another owner has frozen objects already (a pre-fork server), nothing is changed:
    an unfreeze here would undo theirs."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def continuous_batching(path: Path) -> ContinuousBatchingPeer:
    """The ``module:FACTORY`` factory of transformers' continuous batching on the GGUF at ``path``."""
    return ContinuousBatchingPeer(load_causal_lm(path))
