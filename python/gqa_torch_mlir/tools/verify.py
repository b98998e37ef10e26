"""``--verify-diagnostics``, as mlir-opt has it: the diagnostics a chunk emits against its ``expected-*`` comments.

A comment ``// expected-error {{text}}`` expects an error on its own line whose
message contains ``text``; ``@+N`` / ``@-N`` move the line, ``@unknown``
expects one without a file location.  ``expected-warning``,
``expected-remark`` and ``expected-note`` likewise.  Every expected diagnostic
must be emitted and every emitted error, warning or remark must be expected
(notes only when a comment expects them).  Mismatches are reported as mlir-opt
reports them, ``file:line: error: expected ... was not produced`` or
``file:line:col: error: unexpected error: ...``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

_EXPECTED_RE = re.compile(r"expected-(?P<severity>error|warning|remark|note)(?:@(?P<where>[+-]\d+|unknown|above|below))?\s*\{\{(?P<text>.*?)\}\}")
_LINE_RE = re.compile(r'loc\("[^"]*":(?P<line>\d+):(?P<col>\d+)\)')


@dataclass
class Expected:
    severity: str
    line: Optional[int]  # None: @unknown
    text: str
    comment_line: int
    seen: bool = False


@dataclass
class Emitted:
    severity: str
    line: Optional[int]
    col: Optional[int]
    message: str


def expectations(text: str) -> List[Expected]:
    """The ``expected-*`` comments of a chunk, with the (1-based) lines they point at."""
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        for m in _EXPECTED_RE.finditer(line):
            where = m.group("where")
            if where == "unknown":
                target = None
            elif where in ("above", "below"):
                target = number - 1 if where == "above" else number + 1
            else:
                target = number + int(where or 0)
            found.append(Expected(m.group("severity"), target, m.group("text"), number))
    return found


def emitted(diagnostic, severity: Optional[str] = None) -> List[Emitted]:
    """A diagnostic (and its notes) as :class:`Emitted` records."""
    m = _LINE_RE.search(str(diagnostic.location))
    line, col = (int(m.group("line")), int(m.group("col"))) if m else (None, None)
    kind = severity or diagnostic.severity.name.lower()
    records = [Emitted(kind, line, col, str(diagnostic.message))]
    for note in getattr(diagnostic, "notes", []) or []:
        records += emitted(note, "note")
    return records


def verify(text: str, seen: List[Emitted], filename: str) -> List[str]:
    """mlir-opt's report of every mismatch between ``text``'s comments and ``seen`` ([] when they agree)."""
    expected = expectations(text)
    problems: List[Tuple[int, str]] = []
    unique = []
    for diag in seen:  # the same diagnostic may reach the handler and the raised error
        if diag not in unique:
            unique.append(diag)
    for diag in unique:
        match = next((e for e in expected if not e.seen and e.severity == diag.severity and e.line == diag.line and e.text in diag.message), None)
        if match:
            match.seen = True
        elif diag.severity != "note":
            where = f"{filename}:{diag.line}:{diag.col}" if diag.line else filename
            problems.append((diag.line or 0, f"{where}: error: unexpected {diag.severity}: {diag.message}"))
    for e in expected:
        if not e.seen:
            problems.append((e.comment_line, f"{filename}:{e.comment_line}: error: expected {e.severity} \"{e.text}\" was not produced"))
    return [text for _, text in sorted(problems)]
