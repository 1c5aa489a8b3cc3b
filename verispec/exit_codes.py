"""The exit statuses of every ``verispec`` command, decided in one place.

    0   passed (or the command did what it was asked)
    1   failed: a property, a prompt, a check did not hold
    2   usage error: bad arguments, an unknown property, a verifier that cannot be loaded or a
        program that cannot start, reports that are not shards of one run
    3   inconclusive: a budget ended before the tests reached their power
    4   model or input error: a file that cannot be read, a bad GGUF, a broken vectors directory,
        a calibration or workload that does not parse
    130 interrupted (Ctrl-C)

Errors are mapped by class NAME along the exception's MRO, not by importing the classes, so the
mapping holds wherever a class lives (the errors move into reference/errors.py) and importing this
module loads nothing else. A class not named here is a usage error (2). ``WorkloadError`` stays a
usage error for now, and so does ``CalibrationError``: each covers both a file that cannot be read
and a bad argument (an unknown ``--prompts`` kind; ``--q`` outside (0, 1), a missing output folder).
"""

from __future__ import annotations

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
EXIT_INPUT = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C

# Errors about what the command READ (a model, a vectors folder, a calibration, a workload): 4.
INPUT_ERRORS: frozenset[str] = frozenset(
    {
        "GGUFError",
        "TokenizerError",
        "ModelError",
        "VectorError",
        "ChatFormatError",
        "ReportError",  # a --merge report that cannot be read or parsed
        "OSError",  # a file that cannot be opened or read
    }
)

# Subclasses of the above that are about what was ASKED, not what was read: 2.
USAGE_ERRORS: frozenset[str] = frozenset(
    {
        "ContextOverflow",  # the prompt plus --max-tokens does not fit the context
        "BackendUnavailable",  # a --backend that is not installed here
    }
)

EPILOG = (
    "exit status: 0 passed, 1 failed, 2 usage error (bad arguments, a verifier that cannot be loaded "
    "or started), 3 inconclusive (a budget ended before power), 4 model/input error (a file that cannot "
    "be read, a bad GGUF, a broken vectors directory), 130 interrupted"
)


def exit_code_for(error: BaseException) -> int:
    """The exit status of a command that stopped with ``error``."""
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    for cls in type(error).__mro__:  # the most specific class named decides
        if cls.__name__ in USAGE_ERRORS:
            return EXIT_USAGE
        if cls.__name__ in INPUT_ERRORS:
            return EXIT_INPUT
    return EXIT_USAGE
