"""Render MLIR diagnostics the way mlir-opt does: ``file:line:col: error: message``."""

from __future__ import annotations

import re

_FILE_LOC_RE = re.compile(r'loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)\)')


def format_location(loc, filename: str) -> str:
    """``loc("-":4:12)`` -> ``<filename>:4:12``; other locations as MLIR prints them."""
    text = str(loc)
    m = _FILE_LOC_RE.search(text)
    if not m:
        return text
    name = filename if m.group("file") in ("-", "") else m.group("file")
    return f"{name}:{m.group('line')}:{m.group('col')}"


def format_diagnostic(diag, filename: str, severity: str = "error") -> str:
    lines = [f"{format_location(diag.location, filename)}: {severity}: {diag.message}"]
    for note in getattr(diag, "notes", []) or []:
        lines.append(f"{format_location(note.location, filename)}: note: {note.message}")
    return "\n".join(lines)


def format_mlir_error(err, filename: str) -> str:
    """All error diagnostics carried by an ``MLIRError``; its message when it has none."""
    diags = list(getattr(err, "error_diagnostics", []) or [])
    if not diags:
        return f"{filename}: error: {getattr(err, 'message', str(err))}"
    return "\n".join(format_diagnostic(d, filename) for d in diags)
