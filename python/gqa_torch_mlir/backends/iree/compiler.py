"""The compile side of the IREE backends: our passes inside IREE's own MLIR Python bindings, then IREE.

``IreeBackend(target).compile(model)`` (targets.py: iree-cpu, iree-cuda)
works in one process, in one MLIRContext:

``import``
    An IREE compiler session (``iree.compiler.api.Session``) hands out its
    MLIRContext, which carries IREE's dialect registry (torch included).  The
    ONNX model, loaded and shape-inferred as :mod:`gqa_torch_mlir.pipeline`
    does, is imported into that context with the torch-mlir ONNX importer IREE
    ships as ``iree.compiler.extras.onnx_importer``.  Each ``specialize`` entry
    (specialize.py) imports a copy with those dims fixed into the same context
    and moves its function beside the first, on the first one's constants.
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
    target's device: the ``llvm-cpu`` backend of the ``local`` device, tuned
    for the host CPU, or CUDA.

The resulting VM flatbuffer runs on ``iree.runtime`` (runtime.py): on the CPU
with ``threads=1`` on the ``local-sync`` device (dispatches run inline on the
calling thread: one thread, no worker pool), otherwise on the ``local-task``
device with that many worker threads (``None``: one per CPU this process may
use); on the CUDA driver's device for iree-cuda.  Devices are process-wide,
with IREE's caching allocator, and CPU results are returned as numpy views of
their own device buffers (each array keeps its buffer alive): without either,
every call pays page faults on fresh multi-MB buffers (KV caches), several
times the cost of a decode step's dispatches.

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
import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx

from iree.compiler import ir
from iree.compiler.api import Output, Session
from iree.compiler.extras import onnx_importer

from ...errors import CompileStageError, GqaTorchMlirError, LoweringError
from ...preimport import prepare_for_import
from ...preimport.dims import with_dims_fixed
from ...options import LoweringOptions
from ...passes import GUARD_ARGUMENT, PASS_ARGUMENT, apply_guards, apply_lowerings
from ...pipeline import ModelLike, load_model
from ...repro import repro_command, save_stage_input
from ...specialize import function_name
from .runtime import IreeCompiledModule
from . import feed_alignment, target_check, tuning, weight_tiling
from .targets import TARGETS

__all__ = ["IreeBackend", "IreeCpuBackend", "LoweredModule"]

DECOMPOSED_ON_CUDA = (
    "attention='{form}' is refused on iree-cuda: IREE 3.13's CUDA code generation fails to distribute the decomposed "
    "form's P.V matmul over a dynamic number of keys (and the fused form's kernel is for the CPU); use attention='sdpa' "
    "(IREE's attention op, the default there)"
)

# Dialects whose ops the importer and our builder create with the generic builder (torch_c, arith,
# tensor: the calls of kernels/, fused_decode.py).
_PRELOADED_DIALECTS = ("func", "torch", "torch_c", "arith", "tensor")

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


def _execute(session: Session, module, captured: _Captured, errors: List[str], phase=None, to_vm: bool = False):
    """Run IREE's pipeline on ``module`` in a new invocation of ``session`` (``phase`` sets where it
    starts or stops): the VM flatbuffer's bytes (``to_vm``) or the module it ends with; None when it
    fails (IREE's stderr in ``captured``, exceptions in ``errors``)."""
    invocation = session.invocation()
    try:
        invocation.enable_console_diagnostics()
        if phase is not None:
            phase(invocation)
        invocation.import_module(module.operation)
        with _captured_stderr(captured):
            ok = invocation.execute()
        if not ok:
            return None
        if captured.text:
            sys.stderr.write(captured.text)  # IREE's warnings
        if not to_vm:
            return invocation.export_module()
        output = Output.open_membuffer()
        invocation.output_vm_bytecode(output)
        vmfb = bytes(output.map_memory())
        output.close()
        return vmfb
    except (RuntimeError, ValueError) as e:
        errors.append(f"{type(e).__name__}: {e}")
        return None
    finally:
        invocation.close()


def _marked_split(session: Session, module, captured: _Captured, errors: List[str]):
    """Weight tiling's first phase: IREE's pipeline to the split, then the weight matmuls marked
    (weight_tiling.py); None when it fails."""
    split = _execute(session, module, captured, errors, phase=weight_tiling.stop_after_split)
    if split is not None:
        weight_tiling.annotate(split)
    return split


def _asm(module) -> str:
    return _parsable(module.operation.get_asm(enable_debug_info=True))


def _parsable(asm: str) -> str:
    """IREE 3.13 prints a ``#stream.resource_config``'s boolean as 0 or 1, which its parser refuses
    (the fused kernel's executable has one: kernels/decode_attention.py)."""
    return asm.replace("alias_mutable_bindings = 0,", "alias_mutable_bindings = false,").replace(
        "alias_mutable_bindings = 1,", "alias_mutable_bindings = true,")


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
    # (function, the dims it fixes) per specialization (specialize.py), in the order given
    specialized: List[Tuple[str, Dict[str, int]]] = field(default_factory=list)

    def asm(self) -> str:
        return _parsable(str(self.module))


def _onnx_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


class IreeBackend:
    """Compiles ONNX models with our passes and IREE for ``target`` (targets.py: "iree-cpu", "iree-cuda").

    ``threads`` (iree-cpu): ``1`` runs on ``local-sync`` (the calling thread);
    ``N >= 2`` on ``local-task`` with ``N`` workers; ``None`` on ``local-task``
    with one worker per CPU available to the process.  ``extra_flags`` are
    appended to the target's flags and tuning.py's (``--iree-codegen-tuning-spec-path=``
    compiles iree-cpu without the spec).  ``options``: the pass's, by default the target's
    (options.py's BACKEND_DEFAULTS: fused on iree-cpu).  ``share_buffers``: see
    :meth:`IreeCompiledModule.invoke`.  ``plugin=False`` skips our pass, so
    torch-mlir's own ONNX lowerings (inside IREE) meet every op: benchmarks
    compare against that.  ``weight_tiling`` (iree-cpu, on by default): the
    matmuls against constant weights are data-tiled (weight_tiling.py).

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
        target: str = "iree-cpu",
        weight_tiling: Optional[bool] = None,
    ) -> None:
        if target not in TARGETS:
            raise GqaTorchMlirError(f"IREE target '{target}' is not one of {', '.join(TARGETS)}")
        self.target = TARGETS[target]
        if threads is not None and self.target.driver != "local":
            raise GqaTorchMlirError(f"threads is a CPU setting; {target} takes none (got {threads!r})")
        options = options or LoweringOptions.for_backend(target)  # the target's forms (options.py)
        if self.target.driver == "cuda" and options.attention != "sdpa":
            raise GqaTorchMlirError(DECOMPOSED_ON_CUDA.format(form=options.attention))
        if self.target.driver == "cuda" and options.matmul_nbits != "dequantize":
            raise GqaTorchMlirError(f"matmul_nbits={options.matmul_nbits!r} is refused on iree-cuda: kernels/nbits_matmul*.py "
                                    "are CPU kernels; use matmul_nbits='dequantize' (the default there)")
        self.options = options
        self.share_buffers = share_buffers
        self.plugin = plugin
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise GqaTorchMlirError(f"threads must be a positive integer or None, got {threads!r}")
        self.threads = threads
        tuning_flags = tuning.cpu_flags() if self.target.tuned and tuning.enabled() else tuning.UNTUNED_FLAGS  # tuning.py
        self.extra_flags: Tuple[str, ...] = tuple(extra_flags)
        self.flags: Tuple[str, ...] = self.target.flags + tuning_flags + self.extra_flags
        if self.options.matmul_nbits == "vnni" and not target_check.takes_vnni(self.flags, self.extra_flags):
            self.options = dataclasses.replace(self.options, matmul_nbits="kernel")  # vnni's f32 form (options.py)
        if weight_tiling is not None and not self.target.weight_tiling:
            raise GqaTorchMlirError(f"weight_tiling is an iree-cpu setting; {target} takes none (got {weight_tiling!r})")
        self.weight_tiling = self.target.weight_tiling if weight_tiling is None else bool(weight_tiling)

    def compile(self, model: ModelLike, specialize: Sequence[Mapping[str, int]] = ()) -> "IreeCompiledModule":
        """Lower, compile with IREE in process and load on the runtime device."""
        lowered = self.lower(model, specialize)
        vmfb = self.compile_lowered(lowered)
        return IreeCompiledModule(vmfb, lowered.function, lowered.output_dtypes, self.threads, self.share_buffers, self.target.driver,
                                  [name for name, _ in lowered.specialized])

    def lower(self, model: ModelLike, specialize: Sequence[Mapping[str, int]] = ()) -> LoweredModule:
        """Import ``model`` into a new IREE session's context and run our pass there.

        ``specialize`` (dim name -> size mappings, checked by specialize.checked): each adds a
        public function, the model with those dims fixed, beside the general one."""
        loaded = load_model(model)
        proto = prepare_for_import(loaded)
        if self.plugin:
            _check_no_dynamic_gqa_in_if(proto, self.target.backend)
        session, module = self._import(proto)
        main = ir.StringAttr(self._main_function(module).attributes["sym_name"]).value
        specialized = [(self._add_fixed(module, prepare_for_import(with_dims_fixed(loaded, sizes)), function_name(main, k)), dict(sizes))
                       for k, sizes in enumerate(specialize)]
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
            if specialized:
                lines += f"\n(the model was lowered as declared and with dims fixed: {'; '.join(map(str, dict(specialized).values()))})"
            raise LoweringError(f"{failed} failed:\n{lines}\nreproduce with:\n  {repro}", [str(r) for r in refused])
        if invalid is not None:
            repro = repro_command(PASS_ARGUMENT, _asm(self._import(proto)[1]), ours)
            raise CompileStageError(PASS_ARGUMENT, f"the module does not verify after the pass: {invalid}", repro)
        output_dtypes = [_onnx_dtype(o.type.tensor_type.elem_type) for o in proto.graph.output]
        return LoweredModule(session, module, main, output_dtypes, proto, specialized)

    def _run_our_passes(self, module) -> Tuple[Optional[str], list]:
        """guard-onnx-indices, then convert-onnx-gqa-to-torch, on IREE's module: (the pass that refused, refusals)."""
        refused = apply_guards(module.operation)
        if refused:
            return GUARD_ARGUMENT, refused
        # Checks deferred on the CPU too: each mid-step read made local-task's workers stop and restart
        # (deferred_checks.py); there returned, read by runtime.py after the call (no wait mid-call).
        defer = "result" if self.target.driver == "local" else True
        refused = apply_lowerings(module.operation, options=self.options, defer_checks=defer)
        if not refused and self.target.driver == "local":  # the feeds read in place at 16 bytes (feed_alignment.py)
            feed_alignment.annotate(ir, module.operation)
        return PASS_ARGUMENT, refused

    def compile_lowered(self, lowered: LoweredModule) -> bytes:
        """IREE's compilation of a lowered module to a VM flatbuffer (in place: consumes the module).

        With ``weight_tiling`` in two invocations of the session: IREE's pipeline to the end
        of global optimization, the weight matmuls marked (weight_tiling.py), then the rest
        with data tiling on.

        IREE runs its pipeline with the GIL released (a ctypes call), so no
        Python diagnostic handler may be attached to the context then: MLIR
        would call it without the GIL and abort the interpreter.  The
        invocation prints its diagnostics to stderr instead, captured at the
        file-descriptor level for the duration of the call.
        """
        target_check.check(self.flags, self.extra_flags)  # a CPU name LLVM aborts on ends this process otherwise
        if tuning.uses_spec(self.flags):  # IREE 3.13 may deadlock loading it on worker threads (tuning.py)
            lowered.session.context.enable_multithreading(False)
        captured, errors, session = _Captured(), [], lowered.session
        module = lowered.module
        if self.weight_tiling:
            module = _marked_split(session, module, captured, errors)
            if module is not None:
                session.set_flags(*weight_tiling.FLAGS)
        resume = weight_tiling.resume_after_split if self.weight_tiling else None
        vmfb = None if module is None else _execute(session, module, captured, errors, phase=resume, to_vm=True)
        if vmfb is None:
            messages = "\n".join(_unique_lines(captured.text) + errors)
            raise CompileStageError("iree-compile", messages or "IREE's compilation failed without a diagnostic", self._repro(lowered))
        return vmfb

    def _repro(self, lowered: LoweredModule) -> str:
        """The iree-compile command that reproduces a failed compile of ``lowered``, on a saved input.

        IREE's pipeline changed the module in place: the model is lowered again.  With
        ``weight_tiling``, where the first phase passes, the saved input is its output, weights marked."""
        specialize = [sizes for _, sizes in lowered.specialized]
        if self.weight_tiling:
            again = self.lower(lowered.proto, specialize)
            if tuning.uses_spec(self.flags):
                again.session.context.enable_multithreading(False)
            split = _marked_split(again.session, again.module, _Captured(), [])
            if split is not None:
                resume = (f"--compile-from={weight_tiling.SPLIT_PHASE}", *weight_tiling.FLAGS)
                return iree_compile_repro("iree-compile-weight-tiled", _asm(split), self.flags + resume)
        return iree_compile_repro("iree-compile", self.lower(lowered.proto, specialize).asm(), self.flags)

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
        return session, _import_into(session.context, proto)

    def _add_fixed(self, module, fixed: onnx.ModelProto, name: str) -> str:
        """``fixed`` (the model with dims fixed) imported into ``module``'s context, its function moved
        into ``module`` as ``name``, its constants those of ``module``'s function: returns ``name``."""
        main = self._main_function(module)
        imported = _import_into(module.context, fixed)  # (held: its ops die with it)
        added = self._main_function(imported)
        added.attributes["sym_name"] = ir.StringAttr.get(name, module.context)
        share_constants(main, added)
        added.operation.detach_from_parent()
        module.body.append(added.operation)
        return name

    @staticmethod
    def _main_function(module):
        for op in module.body.operations:
            if op.operation.name == "func.func" and "sym_visibility" not in op.attributes and len(op.regions[0].blocks):
                return op
        raise GqaTorchMlirError("the imported module has no public function")


def _import_into(context, proto: onnx.ModelProto):
    """``proto`` imported by torch-mlir's ONNX importer as a new module of ``context``."""
    diagnostics = _Diagnostics(context)
    try:
        with warnings.catch_warnings():  # an unnamed optional output has no type: nothing to warn about
            warnings.filterwarnings("ignore", message="Found a node without a valid type proto")
            info = onnx_importer.ModelInfo(proto)
            module = info.create_module(context=context)
            onnx_importer.NodeImporter.define_function(info.main_graph, module.operation).import_all()
    except Exception as e:
        raise CompileStageError("import", f"{type(e).__name__}: {e}\n{diagnostics.take()}".strip()) from None
    finally:
        diagnostics.detach()
    return module


def share_constants(main, added) -> None:
    """Each ONNX constant (initializer or Constant node) of function ``added`` given the very attribute
    of ``main``'s constant of the same name and type: the importer made a second copy of each
    weight, and one attribute is one constant to IREE whatever its passes do with the two functions."""

    def constants(function):
        found = []

        def visit(op):
            if op.name == "torch.operator" and "torch.onnx.value" in op.attributes:
                found.append(op)
            return ir.WalkResult.ADVANCE

        function.operation.walk(visit)
        return found

    def key(op):
        return str(op.location), str(op.results[0].type)

    ours = {}
    for op in constants(main):
        ours.setdefault(key(op), []).append(op.attributes["torch.onnx.value"])
    for op in constants(added):
        same = ours.get(key(op), [])
        if len(same) == 1 and same[0].type == op.attributes["torch.onnx.value"].type:  # a name given once
            op.attributes["torch.onnx.value"] = same[0]


def _check_no_dynamic_gqa_in_if(proto: onnx.ModelProto, backend: str) -> None:
    """Refuse a GroupQueryAttention with a dynamic dim inside an ``If`` branch.

    IREE (iree-base-compiler 3.13) miscompiles it: the present caches such a
    branch yields, whose rows depend on data (``max(P, total_sequence_length)``),
    came back with rows of another buffer now and then, or the call crashed
    (SIGSEGV, a garbage allocation size).  With static shapes, in a ``Loop``
    body, and on the refbackend, it computes as onnxruntime does.
    """
    from ...preimport.graph import node_label
    from ...preimport.shapes import GQA, graphs_in_scope, known_types

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
                                f"dynamic shapes inside an If is refused on {backend} (IREE miscompiles the data-dependent "
                                "cache rows it yields: wrong caches or a crash); declare static shapes, or use the "
                                "refbackend", [])


class IreeCpuBackend(IreeBackend):
    """:class:`IreeBackend` for the host CPU (the iree-cpu backend)."""

    def __init__(self, threads: Optional[int] = None, extra_flags: Sequence[str] = (), options: Optional[LoweringOptions] = None,
                 share_buffers: bool = False, plugin: bool = True, weight_tiling: bool = True) -> None:
        super().__init__(threads, extra_flags, options, share_buffers, plugin, target="iree-cpu", weight_tiling=weight_tiling)
