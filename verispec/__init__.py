"""verispec: the command-line layer and model registry over reference/ and engine/, and the gate
as a Python API: ``verispec.check(...)`` and ``verispec.check_decoder(...)`` (verispec/api.py).

The API is loaded on first use (PEP 562 ``__getattr__``), so ``import verispec`` stays cheap: the
pytest plugin imports this package in every test session.


The modules:

- :mod:`.api`: The gate from Python: :func:`check` and :func:`check_decoder`, the two commands as functions.
- :mod:`.options`: The options of ``verispec check`` as objects, and the one mapping from flat keywords onto them.
- :mod:`.arguments`: The argument checks of :func:`verispec.check` and :func:`verispec.check_decoder`, by type and range.
- :mod:`.atomic`: The atomic writer for the CLI: re-exported from :mod:`reference.atomic`, the one definition.
- :mod:`.bench`: `verispec bench`: every speed that matters, measured in ONE process so the ratios are comparable.
- :mod:`.calibration_prompts`: A seeded, deterministic generator of calibration prompts for early exit, by kind.
- :mod:`.cli`: `verispec` command line: a thin layer that parses, calls the library, prints text or --json.
- :mod:`.commands`: One module per `verispec` subcommand; each exposes ``register(subparsers)``.
- :mod:`.decoder`: ``verispec check-decoder`` as a library: the Python API, the CLI's objects, the worker process.
- :mod:`.engine_load`: Loading a model for a CLI command on the engine its ``--engine`` / ``--weights`` flags name.
- :mod:`.exit_codes`: The exit statuses of every ``verispec`` command, decided in one place.
- :mod:`.geomean`: The geometric mean of speed ratios, the one definition every benchmark summary uses.
- :mod:`.junit`: ``--junit-xml PATH``: a gate's report as JUnit XML, the format every CI system displays.
- :mod:`.moved`: Old module names kept importable: each maps to the module's new home, with a DeprecationWarning.
- :mod:`.parent_death`: A worker process that ends when the process that started it dies.
- :mod:`.peers`: Adapters that drive other people's speculative decoders under ``verispec check-decoder``.
- :mod:`.progress`: A progress line on stderr for long runs: shown on a terminal, silent in CI and in pipes.
- :mod:`.pytest_plugin`: pytest plugin (entry point ``pytest11``): gate a verifier from a test suite in a few lines.
- :mod:`.registry`: The model registry: short names for the real GGUF models that ship on PyPI.
- :mod:`.synth`: Tiny synthetic GGUF models of the llama, mistral, phi3, gemma3 and gemma4 shapes (``verispec models synth``): seeded and deterministic, NumPy only, loadable ...
- :mod:`.templates`: The files a user starts from, shipped in the wheel: ``verispec template NAME`` prints one.
- :mod:`.workload`: The bench workload: what people speed up with speculation, in Spec-Bench's categories.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verispec.api import check, check_decoder
    from verispec.decoder.options import (
        DecoderReporting,
        DecoderUnderTest,
        DepthDesign,
        DraftFlags,
        Penalties,
        SamplingFlags,
    )
    from verispec.options import CheckDesign, CheckReporting, VerifierUnderTest


class MovedNames(importlib.abc.MetaPathFinder):
    """Imports a module's old name as the module itself (:mod:`verispec.moved` has the table)."""

    PREFIXES = (
        "verispec.spec.decoder_",
        "verispec.spec.laws",
        "verispec.spec.prefix_rows",
        "verispec.decoder_",
        "verispec.engine_decoder",
    )

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.PREFIXES):
            return None
        from verispec.moved import spec_for

        return spec_for(fullname)


if not any(isinstance(f, MovedNames) for f in sys.meta_path):
    sys.meta_path.insert(0, MovedNames())  # before the path finder: an old submodule must not load twice

# the option objects of the two gates (verispec/options.py, verispec/decoder/options.py), by module
_OPTIONS = {
    "verispec.options": ("CheckDesign", "CheckReporting", "VerifierUnderTest"),
    "verispec.decoder.options": (
        "DecoderReporting",
        "DecoderUnderTest",
        "DepthDesign",
        "DraftFlags",
        "Penalties",
        "SamplingFlags",
    ),
}

__all__ = [
    "CheckDesign",
    "CheckReporting",
    "DecoderReporting",
    "DecoderUnderTest",
    "DepthDesign",
    "DraftFlags",
    "Penalties",
    "SamplingFlags",
    "VerifierUnderTest",
    "__version__",
    "check",
    "check_decoder",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # spec/version.py: the spec names the version its reports carry
        from verispec.spec.version import VERSION

        return VERSION
    if name in ("check", "check_decoder"):
        from verispec import api

        return getattr(api, name)
    for module, names in _OPTIONS.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'verispec' has no attribute {name!r}")
