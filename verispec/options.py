"""The options of ``verispec check`` as objects, and the one mapping from flat keywords onto them.

What the check passes around is four things, each a frozen dataclass that checks its own fields
when it is built (with :mod:`verispec.arguments`, so a bad value is the same
:class:`~verispec.reference.errors.CheckError` from the CLI, the API and the pytest plugin):

VerifierUnderTest   the implementation: ``verifier`` (+ ``batch_verifier``, ``greedy_verifier``,
                    ``pipeline``) or ``verifier_cmd``; ``timeout``, ``law_only``, ``workers``
CheckDesign         the statistics: ``scale``, ``only``, ``sequential``, ``budget``,
                    ``budget_samples``, ``min_power``, ``shard``, ``fail_fast``, ``keep_going``
CheckReporting      the callbacks: ``log``, ``announce``, ``progress``, ``warn``
CheckOptions        the three above and the vectors replayed (``vectors`` or ``seed``/``count``)

Every field is named as its flag (``--batch-verifier`` -> ``batch_verifier``), so one builder,
:func:`check_options`, reads the CLI's parsed flags, the API's keywords and ready-made objects
alike (:func:`build` is the mapping; :mod:`verispec.decoder.options` uses it for check-decoder).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from verispec import arguments
from verispec.reference.errors import CheckError

__all__ = [
    "CheckDesign",
    "CheckOptions",
    "CheckReporting",
    "VerifierUnderTest",
    "build",
    "check_options",
    "flag_values",
    "keywords_of",
    "normalize_field",
    "objects",
    "one_of",
]

Part = str | Callable[..., Any] | None  # "module:function" or the callable itself
T = TypeVar("T")


# -----------------------------------------------------------------------------------------------
# the mapping: flat keywords (flag names) onto nested option objects
# -----------------------------------------------------------------------------------------------


def _nested(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that are option objects themselves (a dataclass default factory)."""
    inner: dict[str, type] = {}
    for f in fields(cls):
        factory: object = f.default_factory
        if isinstance(factory, type) and is_dataclass(factory):
            inner[f.name] = factory
    return inner


def keywords_of(cls: type) -> tuple[str, ...]:
    """The flat keywords of an option class: its fields, a nested option's fields in its place."""
    inner = _nested(cls)
    names: list[str] = []
    for f in fields(cls):
        if f.init:
            names.extend(keywords_of(inner[f.name]) if f.name in inner else (f.name,))
    return tuple(names)


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """``cls`` from flat ``values`` named as its keywords; a keyword left out takes its default."""
    inner = _nested(cls)
    given: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]  # cls is an option dataclass
        if f.name in inner:
            if any(name in values for name in keywords_of(inner[f.name])):
                given[f.name] = build(inner[f.name], values)
        elif f.init and f.name in values:
            given[f.name] = values[f.name]
    return cls(**given)


def one_of(name: str, value: object, cls: type[T]) -> T:
    """An option object of exactly ``cls`` (a CheckError naming ``name`` otherwise)."""
    if not isinstance(value, cls):
        raise CheckError(f"{name} must be a {cls.__name__}, got {arguments.shown(value)}")
    return value


def objects(
    function: str, given: Mapping[str, object | None], classes: Mapping[str, type], keywords: Mapping[str, Any]
) -> dict[str, Any]:
    """Each option object of ``classes`` (parameter name -> class): the one given, or built from
    ``keywords``. A keyword that names no option is a TypeError (as Python's own); a keyword of an
    object that was also given is a CheckError (two values for one field)."""
    known = {name: parameter for parameter, cls in classes.items() for name in keywords_of(cls)}
    for name in keywords:
        if name not in known:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
    built: dict[str, Any] = {}
    for parameter, cls in classes.items():
        mine = {name: value for name, value in keywords.items() if known[name] == parameter}
        if given.get(parameter) is None:
            built[parameter] = build(cls, mine)
            continue
        if mine:
            raise CheckError(f"{', '.join(mine)}: given in {parameter}= already; give each value once")
        built[parameter] = one_of(parameter, given[parameter], cls)
    return built


def flag_values(parsed: object, names: Iterable[str]) -> dict[str, Any]:
    """The parsed flags (an argparse Namespace) that are option keywords, by name."""
    values = vars(parsed)
    return {name: values[name] for name in names if name in values}


def normalize_field(instance: object, name: str, value: object) -> None:
    """Set a normalized field of a frozen option object in its ``__post_init__``."""
    object.__setattr__(instance, name, value)


# -----------------------------------------------------------------------------------------------
# verispec check
# -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifierUnderTest:
    """The implementation under ``verispec check``: ``verifier`` (with ``batch_verifier``,
    ``greedy_verifier``, ``pipeline``), each a ``"module:function"`` or the callable, or
    ``verifier_cmd``, a program speaking the JSON-lines wire protocol (``timeout`` seconds per
    answer, None: ``spec.external.DEFAULT_TIMEOUT``). ``law_only``: it draws its own randomness.
    ``workers``: draw in that many processes (string parts only: they cross a process boundary)."""

    verifier: Part = None
    _: KW_ONLY
    batch_verifier: Part = None
    greedy_verifier: Part = None
    pipeline: Any = None
    verifier_cmd: str | None = None
    timeout: float | None = None  # None: spec.external.DEFAULT_TIMEOUT, filled in when built
    law_only: bool = False
    workers: int = 1

    def __post_init__(self) -> None:
        for name in ("verifier", "batch_verifier", "greedy_verifier", "pipeline"):
            arguments.part(name, getattr(self, name))
        arguments.optional_text("verifier_cmd", self.verifier_cmd)
        arguments.flag("law_only", self.law_only)
        if self.timeout is None:
            from verispec.spec.external import DEFAULT_TIMEOUT

            normalize_field(self, "timeout", DEFAULT_TIMEOUT)
        arguments.number("timeout", self.timeout, positive=True)
        arguments.workers(self.workers)  # at most MAX_WORKERS
        parts = (self.batch_verifier, self.greedy_verifier, self.pipeline)
        if self.verifier_cmd is not None:
            if self.verifier is not None or any(part is not None for part in parts):
                raise CheckError("batch_verifier, greedy_verifier and pipeline go with verifier, not verifier_cmd")
        elif self.verifier is None:
            raise CheckError("give verifier (module:function or a callable) or verifier_cmd")
        if self.workers > 1 and any(part is not None and not isinstance(part, str) for part in self.parts()):
            raise CheckError("workers > 1 builds the verifier in other processes: give its parts as 'module:function'")

    def parts(self) -> tuple[Part, Part, Part, Any]:
        """verifier, batch_verifier, greedy_verifier, pipeline."""
        return (self.verifier, self.batch_verifier, self.greedy_verifier, self.pipeline)


@dataclass(frozen=True, kw_only=True)
class CheckDesign:
    """How the check runs its properties: ``scale`` multiplies the statistical sample sizes;
    ``only`` these properties; ``sequential`` / ``budget`` (seconds) / ``budget_samples``:
    group-sequential statistics that stop early; ``min_power``: the power a pass may have below
    0.99; ``shard``: ``"I/S"`` or ``(I, S)`` (kept as the pair); ``fail_fast``: stop at the first
    failure; ``keep_going`` (None: not in CI): the statistics after a deterministic failure."""

    scale: float = 1.0
    only: Sequence[str] | None = None
    sequential: bool = False
    budget: float | None = None
    budget_samples: int | None = None
    min_power: float | None = None
    shard: str | tuple[int, int] | None = None
    fail_fast: bool = False
    keep_going: bool | None = None

    def __post_init__(self) -> None:
        arguments.number("scale", self.scale, positive=True)
        if self.only is not None:
            normalize_field(self, "only", tuple(arguments.texts("only", self.only)))
        for name in ("sequential", "fail_fast"):
            arguments.flag(name, getattr(self, name))
        if self.keep_going is not None:
            arguments.flag("keep_going", self.keep_going)
        budget = self.budget  # inf: no budget, as the CLI allows
        if budget is not None and not (
            isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget > 0
        ):
            raise CheckError(f"budget must be > 0 seconds, got {arguments.shown(budget)}")
        arguments.optional_integer("budget_samples", self.budget_samples, minimum=0)
        arguments.optional_number("min_power", self.min_power)
        if self.min_power is not None and not 0 <= self.min_power <= 1:
            raise CheckError(f"min_power must be in [0, 1], got {self.min_power}")
        normalize_field(self, "shard", arguments.shard(self.shard))
        if self.shard is not None and (budget is not None or self.budget_samples is not None):
            raise CheckError("shard runs its whole slice: a budget would leave holes in the merge")

    def slice(self) -> tuple[int, int] | None:
        """The shard as the pair (I, S), 1-based (None: the whole run)."""
        return arguments.shard(self.shard)


@dataclass(frozen=True, kw_only=True)
class CheckReporting:
    """What the caller sees as the check runs: ``log`` each property's outcome as it is decided,
    ``announce`` the implementation's description once loaded, ``progress`` one line at a time on
    long runs, ``warn`` a line when the run takes the slow path (None: :func:`warnings.warn`)."""

    log: Callable[..., None] | None = None
    announce: Callable[[str], None] | None = None
    progress: Callable[..., Any] | None = None
    warn: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        for name in ("log", "announce", "progress"):
            arguments.part(name, getattr(self, name))


@dataclass(frozen=True)
class CheckOptions:
    """One ``verispec check`` run: the implementation, the design, the reporting and the vectors
    it replays (``vectors``, files, or ``seed`` / ``count`` of generated ones)."""

    subject: VerifierUnderTest
    design: CheckDesign = field(default_factory=CheckDesign)
    reporting: CheckReporting = field(default_factory=CheckReporting)
    vectors: str | Path | None = None
    seed: int | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        one_of("subject", self.subject, VerifierUnderTest)
        one_of("design", self.design, CheckDesign)
        one_of("reporting", self.reporting, CheckReporting)
        arguments.optional_path("vectors", self.vectors)
        arguments.optional_integer("seed", self.seed, minimum=0)
        arguments.optional_integer("count", self.count, minimum=0)
        if self.vectors is not None and (self.seed is not None or self.count is not None):
            raise CheckError("vectors replays files; seed/count generate vectors: give one or the other")


CHECK_OBJECTS: dict[str, type] = {"subject": VerifierUnderTest, "design": CheckDesign, "reporting": CheckReporting}
CHECK_KEYWORDS = (*(name for cls in CHECK_OBJECTS.values() for name in keywords_of(cls)), "vectors", "seed", "count")


def check_options(
    subject: VerifierUnderTest | Part = None,
    *,
    vectors: str | Path | None = None,
    seed: int | None = None,
    count: int | None = None,
    design: CheckDesign | None = None,
    reporting: CheckReporting | None = None,
    **keywords: Any,
) -> CheckOptions:
    """The options of one check, from objects or from the flags' keywords (``scale=0.5``, ...);
    ``subject`` may be the ``verifier`` itself (the keyword form's first argument)."""
    if subject is not None and not isinstance(subject, VerifierUnderTest):
        if "verifier" in keywords:
            raise TypeError("check() got multiple values for argument 'verifier'")
        keywords = {"verifier": subject, **keywords}
        subject = None
    built = objects("check", {"subject": subject, "design": design, "reporting": reporting}, CHECK_OBJECTS, keywords)
    return CheckOptions(vectors=vectors, seed=seed, count=count, **built)
