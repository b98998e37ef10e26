"""Reading and writing the CLIs' text files: a failure is one user-facing error, never a traceback."""

from __future__ import annotations

import sys

from ..errors import GqaTorchMlirError


def read_text(path: str) -> str:
    """The file's text (``-``: standard input), as UTF-8."""
    try:
        if path == "-":  # bytes: the text stream may escape invalid UTF-8 instead of failing
            return sys.stdin.buffer.read().decode("utf-8")
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise GqaTorchMlirError(f"cannot open input file '{path}': {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise GqaTorchMlirError(f"input file '{path}' is not UTF-8 text (byte {e.start}): MLIR assembly is expected") from None


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (``-``: standard output)."""
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise GqaTorchMlirError(f"cannot write output file '{path}': {e.strerror or e}") from None
