"""The run side of the IREE backends: a VM flatbuffer loaded on an IREE device, invoked with numpy arrays.

Needs only ``iree.runtime`` (iree-base-runtime) and numpy, so a module compiled
on one host (``gqa-torch-mlir compile --backend iree-cuda -o model.vmfb``) runs
on another that has no compiler.

Devices are process-wide, with IREE's caching allocator: the CPU's
``local-sync`` (one thread) and ``local-task`` (a worker pool, one per process:
see :func:`device_for`), and the CUDA driver's default device.  Results are
numpy views of their own device buffers where the device memory is host
visible (the CPU), each keeping its buffer alive; on a GPU, host copies.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import List, Optional, Sequence, Tuple

import numpy as np

from iree import runtime as ireert

from ...errors import GqaTorchMlirError, RuntimeInvocationError
from .bound_call import BoundCall
from .fast_call import FastCalls
from .feed_alignment import feeds_at_16
from .host_import import InPlaceFeeds
from .vm_results import VM_ERRORS, as_dtype, check_messages, failed_check, vm_failure

__all__ = ["DeviceValue", "IreeCompiledModule", "available_cpus", "device_for", "local_task_workers"]

# IREE's runtime keeps its devices (and drivers) for the life of the process; at
# interpreter exit nanobind would list them as leaks. They are not.
ireert._binding.disable_leak_checker()

_DEVICE_LOCK = threading.Lock()
_SYNC_DEVICE = None
_TASK_DEVICE = None
_DRIVER_DEVICES = {}  # driver name -> its default device (cuda)
_TASK_WORKERS: Optional[int] = None


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_task_workers() -> Optional[int]:
    """Worker count of this process's local-task device, None before it exists."""
    return _TASK_WORKERS


def device_for(threads: Optional[int], driver: str = "local"):
    """The process-wide IREE device of ``driver``: for "local", by ``threads`` (see :class:`IreeBackend`)."""
    global _SYNC_DEVICE, _TASK_DEVICE, _TASK_WORKERS
    if driver != "local":
        return _driver_device(driver)
    with _DEVICE_LOCK:
        if threads == 1:
            if _SYNC_DEVICE is None:
                _SYNC_DEVICE = ireert.get_driver("local-sync").create_default_device(allocators=["caching"])
            return _SYNC_DEVICE
        workers = threads if threads is not None else available_cpus()
        if _TASK_DEVICE is None:
            # Read once, when the (process-cached) local-task driver is created.
            ireert.flags.parse_flags(f"--task_topology_group_count={workers}")
            _TASK_DEVICE = ireert.get_driver("local-task").create_default_device(allocators=["caching"])
            _TASK_WORKERS = workers
        elif workers != _TASK_WORKERS:
            raise GqaTorchMlirError(
                f"iree-cpu: threads={workers} was asked for, but this process's local-task device already has "
                f"{_TASK_WORKERS} workers (IREE's Python runtime creates one local-task driver per process); "
                "use that count, or threads=1"
            )
        return _TASK_DEVICE


def _driver_device(driver: str):
    with _DEVICE_LOCK:
        if driver not in _DRIVER_DEVICES:
            try:
                _DRIVER_DEVICES[driver] = ireert.get_driver(driver).create_default_device(allocators=["caching"])
            except (RuntimeError, ValueError) as e:
                raise GqaTorchMlirError(f"IREE's {driver} driver has no device here: {str(e).strip().splitlines()[0]}") from None
        return _DRIVER_DEVICES[driver]


class IreeCompiledModule:
    """A VM flatbuffer loaded on an IREE device (``driver``: "local" for the CPU, or "cuda");
    ``invoke`` as the refbackend's.

    Calls on one compiled module are serialised by a lock.
    """

    def __init__(
        self, vmfb: bytes, function: str, output_dtypes: Sequence[np.dtype], threads: Optional[int], share_buffers: bool = False,
        driver: str = "local", specialized: Sequence[str] = (),
    ) -> None:
        self.vmfb = vmfb
        self.function = function
        self.specialized = list(specialized)  # the model's functions with dims fixed (specialize.py): same results
        self.threads = threads
        self.driver = driver
        self.share_buffers = share_buffers
        self.uploaded_bytes = 0  # host bytes copied to the device by the last call
        self._resident = _ResidentArrays()
        self._output_dtypes = list(output_dtypes)
        self._device = device_for(threads, driver)
        self._instance = ireert.VmInstance()
        hal = ireert.create_hal_module(self._instance, self._device)
        self._module = ireert.VmModule.copy_buffer(self._instance, vmfb)
        self._context = ireert.VmContext(self._instance, modules=[hal, self._module])
        self._invokers = {}
        self._checks = {}  # function -> its returned checks' messages, or None
        self._lock = threading.Lock()
        # Large numpy feeds read in place on the CPU, unaligned ones from a staging copy (host_import.py);
        # device memory elsewhere.
        workers = 1 if threads == 1 else local_task_workers()
        self._in_place = InPlaceFeeds(self._device, copy_threads=workers or 1) if driver == "local" else None
        self._fast = FastCalls(self) if driver == "local" else None  # once a function has run (fast_call.py)

    @property
    def device_name(self) -> str:
        if self.driver != "local":
            return self.driver
        return "local-sync" if self.threads == 1 else "local-task"

    def functions(self) -> List[str]:
        """The module's synchronous entry points (IREE adds ``$async`` twins and ``__init``)."""
        return [f for f in self._module.function_names if "$" not in f and not f.startswith("__")]

    def _invoker(self, function: str):
        invoker = self._invokers.get(function)
        if invoker is None:
            fn = self._module.lookup_function(function) if function in self.functions() else None
            if fn is None:
                raise RuntimeInvocationError(f"no public function @{function}; the module has: {', '.join(self.functions())}")
            invoker = self._invokers[function] = ireert.FunctionInvoker(self._context, self._device, fn)
        return invoker

    def checks(self, function: str) -> Optional[List[str]]:
        """The messages of the run-time checks ``function`` returns as its last result (the
        iree-cpu backend's modules: deferred_checks.py), else None.  That result is read after
        each call and dropped: a failed check raises :class:`RuntimeInvocationError`."""
        if function not in self._checks:
            self._checks[function] = check_messages(self._invoker(function).vm_function)
        return self._checks[function]

    def raise_failed_check(self, function: str, flags: bytes) -> None:
        failed = failed_check(flags, self._checks[function])
        if failed is not None:
            raise RuntimeInvocationError(f"@{function}: {failed}")

    def invoke(self, function: str, *args: np.ndarray) -> Tuple[np.ndarray, ...]:
        """Call ``function``; the results are always a tuple of numpy arrays.

        With ``share_buffers``, an argument that is an array this module
        returned is passed as the device buffer behind it (no upload), and the
        call may update that buffer in place: IREE writes a fixed-capacity
        cache's new rows into the past buffer and returns it as present.

        A call the VM fails raises :class:`RuntimeInvocationError`: a failed
        run-time check with just its message (IREE stops at the first one).
        """
        done = self._fast.call(function, args) if self._fast is not None else None
        if done is not None:
            return done
        results, residents = self._call(function, args)
        fed_back = [_fed_back(function, i, r, residents, self._want_dtype) for i, r in enumerate(results)]
        return tuple(self._host_result(function, i, r) if f is None else f for i, (r, f) in enumerate(zip(results, fed_back)))

    def bound(self, function: str, args, wanted) -> Optional["BoundCall"]:
        """``function``'s call on ``args`` packed once, reading back the results ``wanted`` (an IO
        binding's runs, CPU only: bound_call.py), or None where it cannot be (not yet run once, or
        arguments the lean path does not take)."""
        return BoundCall.of(self, function, args, wanted) if self._fast is not None else None

    def invoke_device(self, function: str, *args) -> Tuple["DeviceValue", ...]:
        """Call ``function`` and keep the results on the device (no copy to the host): each a
        :class:`DeviceValue`, which a later call takes as an argument without an upload."""
        return tuple(DeviceValue(r, self._want_dtype(function, i)) for i, r in enumerate(self._call(function, args)[0]))

    def to_device(self, array: np.ndarray) -> "DeviceValue":
        """A copy of ``array`` in this module's device memory."""
        host = np.require(array, requirements="C")  # (ascontiguousarray would make a scalar 1-d)
        return DeviceValue(ireert.asdevicearray(self._device, host.view(np.int8) if host.dtype == np.uint8 else host), host.dtype)

    def _call(self, function: str, args) -> tuple:
        """(the results, the resident arguments as (device array, the caller's host array) pairs)."""
        invoker = self._invoker(function)
        hosts, residents = self._arguments(args)
        arrays, trial = hosts, {}
        with self._lock:
            learning = self._in_place is not None and not self._in_place.learnt(function)
            if learning:  # the first call: on copies, to learn what may be read in place
                trial = self._in_place.trial_copies(hosts)
                arrays = [trial.get(i, a) for i, a in enumerate(hosts)]
            elif self._in_place is not None:
                arrays = self._in_place.passed(function, hosts)
            self.uploaded_bytes = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
            self.uploaded_bytes += sum(hosts[i].nbytes for i in trial)
            self.uploaded_bytes += self._in_place.staged_bytes if self._in_place is not None and not learning else 0
            try:
                results = invoker(*arrays)
            except ValueError as e:
                raise RuntimeInvocationError(f"@{function}: {e}") from None
            except VM_ERRORS as e:  # the VM failed the call: keep IREE's whole report as the cause
                raise RuntimeInvocationError(f"@{function}: {vm_failure(str(e))}") from e
            results = results if isinstance(results, tuple) else (results,)
            if self.checks(function) is not None:  # the function's run-time checks, returned last
                results, flags = results[:-1], results[-1]
                self.raise_failed_check(function, bytes(flags._buffer_view.map()))
            if self._fast is not None:
                self._fast.learn(function, results)
            if learning:
                self._in_place.learn(function, hosts, trial, list(results), feeds_at_16(invoker.vm_function))
        return results, residents

    def resident(self, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` on the device, as a host view ``invoke`` passes without an upload (share_buffers)."""
        if not self.share_buffers:
            raise GqaTorchMlirError("resident arrays need share_buffers=True")
        device_array = ireert.asdevicearray(self._device, np.ascontiguousarray(array))
        host = device_array.to_host()
        self._resident.remember(host, device_array)
        return host

    def _arguments(self, args) -> Tuple[list, list]:
        """Device arrays for the resident arguments (share_buffers), host arrays for the rest; and the
        resident host arrays passed, as (device array, host array) pairs.

        A resident buffer is passed once per call: the call may write it in
        place, so an argument overlapping one already passed (the same cache fed
        as past_key and past_value) is uploaded as a copy of its values instead.
        """
        passed, shared, residents = [], [], []
        for a in args:
            if isinstance(a, DeviceValue):  # a result kept on the device: passed as it is
                passed.append(a.device_array if all(a is not b for b in shared) else a.numpy())
                shared.append(a)
                continue
            device_array = self._resident.device_array_of(a) if self.share_buffers else None
            overlaps = any(isinstance(b, np.ndarray) and np.may_share_memory(a, b) for b in shared)
            if device_array is not None and not overlaps:
                shared.append(a)
                passed.append(device_array)
                residents.append((device_array, a))
            else:
                passed.append(np.array(a) if overlaps else _host_argument(a))
        return passed, residents

    def _want_dtype(self, function: str, i: int) -> Optional[np.dtype]:
        if (function == self.function or function in self.specialized) and i < len(self._output_dtypes):
            return np.dtype(self._output_dtypes[i])
        return None

    def _host_result(self, function: str, i: int, r, mapped: Optional[np.ndarray] = None) -> np.ndarray:
        # A mapping of the result's own device buffer, which the array keeps alive
        # (no copy on the CPU: fresh multi-MB host arrays cost page faults on every call).
        # ``mapped``: the caller's mapping of the buffer of ``r`` (a DeviceArray), if it made one.
        host = mapped if mapped is not None else np.asarray(r.to_host() if hasattr(r, "to_host") else r)
        host, shared = as_dtype(host, self._want_dtype(function, i))
        if not shared:
            return host
        if hasattr(r, "to_host"):
            host = np.asarray(_KeepsDeviceArray(host, r))
        if self.share_buffers and hasattr(r, "to_host"):
            self._resident.remember(host, r)
        return host


def _fed_back(function: str, i: int, result, residents, want_dtype) -> Optional[np.ndarray]:
    """The caller's own array for a result that is the buffer of a resident argument (a cache
    updated in place: IREE returns the buffer view it was given), else None.

    No new mapping of the buffer, wrapper or registry entry per call: those
    were a third of a small decode step's Python time (benchmarks/README.md,
    "CPU, round 5").  Compared by the buffer view's VM reference, through the
    DeviceArray's ``_buffer_view`` (IREE's Python runtime has no public
    accessor); without one, the result is mapped as any other.
    """
    view = getattr(result, "_buffer_view", None)
    if view is None or not residents:
        return None
    ref, want = view.ref, want_dtype(function, i)
    for device_array, host in residents:
        if device_array._buffer_view.ref == ref and (want is None or host.dtype == want):
            return host
    return None


class DeviceValue:
    """A result kept in device memory (onnxruntime's OrtValue, for IREE): ``numpy()`` copies it to
    the host; fed to a later call of the same device, it is passed without an upload."""

    def __init__(self, device_array, dtype: Optional[np.dtype] = None) -> None:
        self.device_array = device_array
        self.shape = tuple(device_array.shape)
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(device_array.dtype)

    def numpy(self) -> np.ndarray:
        return np.array(as_dtype(np.asarray(self.device_array.to_host()), self.dtype)[0])

    def __repr__(self) -> str:
        return f"DeviceValue(shape={self.shape}, dtype={self.dtype})"


def _host_argument(a):
    return np.ascontiguousarray(a) if np.ndim(a) else np.asarray(a)


class _KeepsDeviceArray:
    """The owner of a mapped result's memory as NumPy sees it (every view's ``base``).

    The mapping IREE hands out does not keep its device buffer alive: once the
    DeviceArray was gone, a view of the result (``logits[:, -1]``) kept only
    the mapping and read memory later calls had reused.  Holding the
    DeviceArray here ties the buffer's life to the last view of it; holding
    the host array too keeps a GPU result's host copy (``to_host`` copies
    device-local memory into an array of its own) alive as long.
    """

    def __init__(self, host: np.ndarray, device_array) -> None:
        self._device_array, self._host = device_array, host
        self.__array_interface__ = host.__array_interface__


class _ResidentArrays:
    """The host views ``invoke`` handed out, each with the device array it maps.

    Keyed by the view's identity and held weakly: an entry lives as long as
    the caller keeps the array, so feeding it back finds its device buffer.
    """

    def __init__(self) -> None:
        self._by_id = {}

    def remember(self, host: np.ndarray, device_array) -> None:
        key, owner = id(host), weakref.ref(self)

        def forget(_ref, key=key, owner=owner):
            registry = owner()
            if registry is not None:
                registry._by_id.pop(key, None)

        # The callback holds this registry weakly: a cycle through it would leave the
        # device arrays to the cyclic GC, which may free them after the IREE device
        # and instance (a segfault at interpreter exit).
        self._by_id[key] = (weakref.ref(host, forget), device_array)

    def device_array_of(self, array):
        """The device array behind ``array``: a view handed out, or a whole-buffer view
        of one (the uint8 cache crosses as an int8 view of the same bytes)."""
        entry = self._by_id.get(id(array))
        if entry is not None and entry[0]() is array:  # the view handed out itself (a cache fed back)
            return entry[1]
        view = array
        while isinstance(view, np.ndarray):
            entry = self._by_id.get(id(view))
            if entry is not None and entry[0]() is view:
                return entry[1] if _same_buffer(array, view) else None
            view = view.base
        return None


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` is all of ``b``'s memory, laid out as ``b`` is (possibly with another element type of its size)."""
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.shape == b.shape and a.strides == b.strides and a.itemsize == b.itemsize
    )
