"""One exception hierarchy per concern.

Every error verispec raises on bad input derives from :class:`VerispecError`, so a caller (the CLI,
an external harness) can catch one type, print one line and exit non-zero, having lost nothing.
Messages name the offending value (and, for files, the offset and the field).
"""

from __future__ import annotations


class VerispecError(Exception):
    """Base of every typed verispec error."""


class GGUFError(VerispecError):
    """A GGUF container could not be read: malformed, truncated, or unsupported.

    Subclasses live in :mod:`reference.gguf`.
    """


class UnsupportedQuantType(GGUFError):
    """A tensor uses a ggml type that verispec cannot (de)quantize. Names the type and tensor."""


class TokenizerError(VerispecError):
    """Tokenizer metadata is missing or inconsistent, or a token id is out of range."""


class ModelError(VerispecError):
    """A model cannot be built or run: missing tensor, bad hyperparameter, NaN activations."""


class UnsupportedArchitecture(ModelError):
    """``general.architecture`` names an architecture verispec does not implement."""


class ContextOverflow(ModelError):
    """The prompt plus the requested tokens does not fit the context length."""


class RegistryError(VerispecError):
    """A model name is unknown, or a registered model is not installed (says how to fetch it)."""


class SamplingError(VerispecError):
    """Invalid sampling parameters or logits (NaN, inf where not allowed, empty support)."""


class VerificationError(VerispecError):
    """Speculative verification inputs violate the contract (not probability rows, q(x)=0, ...)."""


class CalibrationError(VerispecError):
    """A calibration artifact is malformed, for another model, or cannot be built."""


class CertificateError(VerispecError):
    """Early-exit certificate inputs violate the contract (NaN/inf logits, fewer than 2 logits, ...)."""


class DraftError(VerispecError):
    """A speculative draft source is misconfigured: unknown spec, k < 1, layer outside 1..L-1,
    p-min outside [0, 1], or a draft vocabulary that differs from the target's."""


class InputError(VerispecError):
    """An untrusted input (a JSON file or a wire line) is too large, too deeply nested, not
    JSON, or lacks a field; the message names the source and the field."""
