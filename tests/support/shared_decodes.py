"""Reference-model runs that more than one test file repeats, computed once per test process.

tests/test_spec_equivalence.py and tests/test_tree_decode.py decode the same golden prompts with
plain greedy (the same request, token count and session model) and build the same exact law of the
first two sampled tokens on the same prompt. Each result is a deterministic function of its inputs
(the model, the tokenizer, the request; the memoized logits are a function of the token prefix), so
running it once and handing both files the same value changes no check: a speculative run is still
compared with the plain run's tokens, and a law test still samples from the memo its exact law was
computed from. The two files are one of tests/conftest.py's ``SHARED_LOAD_GROUPS``, so under the
gate's ``--dist loadgroup`` they run in one worker and share these runs (and the model loads).

Keys hold the model and tokenizer objects themselves (compared by identity): the session fixtures
that the files pass in live for the whole process, and a key that keeps its object alive can never
be confused with a later object that reuses the id.
"""

from __future__ import annotations

from typing import Any

from tests.support.equivalence import MemoLaw
from verispec.reference.generate import GenerationRequest, generate
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.check import MemoTargetModel, ReferenceLogits

GREEDY = SamplingParams(temperature=0.0)


class _Identity:
    """A dictionary key comparing an object by identity (models hold arrays: not hashable by value)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj


_plain: dict[tuple[_Identity, _Identity, tuple[int, ...], int], tuple[int, ...]] = {}
_targets: dict[_Identity, tuple[MemoTargetModel, MemoLaw]] = {}


def plain_greedy(model: Any, tokenizer: Any, prompt: tuple[int, ...], n: int) -> tuple[int, ...]:
    """``generate(model, tokenizer, GenerationRequest(prompt, GREEDY, max_tokens=n)).ids``, once per process."""
    key = (_Identity(model), _Identity(tokenizer), tuple(prompt), n)
    if key not in _plain:
        _plain[key] = tuple(generate(model, tokenizer, GenerationRequest(tuple(prompt), GREEDY, max_tokens=n)).ids)
    return _plain[key]


def memo_target(model: Any) -> tuple[MemoTargetModel, MemoLaw]:
    """One :class:`MemoTargetModel` over the reference logits of ``model`` and one :class:`MemoLaw`,
    per process: the first-two-tokens law tests build the same exact law on the same prompt."""
    key = _Identity(model)
    if key not in _targets:
        _targets[key] = (MemoTargetModel(ReferenceLogits(model)), MemoLaw())
    return _targets[key]
