"""Early-exit calibration: records along the full model's greedy trajectories, and the artifact.

Records. For each prompt the full model decodes greedily (every layer, as served without exits);
at each step (the last prompt position, then every generated token but the last) we keep the full
logits t [V] and the hidden states at the candidate depths. Then, per depth k, the exit logits
d = exit_logits(k, hidden) (batched over the prompt's steps) give, in float32:
``supnorm`` and ``halfrange`` residual scores (:func:`reference.certificate.residual_rows`), the
exit's top-1 ``margin`` and id (:func:`reference.certificate.top2_rows`), and the ``flip`` event
(exit top-1 != full argmax); each step remembers its prompt and the prompt's kind. Note: the serve
path evaluates the head on one row at a time, the calibration on a batch of rows; BLAS may round
the two differently in the last bits, so serve scores are exchangeable with calibration scores up
to that rounding.

Guarantee: the prompt is the exchangeable unit (:func:`reference.conformal.prompt_risk_threshold`).
Per depth and per prompt kind (Mondrian calibration: the kind is a deterministic function of the
prompt, :func:`reference.prompt_kind.prompt_kind`, or declared), every threshold is calibrated by
conformal risk control over that kind's prompts at alpha/K: the margin threshold on the loss "fraction of the
prompt's tokens admitted at this depth that flip", the residual quantiles on "fraction of the
prompt's tokens whose score exceeds Q" (a residual gate admits a flip only above Q). Each kind's
claim: PROMPT_CLAIM, "expected flip fraction of a new prompt ≤ α, valid when prompts (not tokens)
are exchangeable", for new prompts of that kind (the pooled calibration ``depths``: for a new
prompt exchangeable with the whole calibration mix). A kind with fewer than
:func:`reference.conformal.min_prompts` prompts gets +inf thresholds: it admits nothing, and
:attr:`Calibration.refusal` says so.

Artifact (:class:`Calibration`, JSON): model sha256, q, alpha = 1 - q, alpha/K, the claim, the
candidate depths, the pooled and per-kind thresholds, the default gate and residual kind, and the
lens if one was fit on prompts disjoint from the calibration prompts. The lens is written to
``X.lens.<sha256[:16]>.npz``, a name that changes with its content, BEFORE the JSON that names it
(with its sha256) replaces the old JSON: killed at any point, ``X.json`` is either the old
artifact with its old lens file or the new one with its new lens file (the pair is one atomic
unit); stale lens files are removed after. Loading checks the sha256, refuses NaN or malformed
thresholds, and an artifact for another model (all CalibrationError); every number must be one
calibration can produce (:func:`check_ranges`), the artifact and its lens must match the
seal over both files' contents, an HMAC where ``VERISPEC_CALIBRATION_KEY`` is set
(:mod:`reference.calibration_seal`, which says what an unkeyed seal cannot catch), and every
threshold must equal what the calibration scores the artifact carries give when recomputed
(:func:`check_recomputed`, :mod:`reference.calibration_records`). Served, the artifact must fit
the model: its layer count and lens width (:meth:`Calibration.check_fits`).

The package, one concept a module (this ``__init__`` only re-exports, with ``__all__``; the
records' JSON and the seal are :mod:`reference.calibration_records` and
:mod:`reference.calibration_seal`):

- :mod:`.trajectories`: greedy trajectories, the exit heads' scores as :class:`Records`, the lens fit.
- :mod:`.thresholds`: one depth's and one prompt kind's thresholds, computed from records.
- :mod:`.json_fields`: the artifact's numbers in JSON (+-inf as strings, NaN refused).
- :mod:`.files`: the output path's checks, sha256, the atomic writer, the lens as npz.
- :mod:`.artifact`: :class:`Calibration`, :func:`build`, and the checks made on loading
  (:func:`check_ranges`, :func:`check_recomputed`).
- :mod:`.run`: :func:`calibrate`, the whole calibration in one call.
"""

from __future__ import annotations

from verispec.reference.calibration.artifact import (
    ARTIFACT_BYTES,
    CALIBRATED_WEIGHTS,
    FORMAT,
    LENS_BYTES,
    POOLED,
    Calibration,
    build,
    check_ranges,
    check_recomputed,
    numerics,
)
from verispec.reference.calibration.files import check_output_path, file_sha256
from verispec.reference.calibration.run import Prompt, calibrate, check_depths, default_depths, split_for_lens
from verispec.reference.calibration.thresholds import DepthCalibration, KindCalibration
from verispec.reference.calibration.trajectories import F32, Records, Trajectory, greedy_trajectory, lens_from, score

__all__ = [
    "ARTIFACT_BYTES",
    "CALIBRATED_WEIGHTS",
    "Calibration",
    "DepthCalibration",
    "F32",
    "FORMAT",
    "KindCalibration",
    "LENS_BYTES",
    "POOLED",
    "Prompt",
    "Records",
    "Trajectory",
    "build",
    "calibrate",
    "check_depths",
    "check_output_path",
    "check_ranges",
    "check_recomputed",
    "default_depths",
    "file_sha256",
    "greedy_trajectory",
    "lens_from",
    "numerics",
    "score",
    "split_for_lens",
]
