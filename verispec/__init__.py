"""verispec: the command-line layer and model registry over reference/ and engine/, and the gate
as a Python API: ``verispec.check(...)`` and ``verispec.check_decoder(...)`` (verispec/api.py).

The API is loaded on first use (PEP 562 ``__getattr__``), so ``import verispec`` stays cheap: the
pytest plugin imports this package in every test session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verispec.moved import install as _install_moved_names
from verispec.spec.version import VERSION as __version__

_install_moved_names()
__all__ = ["__version__", "check", "check_decoder"]

if TYPE_CHECKING:
    from verispec.api import check, check_decoder


def __getattr__(name: str) -> Any:
    if name in ("check", "check_decoder"):
        from verispec import api

        return getattr(api, name)
    raise AttributeError(f"module 'verispec' has no attribute {name!r}")
