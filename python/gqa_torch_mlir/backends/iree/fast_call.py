"""The lean path of a call on the CPU once a function has run: what a decode step pays besides its dispatches.

A decode step's fixed cost was mostly Python, and much more so when the step
before had evicted the interpreter's data from the caches, as a model's other
layers do: on the AMD guest a past-15 shared step took 80 µs warm and 480 µs
cold (64 MiB read between calls) in ``InferenceSession.run``, where the VM call
itself took 18 and 98 µs, and onnxruntime's whole step 40 and 184 µs
(benchmarks/README.md, "CPU, round 17").  The general path goes through
IREE's ``FunctionInvoker`` (a Python wrapper per result) and maps, wraps and
registers every result.

This path takes the common case in one loop: numpy arguments, each a resident
buffer (``share_buffers``), a large feed read in place (host_import.py) or an
upload through the allocator; the VM function called directly; results read
as buffer views, a cache fed back returned as the caller's array as before,
a small result (under :data:`SMALL_RESULT_BYTES`) copied out instead of
mapped unless ``share_buffers`` (where any result may be fed back), others
mapped as before.  Anything else (a ``DeviceValue``, an
array that is not C-contiguous or of another element type, an argument whose
memory overlaps a resident one's, a function with a result that is not a tensor)
returns None *before* the call, and the general path runs.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from iree import runtime as ireert
from iree.runtime.array_interop import map_dtype_to_element_type

from ...errors import RuntimeInvocationError
from .host_import import MIN_BYTES
from .vm_results import as_dtype, vm_failure

__all__ = ["FastCalls", "SMALL_RESULT_BYTES"]

SMALL_RESULT_BYTES = 64 * 1024  # results copied out rather than mapped (a decode step's attention output: 16 KiB)

_UPLOAD_MEMORY = int(ireert.MemoryType.DEVICE_LOCAL)
_UPLOAD_USAGE = int(ireert.BufferUsage.DEFAULT)
_ELEMENT_TYPES = {  # the numpy element types this path uploads (bool and unsigned ones take the general path)
    np.dtype(t): map_dtype_to_element_type(np.dtype(t))
    for t in (np.float32, np.float16, np.float64, np.int64, np.int32, np.int16, np.int8)
}


class _Plan:
    """One function's VM handle, and per result (all tensors) the dtype the caller wants."""

    def __init__(self, vm_function, wants: List[Optional[np.dtype]]) -> None:
        self.vm_function, self.wants, self.results = vm_function, wants, len(wants)


class FastCalls:
    """The lean path of one :class:`~.runtime.IreeCompiledModule` (CPU only)."""

    def __init__(self, module) -> None:
        self._module = module
        self._plans: Dict[str, Optional[_Plan]] = {}

    def call(self, function: str, args) -> Optional[Tuple[np.ndarray, ...]]:
        """``module.invoke(function, *args)`` when this path takes it, else None (nothing done)."""
        m = self._module
        plan = self._plan(function)
        if plan is None or not m._in_place.learnt(function):
            return None
        with m._lock:
            packed = self._arguments(function, args)
            if packed is None:
                return None
            arg_list, residents, uploaded = packed
            m.uploaded_bytes = uploaded
            ret = ireert.VmVariantList(plan.results)
            try:
                m._context.invoke(plan.vm_function, arg_list, ret)
            except ValueError as e:
                raise RuntimeInvocationError(f"@{function}: {e}") from None
            except RuntimeError as e:
                raise RuntimeInvocationError(f"@{function}: {vm_failure(str(e))}") from e
            refs = [(device_array._buffer_view.ref, host) for device_array, host in residents]
            return tuple(self._result(function, i, ret.get_as_object(i, ireert.HalBufferView), refs, want)
                         for i, want in enumerate(plan.wants))

    def _plan(self, function: str) -> Optional[_Plan]:
        return self._plans.get(function)

    def learn(self, function: str, results) -> None:
        """After a call on the general path: the function's result count, if all its results are
        tensors (IREE's VM gives no signature without reflection; our modules have none)."""
        if function not in self._plans:
            tensors = all(hasattr(r, "_buffer_view") for r in results)
            vm_function = self._module._invoker(function).vm_function
            wants = [self._module._want_dtype(function, i) for i in range(len(results))]
            self._plans[function] = _Plan(vm_function, wants) if tensors else None

    def _arguments(self, function: str, args) -> Optional[Tuple[object, List, int]]:
        """(the VM's argument list, the resident (device array, host array) pairs, bytes uploaded or
        staged), or None for the general path."""
        m = self._module
        registry = m._resident if m.share_buffers else None
        in_place = m._in_place
        copied = in_place.copied(function)
        device = m._device
        allocate = device.allocator.allocate_buffer_copy
        arg_list = ireert.VmVariantList(len(args))
        residents: List[Tuple[object, np.ndarray]] = []
        uploaded = 0
        in_place.staged_bytes = 0
        for i, a in enumerate(args):
            if type(a) is not np.ndarray:
                return None
            if a.base is not None:  # a view may overlap a resident buffer, passed once per call: the general path copies
                for _, host in residents:
                    if np.may_share_memory(a, host):
                        return None
            device_array = registry.device_array_of(a) if registry is not None else None
            if device_array is not None:
                residents.append((device_array, a))
                arg_list.push_ref(device_array._buffer_view)
                continue
            element_type = _ELEMENT_TYPES.get(a.dtype)
            if element_type is None or not a.flags.c_contiguous:
                return None
            if a.nbytes >= MIN_BYTES and i not in copied:
                passed = in_place.in_place(function, i, a)
                if passed is not a:  # read in place (an imported buffer, the feed's or its staging copy's)
                    arg_list.push_ref(passed._buffer_view)
                    continue
            arg_list.push_ref(allocate(_UPLOAD_MEMORY, _UPLOAD_USAGE, device, a, element_type))
            uploaded += a.nbytes
        return arg_list, residents, uploaded + in_place.staged_bytes

    def _result(self, function: str, i: int, view, refs, want: Optional[np.dtype]) -> np.ndarray:
        """Result ``i``: the caller's array if it is a resident buffer the call returned (a cache
        updated in place), a copy if small, else the module's mapping of its buffer."""
        if refs:
            ref = view.ref
            for resident_ref, host in refs:
                if resident_ref == ref and (want is None or host.dtype == want):
                    return host
        m = self._module
        if m.share_buffers or view.byte_length >= SMALL_RESULT_BYTES:  # (shared: a result may be fed back)
            return m._host_result(function, i, ireert.DeviceArray(m._device, view))
        mapped = view.map().asarray(view.shape, _dtype_of(view.element_type))
        if want is not None and mapped.dtype != want:
            converted, shared = as_dtype(mapped, want)
            return np.array(converted) if shared else converted
        return np.array(mapped)


_DTYPES: Dict[object, np.dtype] = {}


def _dtype_of(element_type) -> np.dtype:
    dtype = _DTYPES.get(element_type)
    if dtype is None:
        dtype = _DTYPES[element_type] = np.dtype(ireert.HalElementType.map_to_dtype(element_type))
    return dtype
