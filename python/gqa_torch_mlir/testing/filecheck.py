"""FileCheck from pytest: the ``filecheck`` of this Python's environment (the test extra) over a text."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

FILECHECK = os.path.join(os.path.dirname(sys.executable), "filecheck")


def filecheck(text: str, checks: str, tmp_path: pathlib.Path, prefix: str = "CHECK") -> None:
    """Assert that ``text`` passes the (dedented) ``checks`` under ``prefix``; on failure the message
    holds FileCheck's report and the input."""
    check_file = tmp_path / f"{prefix}.checks"
    check_file.write_text(textwrap.dedent(checks))
    proc = subprocess.run([FILECHECK, str(check_file), "--check-prefix", prefix], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, f"FileCheck --check-prefix {prefix} failed:\n{proc.stdout}{proc.stderr}\n--- input ---\n{text}"
