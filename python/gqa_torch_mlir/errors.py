"""The one exception family the package raises for user-facing failures.

A CLI catches :class:`GqaTorchMlirError` and prints its message (never a
traceback); the Python API lets it propagate so callers can catch one type.
"""


class GqaTorchMlirError(Exception):
    """Base class: the message is complete and user-facing."""


class LoweringError(GqaTorchMlirError):
    """A pattern refused an op, or the plugin pass failed.

    ``diagnostics`` holds one ``"<location>: <reason>"`` string per refused op.
    """

    def __init__(self, message: str, diagnostics=()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)


class CompileStageError(GqaTorchMlirError):
    """A pipeline stage failed.

    ``stage`` names it (e.g. ``"torch-backend-to-linalg-on-tensors"``),
    ``diagnostics`` carries MLIR's messages and ``repro`` a one-line shell
    command that reproduces the failure on a saved input file.
    """

    def __init__(self, stage: str, diagnostics: str, repro: str = ""):
        self.stage = stage
        self.diagnostics = diagnostics
        self.repro = repro
        msg = f"stage '{stage}' failed:\n{diagnostics.rstrip()}"
        if repro:
            msg += f"\nreproduce with:\n  {repro}"
        super().__init__(msg)


class RuntimeInvocationError(GqaTorchMlirError):
    """Inputs given to a compiled function do not fit its signature."""
