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
mapped (with ``share_buffers``, where a result may be fed back, only once a
call did not feed it back, as the attention output, and unless it is an
argument the call wrote in place: a cache fed back stays resident), others
mapped as before.  A copy reads the buffer through its mapping's
(read-only) buffer interface: when the step before evicted the caches,
``np.frombuffer`` and the copy cost a 16 KiB result 35 µs on the AMD guest,
where its mapping (IREE's ``DeviceArray.to_host``), owner and registration
cost 160 µs.  Anything else (a ``DeviceValue``, an
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
from .vm_results import VM_ERRORS, as_dtype, vm_failure

__all__ = ["ELEMENT_TYPES", "FastCalls", "SMALL_RESULT_BYTES", "UPLOAD_MEMORY", "UPLOAD_USAGE", "dtype_of", "invoke_checked", "read_only"]

SMALL_RESULT_BYTES = 64 * 1024  # results copied out rather than mapped (a decode step's attention output: 16 KiB)

UPLOAD_MEMORY = int(ireert.MemoryType.DEVICE_LOCAL)
UPLOAD_USAGE = int(ireert.BufferUsage.DEFAULT)
ELEMENT_TYPES = {  # the numpy element types this path uploads (bool and unsigned ones take the general path)
    np.dtype(t): map_dtype_to_element_type(np.dtype(t))
    for t in (np.float32, np.float16, np.float64, np.int64, np.int32, np.int16, np.int8)
}


class _Plan:
    """One function's VM handle, and per result (all tensors) the dtype the caller wants."""

    def __init__(self, function: str, vm_function, wants: List[Optional[np.dtype]], checks: bool) -> None:
        self.function, self.vm_function, self.wants, self.results = function, vm_function, wants, len(wants)
        self.checks = checks  # the VM returns the run-time checks after the results (runtime.py)
        # With share_buffers: the results whose arrays were fed back to the next call (kept
        # resident), those that were not (copied once small), and the last call's result arrays
        # (by id) with their index.
        self.fed_back, self.not_fed_back, self.last = set(), set(), {}

    def learn_fed_back(self, residents) -> None:
        """Which of the last call's results this call's resident arguments are."""
        fed = {id(host) for _, host in residents}
        for key, i in self.last.items():
            (self.fed_back if key in fed else self.not_fed_back).add(i)
        self.not_fed_back -= self.fed_back

    def kept_resident(self, i: int, ref, passed_refs) -> bool:
        """(share_buffers) Whether small result ``i`` (VM reference ``ref``) stays mapped and
        resident: an argument the call wrote in place, or a result no call is known not to have
        fed back.  Else it is copied out (fed back later, it is uploaded: it is small)."""
        return ref in passed_refs or i not in self.not_fed_back


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
            arg_list, residents, uploaded, passed_refs = packed
            m.uploaded_bytes = uploaded
            ret = invoke_checked(m, plan, arg_list)
            refs = [(device_array._buffer_view.ref, host) for device_array, host in residents]
            if m.share_buffers:
                plan.learn_fed_back(residents)
            results = tuple(self._result(plan, i, ret.get_as_object(i, ireert.HalBufferView), refs, passed_refs)
                            for i in range(plan.results))
            if m.share_buffers:
                plan.last = {id(r): i for i, r in enumerate(results) if not r.flags.owndata}
            return results

    def _plan(self, function: str) -> Optional[_Plan]:
        return self._plans.get(function)

    def learn(self, function: str, results) -> None:
        """After a call on the general path: the function's result count, if all its results are
        tensors (IREE's VM gives no signature without reflection; our modules have none)."""
        if function not in self._plans:
            tensors = all(hasattr(r, "_buffer_view") for r in results)
            vm_function = self._module._invoker(function).vm_function
            wants = [self._module._want_dtype(function, i) for i in range(len(results))]
            checks = self._module.checks(function) is not None
            self._plans[function] = _Plan(function, vm_function, wants, checks) if tensors else None

    def _arguments(self, function: str, args) -> Optional[Tuple[object, List, int, List]]:
        """(the VM's argument list, the resident (device array, host array) pairs, bytes uploaded or
        staged, the VM references of the buffer views passed), or None for the general path."""
        m = self._module
        registry = m._resident if m.share_buffers else None
        in_place = m._in_place
        copied = in_place.copied(function)
        device = m._device
        allocate = device.allocator.allocate_buffer_copy
        arg_list = ireert.VmVariantList(len(args))
        residents: List[Tuple[object, np.ndarray]] = []
        passed_refs = []  # (a result that is one of them was written in place: a cache, kept mapped)
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
                passed_refs.append(device_array._buffer_view.ref)
                continue
            element_type = ELEMENT_TYPES.get(a.dtype)
            if element_type is None or not a.flags.c_contiguous:
                return None
            if a.nbytes >= MIN_BYTES and i not in copied:
                passed = in_place.in_place(function, i, a)
                if passed is not a:  # read in place (an imported buffer, the feed's or its staging copy's)
                    arg_list.push_ref(passed._buffer_view)
                    passed_refs.append(passed._buffer_view.ref)
                    continue
            view = allocate(UPLOAD_MEMORY, UPLOAD_USAGE, device, a, element_type)
            arg_list.push_ref(view)
            passed_refs.append(view.ref)
            uploaded += a.nbytes
        return arg_list, residents, uploaded + in_place.staged_bytes, passed_refs

    def _result(self, plan: _Plan, i: int, view, refs, passed_refs) -> np.ndarray:
        """Result ``i``: the caller's array if it is a resident buffer the call returned (a cache
        updated in place), a copy if small (with ``share_buffers``, unless
        ``plan.kept_resident``), else a mapping of its buffer (registered as resident with
        ``share_buffers``)."""
        ref, want = view.ref, plan.wants[i]
        for resident_ref, host in refs:
            if resident_ref == ref and (want is None or host.dtype == want):
                return host
        m = self._module
        dtype = dtype_of(view.element_type)
        if view.byte_length >= SMALL_RESULT_BYTES or (m.share_buffers and plan.kept_resident(i, ref, passed_refs)):
            mapped = view.map().asarray(view.shape, dtype) if view.byte_length else np.empty(view.shape, dtype)  # writable
            return m._host_result(plan.function, i, ireert.DeviceArray(m._device, view), mapped)
        mapped = read_only(view, dtype)
        if want is not None and dtype != want:
            converted, shared = as_dtype(mapped, want)
            return converted.copy() if shared else converted
        return mapped.copy()


def invoke_checked(module, plan: _Plan, arg_list):
    """The VM's results of ``plan``'s function called on ``arg_list`` (under the module's lock),
    its run-time checks read: a failed call or check raises :class:`RuntimeInvocationError`."""
    ret = ireert.VmVariantList(plan.results + plan.checks)
    try:
        module._context.invoke(plan.vm_function, arg_list, ret)
    except ValueError as e:
        raise RuntimeInvocationError(f"@{plan.function}: {e}") from None
    except VM_ERRORS as e:
        raise RuntimeInvocationError(f"@{plan.function}: {vm_failure(str(e))}") from e
    if plan.checks:
        module.raise_failed_check(plan.function, bytes(ret.get_as_object(plan.results, ireert.HalBufferView).map()))
    return ret


def read_only(view, dtype: np.dtype) -> np.ndarray:
    """The buffer of ``view`` as a read-only array, to be copied (the mapping's buffer interface
    is read-only; the mapping alone does not keep the buffer alive)."""
    if view.byte_length == 0:
        return np.empty(view.shape, dtype)
    return np.frombuffer(view.map(), dtype).reshape(view.shape)


_DTYPES: Dict[object, np.dtype] = {}


def dtype_of(element_type) -> np.dtype:
    dtype = _DTYPES.get(element_type)
    if dtype is None:
        dtype = _DTYPES[element_type] = np.dtype(ireert.HalElementType.map_to_dtype(element_type))
    return dtype
