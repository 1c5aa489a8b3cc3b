"""Each ecosystem's target law as a profile: ``verispec`` (the default), ``llama.cpp``,
``transformers``, ``vllm``.

One module per ecosystem (:mod:`.default`, :mod:`.llamacpp`, :mod:`.transformers`, :mod:`.vllm`),
each ONE function ``law(logits[V], prompt_ids, output_ids, params) -> probs[V]`` with a typed
``Params`` of that ecosystem's names and defaults; its docstring is the spec of its chain.
:func:`build` makes a :class:`~spec.decoder.laws.common.Profile` from check-decoder's flags, and refuses a
flag the chosen profile does not have (a :class:`SamplingError`, exit category usage, naming it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import ModuleType
from typing import Any

from verispec.reference.errors import SamplingError
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.laws import default, llamacpp, transformers, vllm
from verispec.spec.decoder.laws.common import Profile

MODULES: dict[str, ModuleType] = {m.NAME: m for m in (default, llamacpp, transformers, vllm)}
NAMES: tuple[str, ...] = tuple(MODULES)
DEFAULT = default.NAME

# check-decoder's sampling flags (their Python-API keyword names) each profile has
FLAGS: dict[str, frozenset[str]] = {
    "verispec": frozenset({"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "penalty_last_n", "min_tokens"}),
    "llama.cpp": frozenset(
        {
            "temperature",
            "top_k",
            "top_p",
            "min_p",
            "repeat_penalty",
            "frequency_penalty",
            "presence_penalty",
            "penalty_last_n",
        }
    ),
    "transformers": frozenset({"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "min_tokens"}),
    "vllm": frozenset(
        {
            "temperature",
            "top_k",
            "top_p",
            "min_p",
            "repetition_penalty",
            "frequency_penalty",
            "presence_penalty",
            "min_tokens",
        }
    ),
}
ALL_FLAGS: frozenset[str] = frozenset().union(*FLAGS.values())
# check-decoder's own defaults for the verispec profile (unchanged by the profiles)
VERISPEC_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_k": 4,
    "top_p": 1.0,
    "min_p": 0.0,
    "repeat_penalty": 1.5,
    "penalty_last_n": 64,
    "min_tokens": 0,
}


def flag_name(keyword: str) -> str:
    """``repeat_penalty`` -> ``--repeat-penalty``."""
    return "--" + keyword.replace("_", "-")


def build(name: str, flags: Mapping[str, Any], eog: Collection[int] = ()) -> Profile:
    """The profile ``name`` with check-decoder's sampling ``flags`` (keyword -> value; None = unset,
    the ecosystem's default) and the model's end-of-generation ids ``eog``."""
    if name not in MODULES:
        raise SamplingError(f"unknown law {name!r}; known: {', '.join(NAMES)}")
    given = {k: v for k, v in flags.items() if v is not None}
    unknown = sorted(set(given) - ALL_FLAGS)
    if unknown:
        raise SamplingError(f"unknown sampling flag {flag_name(unknown[0])}")
    foreign = sorted(set(given) - FLAGS[name])
    if foreign:
        raise SamplingError(
            f"{flag_name(foreign[0])} is not a parameter of --law {name} "
            f"(it has {', '.join(flag_name(f) for f in sorted(FLAGS[name]))})"
        )
    ends = tuple(sorted(int(e) for e in eog))
    module: Any = MODULES[name]
    if name == "verispec":
        v = {**VERISPEC_DEFAULTS, **given}
        sampling = SamplingParams(
            temperature=v["temperature"],
            top_k=v["top_k"],
            top_p=v["top_p"],
            min_p=v["min_p"],
            repeat_penalty=v["repeat_penalty"],
            repeat_last_n=v["penalty_last_n"],
        )
        params: Any = default.Params(sampling, frozenset(ends), v["min_tokens"])
    elif name == "llama.cpp":
        renamed = {("temp" if k == "temperature" else k): val for k, val in given.items()}
        params = llamacpp.Params(**renamed)
    elif name == "transformers":
        renamed = {("min_new_tokens" if k == "min_tokens" else k): val for k, val in given.items()}
        params = transformers.Params(**renamed, eos_token_id=ends)
    else:
        params = vllm.Params(**given, stop_token_ids=ends)
    profile: Profile = module.profile(params)
    return profile


def min_tokens_of(profile: Profile) -> int:
    """The output tokens that must come before an end-of-generation id under ``profile``."""
    params = profile.params
    return int(getattr(params, "min_tokens", getattr(params, "min_new_tokens", 0)))


def from_json(obj: Mapping[str, Any]) -> Profile:
    """Inverse of :meth:`Profile.to_json` (the wire form an engine receives)."""
    from verispec.spec.decoder.laws.common import bias_from_json

    name = str(obj.get("name", ""))
    if name not in MODULES:
        raise SamplingError(f"unknown law {name!r}; known: {', '.join(NAMES)}")
    raw = dict(obj.get("params") or {})
    if "logit_bias" in raw:
        raw["logit_bias"] = bias_from_json(raw["logit_bias"]) or None
    if name == "verispec":
        sampling = SamplingParams(
            **{
                k: raw[k]
                for k in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "logit_bias")
            }
        )
        params: Any = default.Params(sampling, frozenset(int(e) for e in raw["eog"]), int(raw["min_tokens"]))
    elif name == "transformers":
        params = transformers.Params(**{**raw, "eos_token_id": tuple(raw.get("eos_token_id", ()))})
    elif name == "vllm":
        params = vllm.Params(**{**raw, "stop_token_ids": tuple(raw.get("stop_token_ids", ()))})
    else:
        params = llamacpp.Params(**raw)
    result: Profile = MODULES[name].profile(params)
    return result


__all__ = ["ALL_FLAGS", "DEFAULT", "FLAGS", "NAMES", "Profile", "build", "flag_name", "from_json", "min_tokens_of"]
