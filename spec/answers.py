"""Answers from a program under test, validated before anything counts them.

Whatever a peer (``--verifier-cmd``, ``--engine-cmd``) or a Python engine answers is untrusted:
a negative token id indexes a NumPy array from its end, ``5.0`` or ``"5"`` converts silently, a
missing field reads as an empty list, a logits row one entry short still makes a law. Each of
those would be counted as if it were an answer and could PASS a broken engine. So every value is
checked here, item by item, against what was asked:

- a token id is a Python ``int`` (not a ``bool``, a float, a string or None) in [0, V);
- an accepted count is an ``int`` in [0, k]; a kind is ``"repair"`` or ``"bonus"``;
- a batch answer has exactly N items in each column, and EVERY item is checked (not the first);
- samples are n lists of 1..m ids; a greedy output has its ``ids``, max_tokens of them or fewer
  ending at an end-of-generation id;
- a logits row has exactly V finite numbers.

A violation raises :class:`~spec.external.ExternalError` naming the item ("token -3 at sample 12,
position 4"); callers turn it into a FAILED property, never a pass. Untrusted values are quoted
through :func:`shown`, which truncates them, so a 100 MB id cannot flood a message.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import ExternalError as ExternalError
from verispec.reference.json_input import shown as shown  # one cut for untrusted values in messages


def is_integer(value: Any) -> bool:
    """A Python int or a NumPy integer (what a Python engine returns); never a bool, a float
    like 5.0, a string like "5" or None, even where they would convert."""
    return (type(value) is int) or (isinstance(value, np.integer) and not isinstance(value, np.bool_))


def token_id(value: Any, vocab: int, where: str) -> int:
    """``value`` as a token id in [0, vocab); ExternalError naming ``where`` otherwise."""
    if not is_integer(value):
        raise ExternalError(f"{where}: a token id must be an integer, got {shown(value)}")
    if not 0 <= value < vocab:
        raise ExternalError(f"{where}: token {shown(value)} is outside [0, {vocab})")
    return int(value)


def bounded_int(value: Any, low: int, high: int, where: str) -> int:
    """``value`` as an int in [low, high] (an accepted count: [0, k])."""
    if not is_integer(value):
        raise ExternalError(f"{where} must be an integer, got {shown(value)}")
    if not low <= value <= high:
        raise ExternalError(f"{where} is {shown(value)}, outside [{low}, {high}]")
    return int(value)


def kind(value: Any, where: str) -> Literal["repair", "bonus"]:
    if value == "repair":
        return "repair"
    if value == "bonus":
        return "bonus"
    raise ExternalError(f'{where} must be "repair" or "bonus", got {shown(value)}')


def verdict_fields(
    output: Mapping[str, Any], k: int | None, vocab: int | None, where: str
) -> tuple[int, int, Literal["repair", "bonus"]]:
    """(accepted, token, kind) of one verdict; accepted in [0, k] and token in [0, V) when the
    request's shape is known (None: only the types are checked)."""
    for name in ("accepted", "token", "kind"):
        if name not in output:
            raise ExternalError(f"{where} lacks field {name!r}")
    accepted = output["accepted"]
    if k is not None:
        accepted = bounded_int(accepted, 0, k, f"{where}.accepted")
    elif not is_integer(accepted):
        raise ExternalError(f"{where}.accepted must be an integer, got {shown(accepted)}")
    token = output["token"]
    if vocab is not None:
        token = token_id(token, vocab, f"{where}.token")
    elif not is_integer(token):
        raise ExternalError(f"{where}.token must be an integer, got {shown(token)}")
    return int(accepted), int(token), kind(output["kind"], f"{where}.kind")


def _column(output: Mapping[str, Any], name: str, n: int, op: str) -> list[Any]:
    value = output.get(name)
    if not isinstance(value, list) or len(value) != n:
        got = f"{len(value)} items" if isinstance(value, list) else shown(value)
        raise ExternalError(f"{op} output.{name} must be a list of {n} items, got {got}")
    return value


def batch_columns(
    output: Mapping[str, Any], n: int, k: int, vocab: int, op: str = "sampled_batch"
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """(accepted [n], token [n], is_bonus [n]) of a batch answer, every item checked:
    accepted in [0, k], token in [0, V), kind "repair" or "bonus"."""
    accepted, tokens, kinds = (_column(output, name, n, op) for name in ("accepted", "token", "kind"))
    for i in range(n):  # one pass, item by item: the first bad item is named
        bounded_int(accepted[i], 0, k, f"{op} output.accepted[{i}]")
        token_id(tokens[i], vocab, f"{op} output.token[{i}]")
        if kinds[i] != "repair" and kinds[i] != "bonus":
            raise ExternalError(f'{op} output.kind[{i}] must be "repair" or "bonus", got {shown(kinds[i])}')
    bonus = np.fromiter((k_ == "bonus" for k_ in kinds), dtype=np.bool_, count=n)
    return np.asarray(accepted, dtype=np.int64), np.asarray(tokens, dtype=np.int64), bonus


def samples(value: Any, n: int, m: int, vocab: int, who: str = "the engine") -> list[list[int]]:
    """n samples of 1..m token ids each (fewer than m only where the engine stopped early)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or len(value) != n:
        got = f"{len(value)} samples" if isinstance(value, list) else shown(value)
        raise ExternalError(f"{who} answered {got}, asked for {n} samples of {m} tokens")
    out: list[list[int]] = []
    for i, sample in enumerate(value):
        if not isinstance(sample, (list, tuple)) or not 1 <= len(sample) <= m:
            got = f"{len(sample)} tokens" if isinstance(sample, (list, tuple)) else shown(sample)
            raise ExternalError(f"{who} answered {got} at sample {i}, asked for 1..{m} tokens")
        out.append([_answered_token(t, vocab, who, f"at sample {i}, position {j}") for j, t in enumerate(sample)])
    return out


def _answered_token(value: Any, vocab: int, who: str, where: str) -> int:
    if not is_integer(value):
        raise ExternalError(f"{who} answered {shown(value)} {where}: a token id must be an integer")
    if not 0 <= value < vocab:
        raise ExternalError(f"{who} answered token {shown(value)} {where}, outside [0, {vocab})")
    return int(value)


def greedy_ids(
    value: Any, max_tokens: int, vocab: int, eog: Collection[int] | None, who: str = "the engine"
) -> list[int]:
    """A greedy output: max_tokens ids in [0, V), or fewer ending at an end-of-generation id
    (``eog`` None: the ids are not known, so any 1..max_tokens ids)."""
    if not isinstance(value, (list, tuple)):
        raise ExternalError(f"{who}'s greedy answer has no list of ids, got {shown(value)}")
    ids = [_answered_token(t, vocab, who, f"at position {j} of its greedy output") for j, t in enumerate(value)]
    if len(ids) > max_tokens:
        raise ExternalError(f"{who} answered {len(ids)} greedy tokens, asked for {max_tokens}")
    if not ids or (eog is not None and len(ids) < max_tokens and ids[-1] not in eog):
        raise ExternalError(
            f"{who} answered {len(ids)} greedy tokens, asked for {max_tokens} (fewer only when ending at an end-of-generation id)"
        )
    return ids


def logits_row(value: Any, vocab: int | None, what: str) -> npt.NDArray[np.float64]:
    """A logits row: a list of exactly V finite numbers (any V >= 2 when vocab is None)."""
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise ExternalError(f"{what} must be a list of numbers, got {shown(value)}")
    for i, x in enumerate(value):
        if isinstance(x, str) and x in ("NaN", "Infinity", "-Infinity"):  # the wire's non-finite markers
            raise ExternalError(f"{what} are not all finite: entry {i} is {x}")
        if isinstance(x, (bool, str)) or x is None or not isinstance(x, (int, float, np.floating, np.integer)):
            raise ExternalError(f"{what}[{i}] must be a number, got {shown(x)}")
    try:
        row = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ExternalError(f"{what} must be a list of numbers") from None
    if row.ndim != 1 or row.shape[0] < 2 or (vocab is not None and row.shape[0] != vocab):
        raise ExternalError(f"{what} has shape {row.shape}, expected [{vocab if vocab is not None else 'V >= 2'}]")
    if not bool(np.all(np.isfinite(row))):
        raise ExternalError(
            f"{what} are not all finite: entries {shown(np.flatnonzero(~np.isfinite(row))[:8].tolist())}"
        )
    return row


def id_sequence(value: Sequence[Any], vocab: int, where: str) -> list[int]:
    """A list of token ids in [0, V)."""
    return [token_id(t, vocab, f"{where}[{i}]") for i, t in enumerate(value)]


MACHINE_IDS = 2**63  # ids where the vocabulary is not known: any non-negative int64 (an index must fit)

GenerationFields = tuple[tuple[int, ...], tuple[tuple[int, int], ...] | None, tuple[float, ...] | None]


def generation(raw: Any, vocab: int | None, where: str) -> GenerationFields:
    """(ids, cycles, logprobs) of one whole generation of the depth tests, every field exactly of
    its JSON type: a list of ids, or ``{"ids": [..], "cycles": [[drafted, accepted], ..] | null,
    "logprobs": [..] | null}``. Each id an integer (never a float like ``t + 0.5`` or ``5.999``, a
    string ``"5"`` or ``true``, which would convert) in [0, vocab) (vocab None: [0, 2**63)); each
    cycle two non-negative integers; each logprob a number (int or float, not a bool or string).
    The one reader of generations for every mode: this process's engine, a worker's, a command's.
    ExternalError naming the field and the item otherwise."""
    if isinstance(raw, np.ndarray):
        raw = raw.tolist()
    if isinstance(raw, Mapping):
        if "ids" not in raw:
            raise ExternalError(
                f"{where} has no field 'ids' (a generation is a list of ids or an {{ids, cycles, logprobs}} object)"
            )
        ids_value, cycles_value, logprobs_value = raw["ids"], raw.get("cycles"), raw.get("logprobs")
    else:
        ids_value, cycles_value, logprobs_value = raw, None, None
    ids = tuple(
        token_id(t, MACHINE_IDS if vocab is None else vocab, f"{where}, position {i}")
        for i, t in enumerate(_listed(ids_value, f"{where}.ids"))
    )
    return ids, _cycles(cycles_value, f"{where}.cycles"), _logprobs(logprobs_value, f"{where}.logprobs")


def _listed(value: Any, where: str) -> list[Any] | tuple[Any, ...]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise ExternalError(f"{where} must be a list, got {shown(value)}")
    return value


def _cycles(value: Any, where: str) -> tuple[tuple[int, int], ...] | None:
    if value is None:
        return None
    out = []
    for i, cycle in enumerate(_listed(value, where)):
        pair = _listed(cycle, f"{where}[{i}]")
        if len(pair) != 2:
            raise ExternalError(f"{where}[{i}] must be [drafted, accepted], got {shown(cycle)}")
        out.append(
            (
                bounded_int(pair[0], 0, MACHINE_IDS - 1, f"{where}[{i}][0]"),
                bounded_int(pair[1], 0, MACHINE_IDS - 1, f"{where}[{i}][1]"),
            )
        )
    return tuple(out)


def _logprobs(value: Any, where: str) -> tuple[float, ...] | None:
    if value is None:
        return None
    out = []
    for i, x in enumerate(_listed(value, where)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise ExternalError(f"{where}[{i}] must be a number, got {shown(x)}")
        try:
            out.append(float(x))
        except OverflowError:  # an int beyond any float: no log-probability
            raise ExternalError(f"{where}[{i}] is {shown(x)}, not a log-probability") from None
    return tuple(out)
