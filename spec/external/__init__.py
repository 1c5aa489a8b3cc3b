"""The JSON-lines wire protocol (version 1) between ``verispec check`` and a program under test.

``verispec check --verifier-cmd "CMD"`` starts CMD once (``/bin/sh -c CMD``), keeps it alive for
the whole run, writes requests to its stdin and reads responses from its stdout: one JSON object
per line (UTF-8, ``\\n``-terminated), exactly one response per request, in request order. stderr is
free for the program's logs (its tail is quoted when something goes wrong). Requests may be
pipelined: the checker can write many before reading, so read and answer line by line.

Request::

    {"id": "sampled/0007", "op": "sampled", "input": {...}}

Response, one of::

    {"id": "sampled/0007", "output": {...}}          the answer
    {"id": "sampled/0007", "error": "why"}           the input breaks the contract: rejected
    {"id": "sampled/0007", "unsupported": "op"}      this program does not implement the op

``id`` is echoed verbatim. Ops, inputs and outputs (k drafts, vocabulary V, N items):

======================  ==================================================  ==========================
op                      input                                               output
======================  ==================================================  ==========================
``sampled`` (required)  p [k+1][V], q [k][V], drafts [k], uniforms [k+1]    accepted, token, kind
``sampled_batch`` (req) p [k+1][V], q [k][V] (shared by all items),          accepted [N], token [N],
                        drafts [N][k], uniforms [N][k+1]                    kind [N]
``greedy`` (optional)   p [k+1][V] (logits or probabilities), drafts [k]    accepted, token, kind
``sampled_law``         p [k+1][V], q [k][V] (shared), drafts [N][k], seed:  accepted [N], token [N],
                        the program's OWN randomness (``--law-only``),      kind [N]
                        drawn from ``seed`` (an int in [0, 2^53))
``rows``                target_logits [k+1][V], draft_logits [k][V],         p [k+1][V], q [k][V],
                        history [..], drafts [k], target_params,            mode ("sampled" or
                        draft_params                                        "greedy")
``target_law``          logits [V], history [..], params                    probs [V]
``gate``                gate ("supnorm", "halfrange", "margin"), margin,     admit (bool)
                        quantile + slack (null: default) or threshold,
                        dtype ("float32" or "float64")
``conformal_index``     n (int), q (string: "0.9", "2/3": exact rational)   index (int or null)
``dequantize``          ggml_type, type_name, n_elements, raw_hex           bits [n]: "3f800000"...
======================  ==================================================  ==========================

``kind`` is ``"repair"`` or ``"bonus"``; the sampled ops follow the random-draw protocol (version
1, spec/protocol.md) exactly, bit for bit. Sampling params: ``{"temperature", "top_k", "top_p",
"min_p", "repeat_penalty", "repeat_last_n", "logit_bias": [[id, bias], ...]}`` with bias a number
or ``"-inf"`` (a ban); meaning: the target law of :mod:`reference.sampling`. Numbers are JSON
numbers (float64); a request may carry the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` where
a float is expected (only in inputs that test the contract): they must be rejected with an error
response. Contract violations (rows not summing to 1 within 1e-6, negative entries,
q[i][drafts[i]] == 0, ids outside [0, V), uniforms outside [0, 1), wrong shapes, k < 1) must be
answered with ``error``, never with a verdict. A ``sampled_batch`` request with any invalid item is
rejected as a whole.

Unsupported optional ops are reported as skipped; an unsupported required op, a malformed
response, a response out of order, a crash or a response slower than the timeout are failures.
Every answer is validated before it counts (:mod:`spec.answers`): ids are JSON integers in
[0, V), accepted counts in [0, k], EVERY item of a batch answer is checked, rows have the shape
asked for; a line is at most ``MAX_LINE_BYTES`` and at most ``reference.json_input.MAX_DEPTH``
deep. The program runs in its own process group, killed with everything it started on every
exit path; once it has timed out it is not restarted (a dead peer costs one timeout per run).

This package holds both ends, one concept a module (this ``__init__`` only re-exports, with
``__all__``):

- :mod:`.json_values`: numpy values as JSON and one compact line per message.
- :mod:`.transport`: the checker's side, :class:`CommandTransport` (a long-lived program under
  test in its own process group), :func:`kill_all_peers`, :func:`check_timeout`.
- :mod:`.implementation`: the checker's side, :class:`WireImplementation`: a program as the
  :class:`~reference.speculative.Verifier`, :class:`~reference.speculative.BatchVerifier` and
  :class:`~spec.pipeline.Pipeline` protocols.
- :mod:`.server`: a program's side, :func:`serve` and its handlers:
  ``python -m verispec.spec.external --reference`` serves the reference,
  ``python -m verispec.spec.external --mutant NAME`` a mutant of :mod:`spec.mutants`
  (``__main__`` runs :func:`.server.main`).
"""

from __future__ import annotations

from verispec.reference.errors import ExternalError, ProgramCannotStart, TimeoutSetting, Unsupported
from verispec.spec.external.implementation import BATCH_ITEMS, WireImplementation, parse_verdict
from verispec.spec.external.json_values import encode_line
from verispec.spec.external.server import (
    OPTIONAL_OPS,
    REQUIRED_OPS,
    Handler,
    law_handler,
    main,
    mutant_handler,
    reference_handler,
    serve,
)
from verispec.spec.external.transport import (
    CLOSE_GRACE,
    DEFAULT_TIMEOUT,
    MAX_LINE_BYTES,
    MAX_TIMEOUT,
    STDERR_TAIL_BYTES,
    CommandTransport,
    check_timeout,
    kill_all_peers,
)

__all__ = [
    "BATCH_ITEMS",
    "CLOSE_GRACE",
    "CommandTransport",
    "DEFAULT_TIMEOUT",
    "ExternalError",
    "Handler",
    "MAX_LINE_BYTES",
    "MAX_TIMEOUT",
    "OPTIONAL_OPS",
    "ProgramCannotStart",
    "REQUIRED_OPS",
    "STDERR_TAIL_BYTES",
    "TimeoutSetting",
    "Unsupported",
    "WireImplementation",
    "check_timeout",
    "encode_line",
    "kill_all_peers",
    "law_handler",
    "main",
    "mutant_handler",
    "parse_verdict",
    "reference_handler",
    "serve",
]
