"""A call whose arguments were bound once (``InferenceSession.io_binding``) on the CPU: packed once, not per call.

onnxruntime's generation loops bind their inputs and outputs once (IO
binding) and then only run.  ``run`` with a dict of feeds re-reads the dict,
checks each feed, looks up resident buffers and uploads the small feeds on
every call: on the AMD guest, 2 threads, a shared decode step at past 1023
took 423 µs through ``run`` against 325 µs bound, and 718 against 599 µs when
a 64 MiB read between calls had evicted the interpreter's data
(benchmarks/README.md, "CPU, round 25").

Each bound argument is, for every call of the binding:

* a resident array (``share_buffers``: an array this module returned): its
  device buffer, as the lean path passes it (fast_call.py);
* a large feed the function neither writes nor returns, in memory aligned for
  the compiled code: imported once (host_import.py) and read in place;
* anything else: a device buffer of ours, allocated once, into which the
  array's current values are copied before each call.

The arguments' VM list is packed once.  A result that comes back in one of
our copy buffers (an argument updated in place and returned, not resident)
is copied out, and that argument is uploaded fresh on later calls instead,
so that no array handed out is overwritten by the next call.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Set, Tuple

import numpy as np

from iree import runtime as ireert

from .fast_call import ELEMENT_TYPES, SMALL_RESULT_BYTES, UPLOAD_MEMORY, UPLOAD_USAGE, dtype_of, invoke_checked, read_only
from .host_import import MIN_BYTES
from .vm_results import as_dtype

__all__ = ["BoundCall"]


class BoundCall:
    """``function``'s call with ``args`` (numpy arrays, as ``invoke`` takes them) packed once.

    Build it with :meth:`of`, which returns None where the lean path would not take these
    arguments (the caller then calls ``invoke`` each time)."""

    def __init__(self, module, function: str, plan, args: Sequence[np.ndarray], wanted: Sequence[int]) -> None:
        self._module, self._function, self._plan = module, function, plan
        self._wanted = sorted(set(wanted))  # the results read back (the others are not looked at)
        self._args = list(args)  # kept alive: imported ones are read in place
        self._views: List[object] = []  # per argument, the buffer view passed
        self._copies: List[Tuple[int, np.ndarray, np.ndarray]] = []  # (position, device mapping, host array)
        self._residents: List[Tuple[object, np.ndarray]] = []  # (VM reference, the caller's array)
        self._fresh: Set[int] = set()  # positions uploaded afresh each call (a result came back in their buffer)
        copied = module._in_place.copied(function)
        for i, a in enumerate(self._args):
            self._views.append(self._view(i, a, i in copied))
        self._own = [(self._views[i].ref, i) for i, _, _ in self._copies]  # VM references compare by ==, not by hash
        self._refresh = [(device, host) for _, device, host in self._copies]
        self.copied_bytes = sum(host.nbytes for _, host in self._refresh)
        self._arg_list = self._packed()

    @classmethod
    def of(cls, module, function: str, args: Sequence, wanted: Sequence[int]) -> Optional["BoundCall"]:
        """The bound call returning results ``wanted`` (indices; None in the others' places), or None:
        the function has not run yet (the lean path learns it on the first call), or an argument is
        not a C-contiguous, non-empty array of a type it uploads."""
        fast = module._fast
        plan = fast._plan(function) if fast is not None else None
        if plan is None or not module._in_place.learnt(function):
            return None
        for a in args:
            if type(a) is not np.ndarray or a.size == 0:
                return None
            if _resident(module, a) is None and (a.dtype not in ELEMENT_TYPES or not a.flags.c_contiguous):
                return None
        if _overlapping(module, args):
            return None
        return cls(module, function, plan, args, wanted)

    def _view(self, i: int, a: np.ndarray, always_copied: bool):
        m = self._module
        device_array = _resident(m, a)
        if device_array is not None:
            self._residents.append((device_array._buffer_view.ref, a))
            return device_array._buffer_view
        if a.nbytes >= MIN_BYTES and not always_copied and m._in_place.importable(self._function, i, a):
            return m._in_place.imported(a)._buffer_view
        view = m._device.allocator.allocate_buffer_copy(UPLOAD_MEMORY, UPLOAD_USAGE, m._device, a, ELEMENT_TYPES[a.dtype])
        self._copies.append((i, view.map().asarray(a.shape, a.dtype), a))
        return view

    def _packed(self):
        arg_list = ireert.VmVariantList(len(self._views))
        for view in self._views:
            arg_list.push_ref(view)
        return arg_list

    def __call__(self) -> List[Optional[np.ndarray]]:
        m, plan = self._module, self._plan
        with m._lock:
            if self._fresh:
                arg_list = self._refreshed()
            else:
                for device, host in self._refresh:
                    np.copyto(device, host)
                arg_list = self._arg_list
            m.uploaded_bytes = self.copied_bytes
            ret = invoke_checked(m, plan, arg_list)
            results = [None] * plan.results
            for i in self._wanted:
                results[i] = self._result(i, ret.get_as_object(i, ireert.HalBufferView))
            return results

    def _refreshed(self):
        """The VM's arguments once a position is uploaded afresh: the others' copies refreshed."""
        m, copied = self._module, 0
        for i, device, host in self._copies:
            if i in self._fresh:
                self._views[i] = m._device.allocator.allocate_buffer_copy(
                    UPLOAD_MEMORY, UPLOAD_USAGE, m._device, host, ELEMENT_TYPES[host.dtype])
            else:
                np.copyto(device, host)
            copied += host.nbytes
        self.copied_bytes = copied
        return self._packed()

    def _result(self, i: int, view) -> np.ndarray:
        """Result ``i``: the caller's array for a resident argument returned (a cache updated in
        place), a copy of a small one or of one in our copy buffers, else a mapping of its buffer
        (registered as resident with ``share_buffers``), as the lean path returns them."""
        ref, want = view.ref, self._plan.wants[i]
        for resident_ref, host in self._residents:
            if resident_ref == ref and (want is None or host.dtype == want):
                return host
        m = self._module
        dtype = dtype_of(view.element_type)
        own = next((j for own_ref, j in self._own if own_ref == ref), None)
        if own is not None and own not in self._fresh:
            self._fresh.add(own)  # the next call's copy would overwrite this result: upload afresh from now on
        elif view.byte_length >= SMALL_RESULT_BYTES:
            mapped = view.map().asarray(view.shape, dtype)
            return m._host_result(self._function, i, ireert.DeviceArray(m._device, view), mapped)
        converted, shared = as_dtype(read_only(view, dtype), want)
        return converted.copy() if shared else converted


def _resident(module, a: np.ndarray):
    return module._resident.device_array_of(a) if module.share_buffers else None


def _overlapping(module, args: Sequence[np.ndarray]) -> bool:
    """Whether a view among ``args`` shares memory with a resident one (passed once per call:
    the general path copies it)."""
    residents = [a for a in args if _resident(module, a) is not None]
    return any(a.base is not None and _resident(module, a) is None and any(np.may_share_memory(a, r) for r in residents)
               for a in args)
