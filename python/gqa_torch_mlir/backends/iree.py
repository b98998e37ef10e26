"""IREE CPU backend: our patterns inside IREE's own MLIR Python bindings, then IREE.

``IreeCpuBackend.compile(model)`` works in one process, in one MLIRContext:

``import``
    An IREE compiler session (``iree.compiler.api.Session``) hands out its
    MLIRContext, which carries IREE's dialect registry (torch included).  The
    ONNX model, loaded and shape-inferred as :mod:`gqa_torch_mlir.pipeline`
    does, is imported into that context with the torch-mlir ONNX importer IREE
    ships as ``iree.compiler.extras.onnx_importer``.
``guard-onnx-indices``, ``convert-onnx-gqa-to-torch``
    :func:`gqa_torch_mlir.passes.apply_guards`, then
    :func:`~gqa_torch_mlir.passes.apply_lowerings`, run on IREE's module, as
    is: it takes the ``ir``/``rewrite`` modules of IREE's bindings from the op
    and builds with the generic ``Operation.create``.  Refusals raise
    :class:`LoweringError` (its message ends with a repro command); the
    module is then verified.
``iree-compile``
    The module is handed to an invocation of the same session
    (``import_module``: no printing or re-parsing) and compiled with
    ``--iree-input-type=onnx`` (torch-mlir's ``convert-torch-onnx-to-torch``
    for every remaining ONNX op, then torch to IREE's input dialects) for the
    ``llvm-cpu`` backend of the ``local`` device, tuned for the host CPU.

The resulting VM flatbuffer runs on ``iree.runtime``: with ``threads=1`` on
the ``local-sync`` device (dispatches run inline on the calling thread: one
thread, no worker pool), otherwise on the ``local-task`` device with that many
worker threads (``None``: one per CPU this process may use).  Devices are
process-wide, with IREE's caching allocator, and results are returned as
numpy views of their own device buffers (each array keeps its buffer alive):
without either, every call pays page faults on fresh multi-MB buffers (KV
caches), several times the cost of a decode step's dispatches.

Caveats of the bindings, handled here:

* IREE's session context loads dialects lazily and allows unregistered ops.
  The importer's first op is ``func.func``, created by name before anything
  has loaded the func dialect: it becomes an *unregistered* ``func.func``,
  on which IREE's pipeline crashes (a segfault).  The dialects the
  importer and our builder emit (func, torch) are loaded before importing.
* IREE compiles with the GIL released (its ``Invocation`` API is ctypes), so
  no Python diagnostic handler may be attached to the context meanwhile: MLIR
  calls it from native code without the GIL and the interpreter aborts.
  IREE's diagnostics are printed to stderr and captured from the descriptor.
* IREE's Python runtime caches one ``local-task`` driver per process, and its
  worker count comes from the process-global ``--task_topology_group_count``
  flag read when that driver is created.  So one process can have a single
  ``local-task`` worker count: asking for another raises
  :class:`GqaTorchMlirError` (``threads=1`` never needs local-task).

Every other failing stage raises :class:`CompileStageError` with MLIR's
diagnostics and a command that reproduces it on a saved copy of its input:
``gqa-torch-mlir-opt`` for our pass, ``iree-compile`` for IREE's compilation.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import onnx

from iree import runtime as ireert
from iree.compiler import ir
from iree.compiler.api import Output, Session
from iree.compiler.extras import onnx_importer

from ..errors import CompileStageError, GqaTorchMlirError, LoweringError, RuntimeInvocationError
from ..preimport import prepare_for_import
from ..options import LoweringOptions
from ..passes import GUARD_ARGUMENT, PASS_ARGUMENT, apply_guards, apply_lowerings
from ..pipeline import ModelLike, load_model
from ..repro import repro_command, save_stage_input

__all__ = ["COMPILE_FLAGS", "IreeCompiledModule", "IreeCpuBackend", "LoweredModule"]

COMPILE_FLAGS: Tuple[str, ...] = (
    "--iree-input-type=onnx",
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
    # IREE narrows f64 to f32 by default: a float64 model's buffers would then be read at half their size.
    "--iree-input-demote-f64-to-f32=false",
)
"""iree-compile flags of the backend (the same on the repro command line)."""

# Dialects whose ops the importer and our builder create with the generic builder.
_PRELOADED_DIALECTS = ("func", "torch")

# IREE's runtime keeps its devices (and drivers) for the life of the process; at
# interpreter exit nanobind would list them as leaks. They are not.
ireert._binding.disable_leak_checker()


# ---------------------------------------------------------------------------
# compile side
# ---------------------------------------------------------------------------


class _Diagnostics:
    """Collects the context's diagnostics (with their notes) while attached."""

    def __init__(self, context) -> None:
        self.messages: List[str] = []
        self._handler = context.attach_diagnostic_handler(self._handle)

    def _handle(self, d) -> bool:
        severity = str(d.severity).rsplit(".", 1)[-1].lower()
        text = f"{d.location}: {severity}: {d.message}"
        for note in d.notes:
            text += f"\n  {note.location}: note: {note.message}"
        self.messages.append(text)
        return True

    def take(self) -> str:
        text, self.messages = "\n".join(self.messages), []
        return text

    def detach(self) -> None:
        if self._handler is not None:
            self._handler.detach()
            self._handler = None


def _iree_compile_tool() -> str:
    """``iree-compile`` if it is on PATH, else the one next to this Python."""
    if shutil.which("iree-compile"):
        return "iree-compile"
    sibling = os.path.join(os.path.dirname(sys.executable), "iree-compile")
    return sibling if os.path.exists(sibling) else "iree-compile"


def iree_compile_repro(stage: str, asm: str, flags: Sequence[str]) -> str:
    """Save ``asm``; return the ``iree-compile`` command that compiles it as the backend does."""
    path = save_stage_input(stage, asm)
    args = [_iree_compile_tool(), *flags, path, "-o", os.devnull]
    return " ".join(shlex.quote(a) for a in args)


class _Captured:
    text = ""


_STDERR_LOCK = threading.Lock()  # descriptor 2 is process-wide: one capture at a time


@contextlib.contextmanager
def _captured_stderr(captured: _Captured):
    """Capture what native code writes to file descriptor 2 into ``captured.text``."""
    sys.stderr.flush()
    with _STDERR_LOCK, tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.text = tmp.read().decode("utf-8", errors="replace")


def _unique_lines(text: str) -> List[str]:
    """Non-empty lines, each once, in order (IREE reports some errors twice)."""
    seen, lines = set(), []
    for line in text.splitlines():
        if line.strip() and line not in seen:
            seen.add(line)
            lines.append(line)
    return lines


def _asm(module) -> str:
    return module.operation.get_asm(enable_debug_info=True)


@dataclass
class LoweredModule:
    """An imported model after our pass, in the MLIRContext of an IREE compiler session.

    ``module`` belongs to IREE's bindings (``iree.compiler.ir.Module``); the
    session that owns its context's compiler state is kept with it, and the
    shape-inferred model it came from (to regenerate a repro input).
    """

    session: Session
    module: object
    function: str
    output_dtypes: List[np.dtype]
    proto: onnx.ModelProto

    def asm(self) -> str:
        return str(self.module)


def _onnx_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


class IreeCpuBackend:
    """Compiles ONNX models with our pass and IREE for the host CPU.

    ``threads``: ``1`` runs on ``local-sync`` (the calling thread); ``N >= 2``
    on ``local-task`` with ``N`` workers; ``None`` on ``local-task`` with one
    worker per CPU available to the process.  ``extra_flags`` are appended to
    :data:`COMPILE_FLAGS`.  ``share_buffers``: see
    :meth:`IreeCompiledModule.invoke`.  ``plugin=False`` skips our pass, so
    torch-mlir's own ONNX lowerings (inside IREE) meet every op: benchmarks
    compare against that.

    No stage prints its input unless it fails: a failing stage's input (the
    imported module, or the module after our pass) is then regenerated from
    the model, saved, and named in the repro command.
    """

    def __init__(
        self,
        threads: Optional[int] = None,
        extra_flags: Sequence[str] = (),
        options: Optional[LoweringOptions] = None,
        share_buffers: bool = False,
        plugin: bool = True,
    ) -> None:
        self.options = options
        self.share_buffers = share_buffers
        self.plugin = plugin
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise GqaTorchMlirError(f"threads must be a positive integer or None, got {threads!r}")
        self.threads = threads
        self.flags: Tuple[str, ...] = COMPILE_FLAGS + tuple(extra_flags)

    def compile(self, model: ModelLike) -> "IreeCompiledModule":
        """Lower, compile with IREE in process and load on the runtime device."""
        lowered = self.lower(model)
        vmfb = self.compile_lowered(lowered)
        return IreeCompiledModule(vmfb, lowered.function, lowered.output_dtypes, self.threads, self.share_buffers)

    def lower(self, model: ModelLike) -> LoweredModule:
        """Import ``model`` into a new IREE session's context and run our pass there."""
        proto = prepare_for_import(load_model(model))
        if self.plugin:
            _check_no_dynamic_gqa_in_if(proto)
        session, module = self._import(proto)
        diagnostics = _Diagnostics(module.context)
        try:
            failed, refused = self._run_our_passes(module) if self.plugin else (None, [])
            invalid = None
            if not refused:
                try:
                    module.operation.verify()
                except ir.MLIRError as e:
                    invalid = f"{e}\n{diagnostics.take()}".strip()
        finally:
            diagnostics.detach()
        ours = f"builtin.module({GUARD_ARGUMENT},{PASS_ARGUMENT})"
        if refused:
            repro = repro_command(failed, _asm(self._import(proto)[1]), ours)
            lines = "\n".join(f"error: {r}" for r in refused)
            raise LoweringError(f"{failed} failed:\n{lines}\nreproduce with:\n  {repro}", [str(r) for r in refused])
        if invalid is not None:
            repro = repro_command(PASS_ARGUMENT, _asm(self._import(proto)[1]), ours)
            raise CompileStageError(PASS_ARGUMENT, f"the module does not verify after the pass: {invalid}", repro)
        function = ir.StringAttr(self._main_function(module).attributes["sym_name"]).value
        output_dtypes = [_onnx_dtype(o.type.tensor_type.elem_type) for o in proto.graph.output]
        return LoweredModule(session, module, function, output_dtypes, proto)

    def _run_our_passes(self, module) -> Tuple[Optional[str], list]:
        """guard-onnx-indices, then convert-onnx-gqa-to-torch, on IREE's module: (the pass that refused, refusals)."""
        refused = apply_guards(module.operation)
        if refused:
            return GUARD_ARGUMENT, refused
        return PASS_ARGUMENT, apply_lowerings(module.operation, options=self.options)

    def compile_lowered(self, lowered: LoweredModule) -> bytes:
        """IREE's compilation of a lowered module to a VM flatbuffer (in place: consumes the module).

        IREE runs its pipeline with the GIL released (a ctypes call), so no
        Python diagnostic handler may be attached to the context then: MLIR
        would call it without the GIL and abort the interpreter.  The
        invocation prints its diagnostics to stderr instead, captured at the
        file-descriptor level for the duration of the call.
        """
        invocation = lowered.session.invocation()
        captured, errors, vmfb = _Captured(), [], None
        try:
            invocation.enable_console_diagnostics()
            invocation.import_module(lowered.module.operation)
            with _captured_stderr(captured):
                ok = invocation.execute()
            if ok:
                if captured.text:
                    sys.stderr.write(captured.text)  # IREE's warnings
                output = Output.open_membuffer()
                invocation.output_vm_bytecode(output)
                vmfb = bytes(output.map_memory())
                output.close()
        except (RuntimeError, ValueError) as e:
            errors.append(f"{type(e).__name__}: {e}")
        finally:
            invocation.close()
        if vmfb is None:
            messages = "\n".join(_unique_lines(captured.text) + errors)
            # The module was changed in place by IREE's pipeline: lower the model again.
            repro = iree_compile_repro("iree-compile", self.lower(lowered.proto).asm(), self.flags)
            raise CompileStageError("iree-compile", messages or "IREE's compilation failed without a diagnostic", repro)
        return vmfb

    # -- stages ---------------------------------------------------------------
    def _session(self) -> Session:
        session = Session()
        try:
            session.set_flags(*self.flags)
        except ValueError as e:
            raise CompileStageError("iree-flags", f"{e} (flags: {' '.join(self.flags)})") from None
        for name in _PRELOADED_DIALECTS:
            session.context.dialects[name]  # noqa: B018  loads it: see the module docstring
        return session

    def _import(self, proto: onnx.ModelProto):
        """``(session, module)``: ``proto`` imported into a new session's context."""
        session = self._session()
        diagnostics = _Diagnostics(session.context)
        try:
            with warnings.catch_warnings():  # an unnamed optional output has no type: nothing to warn about
                warnings.filterwarnings("ignore", message="Found a node without a valid type proto")
                info = onnx_importer.ModelInfo(proto)
                module = info.create_module(context=session.context)
                onnx_importer.NodeImporter.define_function(info.main_graph, module.operation).import_all()
        except Exception as e:
            raise CompileStageError("import", f"{type(e).__name__}: {e}\n{diagnostics.take()}".strip()) from None
        finally:
            diagnostics.detach()
        return session, module

    @staticmethod
    def _main_function(module):
        for op in module.body.operations:
            if op.operation.name == "func.func" and "sym_visibility" not in op.attributes and len(op.regions[0].blocks):
                return op
        raise GqaTorchMlirError("the imported module has no public function")


# ---------------------------------------------------------------------------
# run side
# ---------------------------------------------------------------------------

_DEVICE_LOCK = threading.Lock()
_SYNC_DEVICE = None
_TASK_DEVICE = None
_TASK_WORKERS: Optional[int] = None


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_task_workers() -> Optional[int]:
    """Worker count of this process's local-task device, None before it exists."""
    return _TASK_WORKERS


def device_for(threads: Optional[int]):
    """The process-wide IREE device for ``threads`` (see :class:`IreeCpuBackend`)."""
    global _SYNC_DEVICE, _TASK_DEVICE, _TASK_WORKERS
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


_FAILED_CHECK = "FAILED_PRECONDITION; "


def _vm_failure(report: str) -> str:
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


def _check_no_dynamic_gqa_in_if(proto: onnx.ModelProto) -> None:
    """Refuse a GroupQueryAttention with a dynamic dim inside an ``If`` branch.

    IREE (iree-base-compiler 3.13) miscompiles it: the present caches such a
    branch yields, whose rows depend on data (``max(P, total_sequence_length)``),
    came back with rows of another buffer now and then, or the call crashed
    (SIGSEGV, a garbage allocation size).  With static shapes, in a ``Loop``
    body, and on the refbackend, it computes as onnxruntime does.
    """
    from ..preimport.graph import node_label
    from ..preimport.shapes import GQA, graphs_in_scope, known_types

    for graph, outer in graphs_in_scope(proto.graph, {}):
        for if_node in (n for n in graph.node if n.op_type == "If" and n.domain in ("", "ai.onnx")):
            for branch in (a.g for a in if_node.attribute if a.HasField("g")):
                for sub, sub_outer in graphs_in_scope(branch, {**outer, **known_types(graph)}):
                    types = {**sub_outer, **known_types(sub)}  # shaped types only: no shape counts as dynamic
                    for node in (n for n in sub.node if (n.domain, n.op_type) == GQA):
                        names = [n for n in [*node.input, *node.output] if n]
                        dims = [d for n in names if n in types for d in types[n].tensor_type.shape.dim]
                        if any(n not in types for n in names) or any(not d.HasField("dim_value") for d in dims):
                            raise LoweringError(
                                f"{node_label(node)} in a branch of {node_label(if_node)}: a GroupQueryAttention with "
                                "dynamic shapes inside an If is refused on iree-cpu (IREE miscompiles the data-dependent "
                                "cache rows it yields: wrong caches or a crash); declare static shapes, or use the "
                                "refbackend", [])


class IreeCompiledModule:
    """A VM flatbuffer loaded on an IREE CPU device; ``invoke`` as the refbackend's.

    Calls on one compiled module are serialised by a lock.
    """

    def __init__(
        self, vmfb: bytes, function: str, output_dtypes: Sequence[np.dtype], threads: Optional[int], share_buffers: bool = False
    ) -> None:
        self.vmfb = vmfb
        self.function = function
        self.threads = threads
        self.share_buffers = share_buffers
        self.uploaded_bytes = 0  # host bytes copied to the device by the last call
        self._resident = _ResidentArrays()
        self._output_dtypes = list(output_dtypes)
        self._device = device_for(threads)
        self._instance = ireert.VmInstance()
        hal = ireert.create_hal_module(self._instance, self._device)
        self._module = ireert.VmModule.copy_buffer(self._instance, vmfb)
        self._context = ireert.VmContext(self._instance, modules=[hal, self._module])
        self._invokers = {}
        self._lock = threading.Lock()

    @property
    def device_name(self) -> str:
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

    def invoke(self, function: str, *args: np.ndarray) -> Tuple[np.ndarray, ...]:
        """Call ``function``; the results are always a tuple of numpy arrays.

        With ``share_buffers``, an argument that is an array this module
        returned is passed as the device buffer behind it (no upload), and the
        call may update that buffer in place: IREE writes a fixed-capacity
        cache's new rows into the past buffer and returns it as present.

        A call the VM fails raises :class:`RuntimeInvocationError`: a failed
        run-time check with just its message (IREE stops at the first one).
        """
        invoker = self._invoker(function)
        arrays = self._arguments(args)
        self.uploaded_bytes = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
        with self._lock:
            try:
                results = invoker(*arrays)
            except ValueError as e:
                raise RuntimeInvocationError(f"@{function}: {e}") from None
            except RuntimeError as e:  # the VM failed the call: keep IREE's whole report as the cause
                raise RuntimeInvocationError(f"@{function}: {_vm_failure(str(e))}") from e
        if not isinstance(results, tuple):
            results = (results,)
        return tuple(self._host_result(function, i, r) for i, r in enumerate(results))

    def resident(self, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` on the device, as a host view ``invoke`` passes without an upload (share_buffers)."""
        if not self.share_buffers:
            raise GqaTorchMlirError("resident arrays need share_buffers=True")
        device_array = ireert.asdevicearray(self._device, np.ascontiguousarray(array))
        host = device_array.to_host()
        self._resident.remember(host, device_array)
        return host

    def _arguments(self, args) -> list:
        """Device arrays for the resident arguments (share_buffers), host arrays for the rest.

        A resident buffer is passed once per call: the call may write it in
        place, so an argument overlapping one already passed (the same cache fed
        as past_key and past_value) is uploaded as a copy of its values instead.
        """
        passed, shared = [], []
        for a in args:
            device_array = self._resident.device_array_of(a) if self.share_buffers else None
            overlaps = any(np.may_share_memory(a, b) for b in shared)
            if device_array is not None and not overlaps:
                shared.append(a)
                passed.append(device_array)
            else:
                passed.append(np.array(a) if overlaps else _host_argument(a))
        return passed

    def _host_result(self, function: str, i: int, r) -> np.ndarray:
        # A mapping of the result's own device buffer, which the array keeps alive
        # (no copy: fresh multi-MB host arrays cost page faults on every call).
        host = np.asarray(r.to_host() if hasattr(r, "to_host") else r)
        if function == self.function and i < len(self._output_dtypes) and host.dtype != self._output_dtypes[i]:
            want = np.dtype(self._output_dtypes[i])
            if not (want.kind in "iu" and host.dtype.kind in "iu" and want.itemsize == host.dtype.itemsize):
                return host.astype(want)  # IREE returns i1 as i8: a copy, not shared
            host = host.view(want)  # signless integers (a uint8 cache comes back as int8): the same bytes, shared
        if hasattr(r, "to_host"):
            host = np.asarray(_KeepsDeviceArray(host, r))
        if self.share_buffers and hasattr(r, "to_host"):
            self._resident.remember(host, r)
        return host


def _host_argument(a):
    return np.ascontiguousarray(a) if np.ndim(a) else np.asarray(a)


class _KeepsDeviceArray:
    """The owner of a mapped result's memory as NumPy sees it (every view's ``base``).

    The mapping IREE hands out does not keep its device buffer alive: once the
    DeviceArray was gone, a view of the result (``logits[:, -1]``) kept only
    the mapping and read memory later calls had reused.  Holding the
    DeviceArray here ties the buffer's life to the last view of it.
    """

    def __init__(self, host: np.ndarray, device_array) -> None:
        self._device_array = device_array
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
