"""Old module names kept importable: each maps to the module's new home, with a DeprecationWarning.

The decoder gate moved into two packages (:mod:`verispec.spec.decoder`, :mod:`verispec.decoder`);
code that imported a module by its old name keeps working until the next minor version. The table
is the record of what moved where. ``import verispec`` puts one finder on ``sys.meta_path``; an old name imports as the SAME module object as the new one, so classes,
registries and exceptions are never duplicated.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import warnings
from types import ModuleType

MOVED: dict[str, str] = {
    "verispec.spec.decoder_types": "verispec.spec.decoder.types",
    "verispec.spec.decoder_check": "verispec.spec.decoder.check",
    "verispec.spec.decoder_law": "verispec.spec.decoder.first_tokens",
    "verispec.spec.decoder_two_sample": "verispec.spec.decoder.two_sample",
    "verispec.spec.decoder_mutants": "verispec.spec.decoder.mutants",
    "verispec.spec.prefix_rows": "verispec.spec.decoder.prefix_rows",
    "verispec.spec.laws": "verispec.spec.decoder.laws",
    "verispec.spec.laws.common": "verispec.spec.decoder.laws.common",
    "verispec.spec.laws.default": "verispec.spec.decoder.laws.default",
    "verispec.spec.laws.llamacpp": "verispec.spec.decoder.laws.llamacpp",
    "verispec.spec.laws.transformers": "verispec.spec.decoder.laws.transformers",
    "verispec.spec.laws.vllm": "verispec.spec.decoder.laws.vllm",
    "verispec.spec.decoder_depth": "verispec.spec.decoder.depth.law",
    "verispec.spec.decoder_depth_power": "verispec.spec.decoder.depth.power",
    "verispec.spec.decoder_depth_ties": "verispec.spec.decoder.depth.ties",
    "verispec.spec.decoder_depth_two_sample": "verispec.spec.decoder.depth.two_sample",
    "verispec.spec.decoder_blocks": "verispec.spec.decoder.depth.blocks",
    "verispec.spec.decoder_forcing": "verispec.spec.decoder.depth.forcing",
    "verispec.spec.decoder_pool": "verispec.spec.decoder.depth.pool",
    "verispec.decoder_api": "verispec.decoder.api",
    "verispec.decoder_recipe": "verispec.decoder.recipe",
    "verispec.decoder_report": "verispec.decoder.report",
    "verispec.decoder_worker": "verispec.decoder.worker",
    "verispec.engine_decoder": "verispec.decoder.ours",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new name (imported, then returned as it is)."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; import it from there", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the new module ran when it was imported); the import system set the
        module's ``__spec__`` to the old name's, so it is given back its own."""
        module.__spec__ = self.own_spec


def spec_for(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """The spec that imports old name ``fullname`` as its new module; None for any other name."""
    new = MOVED.get(fullname)
    return None if new is None else importlib.util.spec_from_loader(fullname, _Alias(new))
