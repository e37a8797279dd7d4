"""Errors that mean the user's input is wrong (not a gapscope bug): shown as one line, exit 2; and
the one for what failed around the command (a cluster gone): one line, exit 1."""

EXIT_RUN_FAILED = 1  # a run failed, or some runs given could not be read
EXIT_BAD_INPUT = 2
# Measured on a busy machine: no verdict is a fact (check, compare).
EXIT_INCONCLUSIVE = 3


class GapscopeInputError(Exception):
    """Bad path, corrupt or foreign file, unknown name: shown as one line, exit code 2."""


class TraceFormatError(GapscopeInputError):
    """A file exists but is not a trace gapscope can read."""


class UnsupportedVariantError(GapscopeInputError):
    """A variant this device or framework cannot run; refused rather than silently changed."""


class GapscopeRunError(Exception):
    """Something the command relied on failed under it (a cluster's scheduler killed): not the
    input's fault, not a gapscope bug; shown as one line, exit code 1."""
