"""Errors that mean the user's input is wrong (not a gapscope bug): shown as one line, exit 2."""


class GapscopeInputError(Exception):
    """Bad path, corrupt or foreign file, unknown name: shown as one line, exit code 2."""


class TraceFormatError(GapscopeInputError):
    """A file exists but is not a trace gapscope can read."""


class UnsupportedVariantError(GapscopeInputError):
    """A variant this device or framework cannot run; refused rather than silently changed."""
