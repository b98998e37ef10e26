"""What IREE's VM hands back to both call paths (runtime.py, fast_call.py): a failed call's
message, and a result's array as the ONNX output's element type."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

__all__ = ["as_dtype", "vm_failure"]

_FAILED_CHECK = "FAILED_PRECONDITION; "


def vm_failure(report: str) -> str:
    """The part of IREE's report on a failed call that is news to the user.

    A failed ``cf.assert`` (one of our run-time checks) reads
    ``Error invoking function: <vm>:0: FAILED_PRECONDITION; <message>; `` and
    then a listing of the VM stack: the message alone is kept.  Any other
    failure keeps the report's first line.
    """
    first_line = report.strip().split("\n", 1)[0].rstrip()
    if _FAILED_CHECK in first_line:
        message = first_line.split(_FAILED_CHECK, 1)[1].rstrip("; ")
        if message:
            return message
    return first_line


def as_dtype(host: np.ndarray, want: Optional[np.dtype]) -> Tuple[np.ndarray, bool]:
    """``host`` as the ONNX output's dtype, and whether it still shares the result's memory."""
    if want is None or host.dtype == want:
        return host, True
    if want.kind in "iu" and host.dtype.kind in "iu" and want.itemsize == host.dtype.itemsize:
        return host.view(want), True  # signless integers (a uint8 cache comes back as int8): the same bytes
    return host.astype(want), False  # IREE returns i1 as i8: a copy
