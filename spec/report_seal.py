"""What binds a shard report to its run: verifier identity, run id, content digest, HMAC.

- ``verifier_identity`` = sha256 of the implementation's description (its ``module:function``
  specs or its command string, and its mode: which ops it was declared to answer).
- ``run_id`` = sha256 of the run's design (scale, property selection, shard count, vectors,
  TV bias, verispec and protocol versions), its seed and the verifier identity: every shard of one
  run carries the same run id, and the merge recomputes it.
- ``digest`` = sha256 of the report's canonical JSON (keys sorted, no whitespace, no NaN) without
  the ``digest`` and ``signature`` fields: an edit after writing shows.
- ``signature`` = HMAC-SHA256 over the same canonical JSON with the secret in the environment
  variable ``VERISPEC_REPORT_KEY`` (a CI secret), hex.

What an UNSIGNED merge can still be fooled by: anyone can recompute a sha256, so the digest and
run id only catch accidents (a shard of another run, another verifier, another version, an edited
field left unsealed); a deliberate forger who edits counts, outcomes or the implementation label
and recomputes the digests is caught only where the merge can recompute the content itself
(block ownership, designed totals, the property set, the same-stream probe). Counts synthesised
from the test designs, or a shard 1 whose deterministic properties are written "passed", are not
detectable without a key. Only the HMAC binds a report to whoever holds the key: with
``VERISPEC_REPORT_KEY`` set, unsigned or wrongly signed shards are refused; set but empty (or
blank), it is refused outright rather than read as "no key".

The seal covers the report as verispec writes it; the merge reads a shard only if writing it back
gives exactly the file's content (:func:`spec.merge.read_shard`), so a field the reader would
normalize (a schema version, a block key "01") cannot ride along under a valid seal.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

from verispec.reference.errors import CheckError

REPORT_KEY_ENV = "VERISPEC_REPORT_KEY"
SEAL_FIELDS = ("digest", "signature")


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    """One byte string per JSON value: sorted keys, no whitespace, ASCII, no NaN or infinity."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def sha256_hex(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def verifier_identity(description: str, law_only: bool) -> str:
    """The digest of what was checked: the verifier's specs / command and the mode (declared ops)."""
    ops = ["sampled_law"] if law_only else ["sampled", "sampled_batch", "greedy", "optional ops"]
    return sha256_hex({"implementation": description, "ops": ops})


def run_id(design: Mapping[str, Any], seed: int, identity: str) -> str:
    """The digest binding every shard of one run: design + seed + verifier identity."""
    return sha256_hex({"design": dict(design), "seed": seed, "verifier_identity": identity})


def unsealed(report_json: Mapping[str, Any]) -> dict[str, Any]:
    """The report's JSON without its seal fields (what the digest and the HMAC cover)."""
    return {key: value for key, value in report_json.items() if key not in SEAL_FIELDS}


def content_digest(report_json: Mapping[str, Any]) -> str:
    return sha256_hex(unsealed(report_json))


def report_key() -> bytes | None:
    """The HMAC secret from the environment (None when unset). Set but empty is a CheckError: a
    CI secret that is not configured expands to "", and reading that as "no key" would turn a job
    meant to sign and verify into an unsigned one without a word."""
    key = os.environ.get(REPORT_KEY_ENV)
    if key is None:
        return None
    if not key.strip():
        raise CheckError(
            f"{REPORT_KEY_ENV} is set but empty (a CI secret not configured?): give the secret, "
            f"or unset it for unsigned shards and merges"
        )
    return key.encode("utf-8")


def signature(report_json: Mapping[str, Any], key: bytes) -> str:
    return hmac.new(key, canonical_json(unsealed(report_json)), hashlib.sha256).hexdigest()


def signature_matches(report_json: Mapping[str, Any], claimed: str, key: bytes) -> bool:
    """Constant-time comparison of the claimed signature with the one the key gives."""
    return hmac.compare_digest(signature(report_json, key), claimed)
