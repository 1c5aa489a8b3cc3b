"""Every exception class of verispec, in one module, each with the exit category the CLI maps it to.

Every error verispec raises on bad input derives from :class:`VerispecError`, so a caller (the CLI,
an external harness) can catch one type, print one line and exit non-zero, having lost nothing.
Messages name the offending value (and, for files, the offset and the field). The classes used to
live beside their code; those module names still re-export them (``from verispec.spec.check
import CheckError`` keeps working), but they are defined here only.

Exit categories. Each class carries ``exit_category``, inherited unless a class sets its own:

    "usage"   the request cannot be carried out as asked: flags that contradict each other, an
              unknown name, an output that cannot be written, a missing optional backend. The
              user fixes the command line (exit 2).
    "input"   a model, file or artifact the user gave is malformed, of another version, or
              inconsistent (exit 4). The root's category: bad input is what the hierarchy is for.
    "failed"  the implementation under test broke its side of the protocol (crashed, timed out,
              answered malformed JSON): a verdict on it, not on the request (exit 1).

Exit codes that are not errors (3 inconclusive, 130 interrupted) are the CLI's, not a class's.
:func:`exit_category_of` gives the category of any exception (``None`` for one that is not ours).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

ExitCategory = Literal["usage", "input", "failed"]
EXIT_CATEGORIES: tuple[ExitCategory, ...] = ("usage", "input", "failed")


class VerispecError(Exception):
    """Base of every typed verispec error."""

    exit_category: ClassVar[ExitCategory] = "input"


class Terminated(BaseException):
    """SIGTERM arrived (verispec/cli.py raises it from the signal handler): unwind like Ctrl-C,
    finally blocks run and outputs stay atomic. Not a VerispecError: nothing may catch it as one."""


def exit_category_of(exc: BaseException) -> ExitCategory | None:
    """The exit category of ``exc``: its class's, or None when it is not a :class:`VerispecError`."""
    return exc.exit_category if isinstance(exc, VerispecError) else None


# -- usage: the request cannot be carried out as asked ----------------------------------------------


class UsageError(VerispecError):
    """Command-line flags that contradict each other, or name an output that cannot be written."""

    exit_category: ClassVar[ExitCategory] = "usage"


class DesignTooLarge(UsageError):
    """The decoder depth test's design needs more tokens than its stated bound
    (spec/decoder/depth/law.py ``MAX_DESIGN_TOKENS``): refused before any is drawn."""


class SynthError(UsageError, ValueError):
    """A synthetic model asked for with an unknown variant, type, file type or tokenizer."""


class QuantError(UsageError, ValueError):
    """A tensor that cannot be quantized to the type asked (a row not a whole number of blocks)."""


class DeterministicLaw(VerispecError, ValueError):
    """Every pilot row of the decoder depth test is one-hot (temperature 0 or near it, top-k 1): the
    target law leaves nothing to sample, so no deviation of the design's kind exists and no sample
    size can be designed. Legitimate, and caught inside the spec: the depth test then checks what a
    deterministic law allows (spec/decoder/depth/law.py)."""


class BudgetEnded(VerispecError):
    """The budget's seconds ran out in the middle of a statistical block (spec/sequential.py): the
    block is dropped, never counted in part (a block's counts are all of its draws or none), and
    the run stops as at a block's end. Caught inside the spec: it never leaves a run."""

    exit_category: ClassVar[ExitCategory] = "usage"


class OutputError(VerispecError):
    """An output path cannot be written as asked: an existing file, a non-empty folder without
    --force, a missing parent folder, or an operating-system error while writing."""

    exit_category: ClassVar[ExitCategory] = "usage"


class TimeoutSetting(VerispecError):
    """``--timeout`` is not a finite positive number of seconds."""

    exit_category: ClassVar[ExitCategory] = "usage"


class CheckError(VerispecError):
    """``verispec check`` cannot start or cannot merge: a bad ``module:function``, an unknown
    property name, a report that is not a shard of this run."""

    exit_category: ClassVar[ExitCategory] = "usage"


class ReportError(CheckError):
    """A report file that cannot be read or parsed, or of another schema version."""

    exit_category: ClassVar[ExitCategory] = "input"


class TemplateError(VerispecError):
    """An unknown template name, or a template missing from the installation."""

    exit_category: ClassVar[ExitCategory] = "usage"


class BenchReportError(VerispecError):
    """A bench report that cannot be read: not an object, a missing or mistyped field, or a
    schema version this verispec does not know (names the field)."""


class WitnessError(VerispecError):
    """Invalid witness settings (names the flag and the value)."""

    exit_category: ClassVar[ExitCategory] = "usage"


class BenchError(VerispecError):
    """A bad bench option (one line)."""

    exit_category: ClassVar[ExitCategory] = "usage"


class PeerFailed(VerispecError):
    """A measured peer's child process (bench, demo: llama.cpp) died, hung or refused a request;
    :attr:`result` says how, as the JSON object the report shows in that peer's place. Bench and
    demo catch it and report it as the peer's result; uncaught it is a failed run."""

    exit_category: ClassVar[ExitCategory] = "failed"

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


class RegistryError(VerispecError):
    """A model name is unknown, or a registered model is not installed (says how to fetch it)."""

    exit_category: ClassVar[ExitCategory] = "usage"


class SamplingError(VerispecError):
    """Invalid sampling parameters or logits (NaN, inf where not allowed, empty support)."""

    exit_category: ClassVar[ExitCategory] = "usage"


class DraftError(VerispecError):
    """A speculative draft source is misconfigured: unknown spec, k < 1, layer outside 1..L-1,
    p-min outside [0, 1], or a draft vocabulary that differs from the target's."""

    exit_category: ClassVar[ExitCategory] = "usage"


# -- input: a model, file or artifact is malformed -------------------------------------------------


class DraftCacheError(DraftError):
    """A ``--draft-cache`` file that cannot be used: not readable, too large, malformed, of another
    version, or of another (or no) vocabulary fingerprint. Bad input (exit 4), not a bad flag;
    a DraftError still, so ``except DraftError`` keeps catching it."""

    exit_category: ClassVar[ExitCategory] = "input"


class GGUFError(VerispecError):
    """A GGUF container could not be read: malformed, truncated, or unsupported."""


# One class per way a GGUF file can be wrong (raised by reference/gguf.py). All are GGUFError.


class GGUFTruncated(GGUFError):
    """The file ends before a field it announces."""


class GGUFBadMagic(GGUFError):
    """The first four bytes are not ``GGUF``."""


class GGUFUnsupportedVersion(GGUFError):
    """The version is not 2 or 3."""


class GGUFBigEndian(GGUFUnsupportedVersion):
    """The version reads byte-swapped: a big-endian file, which verispec does not read."""


class GGUFBadAlignment(GGUFError):
    """``general.alignment`` is not a non-zero power of two, or not a u32."""


class GGUFLimitExceeded(GGUFError):
    """A count, length or size is absurd: more than the file could hold, negative, or overflowing."""


class GGUFSizeExceedsFile(GGUFLimitExceeded, GGUFTruncated):
    """A count or length announces more bytes than the file has left.

    From the bytes alone an absurd value and a truncated file look the same, so this error is both
    a :class:`GGUFLimitExceeded` and a :class:`GGUFTruncated`.
    """


class GGUFBadString(GGUFError):
    """A string is not valid UTF-8."""


class GGUFBadKey(GGUFError):
    """A metadata key is empty."""


class GGUFDuplicateKey(GGUFError):
    """Two metadata entries share a key."""


class GGUFBadMetadataType(GGUFError):
    """A metadata value type id is unknown, or a key has the wrong type for its use."""


class GGUFMissingKey(GGUFError):
    """A required metadata key is absent."""


class GGUFDuplicateTensor(GGUFError):
    """Two tensors share a name."""


class GGUFBadTensorType(GGUFError):
    """A tensor's ggml type id is not one ggml defines."""


class GGUFBadShape(GGUFError):
    """A tensor has too many dims, a negative dim, or a row that is not a whole number of blocks."""


class GGUFTensorOutOfBounds(GGUFError):
    """A tensor's data lies (partly) past the end of the file."""


class GGUFTensorMisaligned(GGUFError):
    """A tensor's data offset is not a multiple of the alignment."""


class GGUFClosed(GGUFError):
    """The file was closed."""


class GGUFUnreadable(GGUFError):
    """The operating system could not open or map the file (missing, a directory, no permission)."""


class UnsupportedQuantType(GGUFError):
    """A tensor uses a ggml type that verispec cannot (de)quantize. Names the type and tensor."""


class QuantSizeMismatch(GGUFError):
    """Raw bytes do not hold a whole number of blocks for the requested element count."""


class NonFiniteQuantInput(GGUFError, ValueError):
    """:func:`quantize` was given NaN or inf (ggml's reference quantizers are undefined there)."""


class TokenizerError(VerispecError):
    """Tokenizer metadata is missing or inconsistent, or a token id is out of range."""


class ChatFormatError(VerispecError):
    """The model's chat template is of no family verispec can render, or a message is malformed."""


class ModelError(VerispecError):
    """A model cannot be built or run: missing tensor, bad hyperparameter, NaN activations."""


class UnsupportedArchitecture(ModelError):
    """``general.architecture`` names an architecture verispec does not implement."""


class NotBlockQuantized(ModelError):
    """The tensor's GGUF type has no lossless kernel block form (float or IQ types)."""


class ContextOverflow(ModelError):
    """The prompt plus the requested tokens does not fit the context length."""

    exit_category: ClassVar[ExitCategory] = "usage"  # fewer tokens or a shorter prompt fixes it


class InsufficientMemory(ModelError):
    """The chosen weights mode needs more memory than is available (raised before loading)."""

    exit_category: ClassVar[ExitCategory] = "usage"  # another weights mode fixes it


class BackendUnavailable(ModelError):
    """The backend's library is not installed (``pip install 'verispec[fast]'``)."""

    exit_category: ClassVar[ExitCategory] = "usage"  # installing the extra fixes it


class NativeKernelUnavailable(ModelError):
    """A native kernel cannot run here: no C compiler, a failed compile, a library that does not
    load, or an instruction set this CPU lacks (engine/native.py says which)."""


class VerificationError(VerispecError):
    """Speculative verification inputs violate the contract (not probability rows, q(x)=0, ...)."""


class CalibrationError(VerispecError):
    """A calibration artifact is malformed, for another model, or cannot be built.

    A usage error: most are raised for what the command line asked (``--q`` outside (0, 1), a
    report folder that does not exist, a calibration for another model than ``--model``); one
    class covers both, so the stricter of the two codes is not claimed."""

    exit_category: ClassVar[ExitCategory] = "usage"


class CertificateError(VerispecError):
    """Early-exit certificate inputs violate the contract (NaN/inf logits, fewer than 2 logits, ...)."""


class VectorError(VerispecError):
    """A vector directory is missing, corrupt (sha256 mismatch), or of another format version."""


class WorkloadError(VerispecError):
    """A workload file that cannot be read or has a malformed line (names the line).

    A usage error, like CalibrationError: it is also raised for an unknown ``--prompts`` kind."""

    exit_category: ClassVar[ExitCategory] = "usage"


class InputError(VerispecError):
    """An untrusted input (a JSON file or a wire line) is too large, too deeply nested, not
    JSON, or lacks a field; the message names the source and the field."""


# -- failed: the implementation under test broke the protocol --------------------------------------


class ExternalError(VerispecError):
    """The program under test broke the wire protocol: crashed, timed out, answered malformed
    JSON, out of order, or without a required field. Never a VerificationError, so a crash on
    bad input does not pass for a rejection."""

    exit_category: ClassVar[ExitCategory] = "failed"


class ProgramCannotStart(ExternalError):
    """The program exited before its first answer ever (not found, not executable, crashed at
    start): a usage error of the run, not a verdict about a verifier."""

    exit_category: ClassVar[ExitCategory] = "usage"


class Unsupported(ExternalError):
    """The program answered ``{"unsupported": op}``."""


class LoopStopped(VerispecError):
    """A decode loop run in lockstep with others (engine/lockstep.py) was stopped at its model
    call because another loop failed or the run was interrupted; the caller raises that loop's
    error (or the interrupt) instead, so this one never leaves the run."""

    exit_category: ClassVar[ExitCategory] = "failed"
