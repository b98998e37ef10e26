"""Reading large numpy feeds in place on the CPU, as onnxruntime does, instead of uploading a copy.

IREE's local (CPU) devices can wrap host memory as a device buffer
(``HalAllocator.import_host_allocation``): 2 µs for a 4 MiB KV cache, where
a copy takes 200 µs or more. Three things decide whether a feed may be
read in place; any that fails keeps the copy:

* **Alignment.** IREE's llvm-cpu dispatches are compiled for bindings
  aligned to 64 bytes; compiled for 16 (numpy's own guarantee), the attention
  matmuls ran 2-3x slower.  So only a feed whose data starts on a 64-byte
  boundary is imported: arrays this package returns (IREE's buffers) and
  :func:`aligned_empty` arrays are; numpy's large arrays usually sit 16 bytes
  past one.
* **Writes.** A compiled function may write an argument's buffer in place and
  return it: a fixed-capacity cache's new rows go into the past buffer, which
  comes back as present. A user's feed must never change, so each function's
  first call runs on copies that are then checked: an argument whose buffer a
  result shares, or whose values changed, is copied on every later call (a
  result sharing an imported feed's memory would also outlive the import).
* **Size and type.** Floating-point arrays of :data:`MIN_BYTES` or more only
  (smaller ones copy in less time than the checks take; the element types of
  integer and boolean feeds are converted on the way in).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Set

import numpy as np

from iree import runtime as ireert
from iree.runtime.array_interop import map_dtype_to_element_type

__all__ = ["ALIGNMENT", "MIN_BYTES", "InPlaceFeeds", "aligned_empty"]

ALIGNMENT = 64  # bytes: what IREE's CPU dispatches assume of every binding
MIN_BYTES = 64 * 1024

_MEMORY_TYPE = int(ireert.MemoryType.HOST_LOCAL | ireert.MemoryType.DEVICE_VISIBLE)
_USAGE = int(ireert.BufferUsage.DEFAULT)  # IREE's ABI asks storage (read and write) usage of every argument


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary (readable in place)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _large_float(a) -> bool:
    """The feeds worth reading in place (see Size and type above)."""
    return isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.nbytes >= MIN_BYTES


def readable_in_place(a) -> bool:
    return (
        _large_float(a) and a.flags.c_contiguous
        and a.flags.writeable  # IREE's import asks a writable buffer (it only reads it: see above)
        and a.ctypes.data % ALIGNMENT == 0 and map_dtype_to_element_type(a.dtype) is not None
    )


class InPlaceFeeds:
    """Per function of one module: the argument positions read in place, learnt on its first call."""

    def __init__(self, device) -> None:
        self._device = device
        self._copied: Dict[str, Set[int]] = {}  # function -> positions always copied

    def learnt(self, function: str) -> bool:
        return function in self._copied

    def passed(self, function: str, args: Sequence) -> List:
        """``args`` with each one that may be read in place (a function already learnt) as its imported buffer."""
        copied = self._copied[function]
        return [self.imported(a) if i not in copied and readable_in_place(a) else a for i, a in enumerate(args)]

    def imported(self, a: np.ndarray):
        """``a`` as a device array over its own memory, for one call.

        The Python buffer object, not IREE's, holds the reference to ``a``:
        the caller keeps ``a`` alive for the call, and a result may never
        share this memory (which is why written or returned arguments are
        learnt first and copied)."""
        buffer = self._device.allocator.import_host_allocation(a, memory_type=_MEMORY_TYPE, allowed_usage=_USAGE)
        view = ireert.HalBufferView(buffer, a.shape, map_dtype_to_element_type(a.dtype))
        return ireert.DeviceArray(self._device, view)

    def trial_copies(self, args: Sequence) -> Dict[int, object]:
        """For a function's first call: device copies (IREE's own buffers) of the arguments that
        could be read in place, to be checked after the call."""
        return {
            i: ireert.asdevicearray(self._device, a)
            for i, a in enumerate(args) if _large_float(a)
        }

    def learn(self, function: str, args: Sequence, copies: Dict[int, object], results: List) -> None:
        """Which trial copies the call wrote or returned: those positions are copied from now on."""
        mapped = [np.asarray(r.to_host()) for r in results if hasattr(r, "to_host")]
        copied = {i for i in range(len(args)) if i not in copies}
        for i, copy in copies.items():
            after = np.asarray(copy.to_host())
            returned = any(np.may_share_memory(after, m) for m in mapped)
            if returned or not np.array_equal(after, args[i], equal_nan=True):
                copied.add(i)
        self._copied[function] = copied
