"""What IREE's VM hands back to both call paths (runtime.py, fast_call.py): a failed call's
message, the run-time checks a function returns, and a result's array as the ONNX output's
element type."""

from __future__ import annotations

import json
from typing import List, Optional, Tuple

import numpy as np

from ...deferred_checks import CHECKS_KEY

__all__ = ["as_dtype", "check_messages", "failed_check", "vm_failure"]

_FAILED_CHECK = "FAILED_PRECONDITION; "


# What IREE's Python runtime raises for a call the VM failed, by status: RuntimeError for most,
# IndexError for OUT_OF_RANGE (a command buffer's validation), KeyError for NOT_FOUND,
# OSError for the rest (ValueError, INVALID_ARGUMENT, is the caller's: handled apart).
VM_ERRORS = (RuntimeError, LookupError, OSError)


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


def check_messages(vm_function) -> Optional[List[str]]:
    """The messages of the run-time checks ``vm_function`` returns as its last result (an i1 [K]
    tensor: deferred_checks.py's ``as_result``, named in its reflection), else None."""
    text = vm_function.reflection.get(CHECKS_KEY)
    return None if text is None else list(json.loads(text))


def failed_check(flags: bytes, messages: List[str]) -> Optional[str]:
    """The message of the first check that failed (its flag 0), else None; ``flags`` the returned
    checks' bytes (IREE stores an i1 as a byte).  A count other than the messages' is a failure too.
    Plain bytes: the usual case (all hold) costs a cold call about 2 µs, where numpy's took 30."""
    if 0 not in flags and len(flags) == len(messages):
        return None
    if len(flags) != len(messages):
        return f"the module returned {len(flags)} run-time checks where its reflection names {len(messages)}"
    return messages[flags.index(0)]
