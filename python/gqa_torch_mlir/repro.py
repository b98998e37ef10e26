"""Saving a failed stage's input and the one-line command that reruns it.

The command uses ``gqa-torch-mlir-opt``: unlike the wheel's torch-mlir-opt
binary, which registers torch-mlir's passes and only a few of MLIR's, it runs
every pass the Python bindings register, plus ours.
"""

from __future__ import annotations

import os
import shlex
import tempfile

REPRO_TOOL = "gqa-torch-mlir-opt"
REPRO_DIR = os.path.join(tempfile.gettempdir(), "gqa-torch-mlir-repro")


def save_stage_input(stage: str, asm: str) -> str:
    """Write ``asm`` to a fresh file named after ``stage``; return its path."""
    os.makedirs(REPRO_DIR, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=f"{stage}-", suffix=".mlir", dir=REPRO_DIR)
    with os.fdopen(fd, "w") as f:
        f.write(asm)
    return path


def repro_command(stage: str, asm: str, pipeline: str) -> str:
    """Save ``asm`` and return ``gqa-torch-mlir-opt --pass-pipeline=... <file>``.

    ``pipeline`` is a full ``builtin.module(...)`` pipeline, or a bare pass
    flag name such as ``convert-onnx-gqa-to-torch``.
    """
    path = save_stage_input(stage, asm)
    flag = f"--pass-pipeline={shlex.quote(pipeline)}" if "(" in pipeline else f"--{pipeline}"
    return f"{REPRO_TOOL} {flag} {shlex.quote(path)}"
