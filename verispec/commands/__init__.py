"""One module per `verispec` subcommand; each exposes ``register(subparsers)``."""

from __future__ import annotations

import os
import sys


def import_from_current_folder() -> None:
    """Let ``--verifier MOD:FN`` / ``--engine MOD:FACTORY`` name a module of the current folder.

    ``python -m verispec`` finds them (its import path starts with the current folder), the
    ``verispec`` console script did not (its path starts with its own bin/ folder): the same
    command failed with "cannot import module". The folder is APPENDED, so it never shadows an
    installed module; verispec itself imports only ``verispec.*``, so a user's own top-level
    ``engine/`` or ``spec/`` package there is never mistaken for verispec's.
    """
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.append(here)
