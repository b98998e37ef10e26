"""Reading large numpy feeds in place on the CPU, as onnxruntime does, instead of uploading a copy.

IREE's local (CPU) devices can wrap host memory as a device buffer
(``HalAllocator.import_host_allocation``): 2 µs for a 4 MiB KV cache, where
a copy takes 200 µs or more. Three things decide whether a feed may be
read in place; any that fails keeps the copy:

* **Alignment.** IREE's llvm-cpu dispatches are compiled for bindings
  aligned to 64 bytes; compiled for 16 (numpy's own guarantee), the attention
  matmuls ran 2-3x slower.  So a feed is imported only if its data starts on
  a 64-byte boundary (arrays this package returns, IREE's buffers, and
  :func:`aligned_empty` arrays do; numpy's large arrays usually sit 16 bytes
  past one), or on a 16-byte one where the function's reflection says only
  the fused decode kernel reads it (feed_alignment.py: that kernel is
  compiled for 16, at no cost to its speed).
* **Writes.** A compiled function may write an argument's buffer in place and
  return it: a fixed-capacity cache's new rows go into the past buffer, which
  comes back as present. A user's feed must never change, so each function's
  first call runs on copies that are then checked: an argument whose buffer a
  result shares, or whose values changed, is copied on every later call (a
  result sharing an imported feed's memory would also outlive the import).
* **Size and type.** Floating-point arrays of :data:`MIN_BYTES` or more only
  (smaller ones copy in less time than the checks take; the element types of
  integer and boolean feeds are converted on the way in).

On a device of several worker threads, a feed that may be read in place but
is not aligned enough (or not writable) is copied into a staging array of our own,
aligned, kept per function and argument and reused call after call, which is
then read in place: the copy is split over as many threads (numpy's copy
releases the GIL), where IREE's upload copies on one (a numpy-fed growing
step at past 4095 on 2 threads of an Intel Xeon: 0.97x-1.06x onnxruntime ->
0.74x-0.83x; no change at past 1023 or on 1 thread, which keeps IREE's
upload: benchmarks/README.md, "CPU, round 9").  A growing cache's staging
array grows by a quarter at a time, so that its pages are not touched fresh
every step.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import numpy as np

from iree import runtime as ireert
from iree.runtime.array_interop import map_dtype_to_element_type

from . import feed_alignment

__all__ = ["ALIGNMENT", "LENIENT_ALIGNMENT", "MIN_BYTES", "InPlaceFeeds", "aligned_empty"]

ALIGNMENT = 64  # bytes: what IREE's CPU dispatches assume of every binding
LENIENT_ALIGNMENT = feed_alignment.LENIENT  # bytes: where only the fused decode kernel reads an argument
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


def readable_in_place(a, alignment: int = ALIGNMENT) -> bool:
    return (
        stageable(a)
        and a.flags.writeable  # IREE's import asks a writable buffer (it only reads it: see above)
        and a.ctypes.data % alignment == 0
    )


def stageable(a) -> bool:
    """A feed worth reading in place, from its own memory or from a staging array."""
    return _large_float(a) and a.flags.c_contiguous and map_dtype_to_element_type(a.dtype) is not None


class _Staging:
    """An aligned array of at least the bytes asked, kept and regrown by a quarter when too small."""

    def __init__(self) -> None:
        self._raw: Optional[np.ndarray] = None

    def view(self, shape, dtype) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if self._raw is None or self._raw.nbytes < nbytes:
            grown = 0 if self._raw is None else self._raw.nbytes + self._raw.nbytes // 4
            self._raw = aligned_empty((max(nbytes, grown),), np.uint8)
        return self._raw[:nbytes].view(dtype).reshape(shape)


_POOLS: Dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _copy_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` copying threads (shared by every module)."""
    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="gqa-staging")
        return _POOLS[threads]


def copy_split(dst: np.ndarray, src: np.ndarray, pool: Optional[ThreadPoolExecutor], parts: int) -> None:
    """``dst[...] = src`` (both C-contiguous), in ``parts`` pieces: all but the last on ``pool``."""
    dst_flat, src_flat = dst.reshape(-1), src.reshape(-1)
    bounds = [dst_flat.size * k // parts for k in range(parts + 1)]
    pieces = [(dst_flat[lo:hi], src_flat[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]
    pending = [pool.submit(np.copyto, d, s) for d, s in pieces[:-1]] if pool is not None else []
    for d, s in pieces[len(pending):]:
        np.copyto(d, s)
    for f in pending:
        f.result()


class InPlaceFeeds:
    """Per function of one module: the argument positions read in place, learnt on its first call."""

    def __init__(self, device, copy_threads: int = 1) -> None:
        self._device = device
        self._copied: Dict[str, Set[int]] = {}  # function -> positions always copied
        self._at_16: Dict[str, FrozenSet[int]] = {}  # function -> positions its code reads at 16 bytes
        self._staging: Dict[Tuple[str, int], _Staging] = {}  # (function, position) -> its staging array
        self._parts = max(1, copy_threads)
        self._pool = _copy_pool(self._parts - 1) if self._parts > 1 else None
        self.staged_bytes = 0  # bytes the last call copied into staging arrays

    def learnt(self, function: str) -> bool:
        return function in self._copied

    def copied(self, function: str) -> Set[int]:
        """The positions of ``function``'s arguments that are always copied (learnt on its first call)."""
        return self._copied[function]

    def passed(self, function: str, args: Sequence) -> List:
        """``args`` with each one that may be read in place (a function already learnt) as its imported buffer."""
        copied = self._copied[function]
        self.staged_bytes = 0
        return [a if i in copied else self.in_place(function, i, a) for i, a in enumerate(args)]

    def importable(self, function: str, i: int, a) -> bool:
        """Whether argument ``i`` of ``function`` may be ``a``'s own memory (aligned enough for its code)."""
        return readable_in_place(a, LENIENT_ALIGNMENT if i in self._at_16.get(function, ()) else ALIGNMENT)

    def in_place(self, function: str, i: int, a):
        """``a`` read in place: from its own memory, or copied into its staging array; else ``a``."""
        if self.importable(function, i, a):
            return self.imported(a)
        if self._pool is None or not stageable(a):  # one thread: IREE's upload copies as fast
            return a
        staging = self._staging.setdefault((function, i), _Staging()).view(a.shape, a.dtype)
        copy_split(staging, a, self._pool, self._parts)
        self.staged_bytes += a.nbytes
        return self.imported(staging)

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

    def learn(self, function: str, args: Sequence, copies: Dict[int, object], results: List,
              at_16: FrozenSet[int] = frozenset()) -> None:
        """Which trial copies the call wrote or returned: those positions are copied from now on.
        ``at_16``: the positions the function's code reads at 16-byte alignment (feed_alignment.py)."""
        self._at_16[function] = at_16
        mapped = [np.asarray(r.to_host()) for r in results if hasattr(r, "to_host")]
        copied = {i for i in range(len(args)) if i not in copies}
        for i, copy in copies.items():
            after = np.asarray(copy.to_host())
            returned = any(np.may_share_memory(after, m) for m in mapped)
            if returned or not np.array_equal(after, args[i], equal_nan=True):
                copied.add(i)
        self._copied[function] = copied
