"""The seal of an early-exit calibration: one digest over the CONTENTS of the artifact and its lens.

A calibration is two files (the JSON thresholds and the lens ``.npz``), and the certificate is
only as good as both. The JSON used to carry the lens's sha256 about itself: a zeroed lens with
its sha256 field recomputed, or an edited threshold, loaded silently. The seal binds them: a
digest over the artifact's JSON fields in canonical form (sorted keys, no spaces; every field
but the seal itself) and the lens's arrays (their dtype, shape and bytes, not the npz container,
whose zip headers are not content). The loader recomputes it from what it read; any change to
either file, or a lens from another artifact, is refused.

With a key in the environment (``VERISPEC_CALIBRATION_KEY``, at least 16 bytes) the digest is
an HMAC-SHA256: only a holder of the key can make an artifact that loads, and an unsigned or
wrongly signed one is refused. Without a key it is a plain SHA-256, which anyone can recompute:
it catches an edit of one file without the other, a swapped lens or a truncated file, NOT a
deliberate forgery by someone who re-seals after editing. Against that, the range checks of
:mod:`reference.calibration` refuse every value calibration cannot produce, and every threshold
is recomputed from the calibration scores the artifact carries
(:mod:`reference.calibration_records`), so an edited threshold, q or count is refused too; what
is left to an unkeyed forger is forging the SCORES (and re-sealing), or swapping the lens for
another non-zero one: only a key catches those.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import CalibrationError
from verispec.reference.exit_head import Lens

KEY_ENV = "VERISPEC_CALIBRATION_KEY"
MIN_KEY_BYTES = 16
SEAL_FIELD = "seal"
DOMAIN = b"verispec early-exit calibration seal v1\x00"  # a digest of this, and nothing else


def calibration_key() -> bytes | None:
    """The signing key from the environment, or None; CalibrationError for a key too short to
    be a secret (a typo would otherwise sign with a guessable key)."""
    text = os.environ.get(KEY_ENV)
    if text is None or text == "":
        return None
    key = text.encode("utf-8")
    if len(key) < MIN_KEY_BYTES:
        raise CalibrationError(f"{KEY_ENV} must hold at least {MIN_KEY_BYTES} bytes, got {len(key)}")
    return key


def _content(body: Mapping[str, Any], lens: Lens | None) -> bytes:
    """The sealed bytes: the domain, the canonical JSON body, then each lens array."""
    parts = [DOMAIN, json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")]
    if lens is not None:
        arrays: dict[str, npt.NDArray[Any]] = {
            "depths": np.asarray(lens.depths, dtype=np.int64),
            "weight": np.ascontiguousarray(lens.weight, dtype=np.float32),
            "bias": np.ascontiguousarray(lens.bias, dtype=np.float32),
        }
        for name, array in arrays.items():
            parts.append(f"\x00{name}:{array.dtype.str}:{list(array.shape)}\x00".encode())
            parts.append(array.tobytes())
    return b"".join(parts)


def seal(body: Mapping[str, Any], lens: Lens | None, key: bytes | None) -> dict[str, str]:
    """The seal field of an artifact whose other fields are ``body``."""
    content = _content(body, lens)
    if key is None:
        return {"algorithm": "sha256", "digest": hashlib.sha256(content).hexdigest()}
    return {"algorithm": "hmac-sha256", "digest": hmac.new(key, content, hashlib.sha256).hexdigest()}


def check_seal(raw: Mapping[str, Any], lens: Lens | None, where: str) -> None:
    """CalibrationError unless ``raw``'s seal matches its contents and ``lens`` (signed with the
    configured key when there is one)."""
    found = raw.get(SEAL_FIELD)
    if not isinstance(found, dict) or not isinstance(found.get("digest"), str):
        raise CalibrationError(f"{where} carries no seal (written by an older verispec or edited): calibrate again")
    key = calibration_key()
    algorithm = found.get("algorithm")
    if key is not None and algorithm != "hmac-sha256":
        raise CalibrationError(f"{where} is not signed, and {KEY_ENV} is set: only signed calibrations load")
    if key is None and algorithm == "hmac-sha256":
        raise CalibrationError(f"{where} is signed: set {KEY_ENV} to the key it was signed with")
    if algorithm not in ("sha256", "hmac-sha256"):
        raise CalibrationError(f"{where}: unknown seal algorithm {str(algorithm)[:40]!r}")
    body = {name: value for name, value in raw.items() if name != SEAL_FIELD}
    expected = seal(body, lens, key)["digest"]
    if not hmac.compare_digest(expected, found["digest"]):
        what = "signature" if key is not None else "seal"
        raise CalibrationError(
            f"{where}: the {what} does not match its contents (the artifact or its lens was changed)"
        )
