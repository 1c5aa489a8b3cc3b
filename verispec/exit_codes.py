"""The exit statuses of every ``verispec`` command, decided in one place.

    0   passed (or the command did what it was asked)
    1   failed: a property, a prompt, a check did not hold
    2   usage error: bad arguments, an unknown property, a verifier that cannot be loaded or a
        program that cannot start, reports that are not shards of one run
    3   inconclusive: a budget ended before the tests reached their power
    4   model or input error: a file that cannot be read, a bad GGUF, a broken vectors directory,
        a calibration or workload that does not parse
    130 interrupted (Ctrl-C)
    143 terminated (SIGTERM; the programs under test are killed first)

Errors are mapped by the ``exit_category`` each class of reference/errors.py carries (one table:
that module's docstring): "usage" 2, "input" 4, "failed" 1; an ``OSError`` (a file that cannot be
opened or read) is an input error, 4; any other exception is not ours and propagates.
"""

from __future__ import annotations

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
EXIT_INPUT = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C

EPILOG = (
    "exit status: 0 passed, 1 failed, 2 usage error (bad arguments, a verifier that cannot be loaded "
    "or started), 3 inconclusive (a budget ended before power), 4 model/input error (a file that cannot "
    "be read, a bad GGUF, a broken vectors directory), 130 interrupted, 143 terminated"
)


def exit_code_for(error: BaseException) -> int:
    """The exit status of a command that stopped with ``error``."""
    from verispec.reference.errors import exit_category_of

    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    category = exit_category_of(error)
    if category is None:
        return EXIT_INPUT if isinstance(error, OSError) else EXIT_USAGE
    return {"usage": EXIT_USAGE, "input": EXIT_INPUT, "failed": EXIT_FAILED}[category]
