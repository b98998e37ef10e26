"""``InferenceSession``: onnxruntime's calling conventions over our compile pipeline.

    sess = gqa_torch_mlir.InferenceSession("model.onnx")
    [out, present_key, present_value] = sess.run(None, {"query": q, ...})
    sess.get_inputs()[0].name, .shape, .type

The model is imported, lowered with the plugin to linalg-on-tensors and
compiled by the reference backend (MLIR's ExecutionEngine) once, at
construction.  ``run`` checks each feed's name, dtype and rank against the
graph the way onnxruntime does, then executes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx

from .backends.iree.targets import TARGETS as IREE_TARGETS
from .errors import GqaTorchMlirError, RuntimeInvocationError
from .io_binding import IOBinding
from .options import LoweringOptions
from .pipeline import ModelLike, compile, load_model
from .specialize import EntryPoints, checked as checked_specializations, function_name, general_function

_ONNX_TO_NUMPY = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}
_ONNX_TYPE_NAMES = {
    onnx.TensorProto.FLOAT: "tensor(float)",
    onnx.TensorProto.FLOAT16: "tensor(float16)",
    onnx.TensorProto.DOUBLE: "tensor(double)",
    onnx.TensorProto.INT64: "tensor(int64)",
    onnx.TensorProto.INT32: "tensor(int32)",
    onnx.TensorProto.INT8: "tensor(int8)",
    onnx.TensorProto.UINT8: "tensor(uint8)",
    onnx.TensorProto.BOOL: "tensor(bool)",
}

BACKENDS = ("refbackend", "iree-cpu", "iree-cuda")
IREE_BACKENDS = tuple(IREE_TARGETS)  # backends/iree/targets.py


SDPA_ON_REFBACKEND = (
    "attention='sdpa' is refused on the refbackend: torch-mlir's loop lowering of scaled_dot_product_attention "
    "(tm_tensor.attention) normalizes with one maximum over all batch rows and heads, so a row whose scores lie "
    "~100 below another's comes out wrong (no error) and a NaN score reaches every head; use attention='decomposed' "
    "(the default) or backend='iree-cpu'"
)

FUSED_OFF_IREE_CPU = (
    "attention='fused' is refused on the {backend}: its decode kernel is an IREE CPU dispatch (kernels/decode_attention.py); "
    "use backend='iree-cpu' (where it is the default) or attention='decomposed'"
)


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it."""

    name: str
    shape: Optional[List[Union[int, str, None]]]  # int, symbolic name, or None when unknown; None: no shape declared
    type: str
    elem_type: int


def _node_args(values: Sequence[onnx.ValueInfoProto], skip=frozenset()) -> List[NodeArg]:
    args = []
    for vi in values:
        if vi.name in skip:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim] if tt.HasField("shape") else None
        args.append(NodeArg(vi.name, shape, _ONNX_TYPE_NAMES.get(tt.elem_type, f"tensor({tt.elem_type})"), tt.elem_type))
    return args


class InferenceSession:
    """Compile an ONNX model once; run it with onnxruntime's ``run`` signature.

    ``backend`` is ``"refbackend"``, ``"iree-cpu"`` (our pass inside IREE's
    bindings, IREE's llvm-cpu codegen, run by ``iree.runtime``; needs the
    ``iree`` extra) or ``"iree-cuda"`` (the same, IREE's CUDA codegen, run on
    the CUDA driver's first GPU).  ``threads`` is the iree-cpu worker count (1:
    the calling thread only); the refbackend records it and runs on one thread.
    ``runtime_verification`` (refbackend) bounds-checks every memory access
    of the compiled code and reports a violation as RuntimeInvocationError.

    ``share_buffers`` (iree-cpu, iree-cuda) is onnxruntime-genai's shared past/present
    buffer mode: an output of this session fed back as an input stays on the
    device (no upload), and a fixed-capacity cache fed that way is updated
    in place, so ``present`` comes back in the very buffer ``past`` was in,
    as the very array fed (changed: feed ``np.array(x)`` to keep it).  Per
    decode step, the cache then costs the new rows only instead of an upload
    of the whole buffer.

    ``attention`` and ``prefill_loop`` are the lowering's options (options.py) where the
    backend's defaults are not wanted.

    ``specialize`` (IREE backends) is a dict of symbolic input dims to sizes, or a list of
    them: each compiles the model again with those dims fixed, into the same module (the
    weights shared), and a call whose feeds have those sizes runs that copy (specialize.py).
    ``{"batch_size": 1, "sequence_length": 1}`` makes a builder decoder's decode step one
    submission instead of branches in every layer.

    ``weight_tiling`` (iree-cpu; on by default): the matmuls against constant weights are
    data-tiled, their weights packed when the module loads (backends/iree/weight_tiling.py).
    """

    def __init__(
        self,
        model: ModelLike,
        backend: str = "refbackend",
        threads: Optional[int] = None,
        runtime_verification: bool = False,
        attention: Optional[str] = None,
        share_buffers: bool = False,
        prefill_loop: Optional[str] = None,
        specialize=None,
        weight_tiling: Optional[bool] = None,
    ):
        if backend not in BACKENDS:
            raise GqaTorchMlirError(f"backend '{backend}' is not available; available: {', '.join(BACKENDS)}")
        if backend == "refbackend" and attention == "sdpa":
            raise GqaTorchMlirError(SDPA_ON_REFBACKEND)
        if backend != "iree-cpu" and attention == "fused":
            raise GqaTorchMlirError(FUSED_OFF_IREE_CPU.format(backend=backend))
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise GqaTorchMlirError(f"threads must be a positive integer or None, got {threads!r}")
        if share_buffers and backend not in IREE_BACKENDS:
            raise GqaTorchMlirError(f"share_buffers needs backend 'iree-cpu' or 'iree-cuda' (the {backend} copies every input and output)")
        if threads is not None and backend == "iree-cuda":
            raise GqaTorchMlirError(f"threads is a CPU setting; backend 'iree-cuda' takes none (got {threads!r})")
        if specialize is not None and backend not in IREE_BACKENDS:
            raise GqaTorchMlirError(f"specialize needs backend 'iree-cpu' or 'iree-cuda' (the {backend} compiles one function)")
        if weight_tiling is not None and (backend != "iree-cpu" or not isinstance(weight_tiling, bool)):
            raise GqaTorchMlirError(f"weight_tiling is an iree-cpu setting, True or False; got {weight_tiling!r} for backend '{backend}'")
        proto = load_model(model)
        initializers = {init.name for init in proto.graph.initializer}
        self._inputs = _node_args(proto.graph.input, skip=initializers)
        self._outputs = _node_args(proto.graph.output)
        self._plain = _PlainFeeds(self._inputs, self._outputs)  # run's quick check
        specs = checked_specializations(proto, specialize)
        options = LoweringOptions.for_backend(backend, attention, prefill_loop)  # options.py: BACKEND_DEFAULTS
        self._compiled, self._function = _compile_for(backend, proto, threads, runtime_verification, options, share_buffers, specs,
                                                      weight_tiling)
        self._entries = EntryPoints(self._function, list(zip(getattr(self._compiled, "specialized", []), specs)),
                                    [a.shape for a in self._inputs])

    @classmethod
    def from_vmfb(cls, model: ModelLike, vmfb: bytes, backend: str = "iree-cuda", threads: Optional[int] = None,
                  share_buffers: bool = False, specialize=None) -> "InferenceSession":
        """A session over a module compiled elsewhere (``gqa-torch-mlir compile MODEL --backend B -o
        MODEL.vmfb``), run with iree-base-runtime alone: no compiler, no torch-mlir.  ``model`` is the
        ONNX model it was compiled from (its inputs and outputs name the arguments and results);
        ``specialize`` as given to ``compile --specialize``, in its order."""
        if backend not in IREE_BACKENDS:
            raise GqaTorchMlirError(f"from_vmfb needs an IREE backend ({', '.join(IREE_BACKENDS)}), got '{backend}'")
        from .backends.iree.runtime import IreeCompiledModule

        proto = load_model(model)
        self = cls.__new__(cls)
        initializers = {init.name for init in proto.graph.initializer}
        self._inputs = _node_args(proto.graph.input, skip=initializers)
        self._outputs = _node_args(proto.graph.output)
        self._plain = _PlainFeeds(self._inputs, self._outputs)  # run's quick check
        dtypes = [np.dtype(onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)) for o in proto.graph.output]
        specs = checked_specializations(proto, specialize)
        compiled = IreeCompiledModule(vmfb, "", dtypes, threads, share_buffers, IREE_TARGETS[backend].driver)
        compiled.function = self._function = general_function(compiled.functions(), len(specs))
        compiled.specialized = [function_name(self._function, k) for k in range(len(specs))]
        self._compiled = compiled
        self._entries = EntryPoints(self._function, list(zip(compiled.specialized, specs)), [a.shape for a in self._inputs])
        return self

    def get_inputs(self) -> List[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        return list(self._outputs)

    def resident(self, array: np.ndarray) -> np.ndarray:
        """``array`` copied to the device once (``share_buffers``): feeding the result uploads nothing.

        The counterpart of onnxruntime's ``OrtValue``/IO binding for inputs that
        stay the same across calls or start a generation loop (the first past).
        """
        if not getattr(self._compiled, "share_buffers", False):
            raise GqaTorchMlirError("resident() needs InferenceSession(..., backend='iree-cpu', share_buffers=True)")
        return self._compiled.resident(array)

    @property
    def uploaded_bytes(self) -> Optional[int]:
        """Bytes the last ``run`` copied from host arrays to the device (iree-cpu; None on the refbackend)."""
        return getattr(self._compiled, "uploaded_bytes", None)

    def run(self, output_names: Optional[Sequence[str]], input_feed: Dict[str, np.ndarray], run_options=None) -> List[np.ndarray]:
        if run_options is not None:
            _refuse_run_options(run_options)
        args = self._plain.args(input_feed) if output_names is None else None
        if args is not None:  # every feed a numpy array as declared: the checks below would pass it as it is
            return self._plain.results(self._compiled.invoke(self._entries.pick(args), *args))
        if not isinstance(input_feed, Mapping):
            raise RuntimeInvocationError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        if output_names is not None and (isinstance(output_names, (str, bytes)) or not all(isinstance(n, str) for n in output_names)):
            raise RuntimeInvocationError(f"output_names must be None or a list of output names, got {output_names!r}")
        args = [self._feed(arg, input_feed) for arg in self._inputs]
        unknown = set(input_feed) - {a.name for a in self._inputs}
        if unknown:
            raise RuntimeInvocationError(f"unknown input name(s): {', '.join(sorted(map(repr, unknown)))}")
        self._refuse_empty_on_cuda(args)
        try:
            raw = self._compiled.invoke(self._entries.pick(args), *[_signless(a) for a in args])
        except MemoryError:  # a copy of a feed (a broadcast view, say) or an output that does not fit
            raise RuntimeInvocationError("out of memory: the feeds, or the outputs they give, need more memory than this process can get") from None
        results = {o.name: _as_onnx_type(r, o) for o, r in zip(self._outputs, raw)}
        names = [o.name for o in self._outputs] if not output_names else list(output_names)
        missing = [n for n in names if n not in results]
        if missing:
            raise RuntimeInvocationError(f"unknown output name(s): {', '.join(missing)}")
        return [results[n] for n in names]

    def io_binding(self) -> IOBinding:
        """onnxruntime's IO binding: bind inputs and outputs once, then ``run_with_iobinding`` (io_binding.py)."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options=None) -> None:
        """Run on the arrays bound to ``iobinding``; its ``get_outputs()`` then has the bound outputs."""
        if not isinstance(iobinding, IOBinding) or iobinding.session is not self:
            raise RuntimeInvocationError("run_with_iobinding needs an IOBinding made by this session's io_binding()")
        if run_options is not None:
            _refuse_run_options(run_options)
        call, picks = iobinding.call, iobinding.picks
        if call is None or picks is None:
            call, picks = self._bind(iobinding)
        raw = call()
        iobinding.set_results([raw[j] if raw[j].dtype == want else _as_onnx_type(raw[j], o) for j, want, o in picks])

    def _bind(self, iobinding: IOBinding):
        """(the call of the bound inputs, (result index, dtype, NodeArg) per bound output)."""
        args, names = iobinding.arguments(self._inputs), iobinding.output_names()
        self._refuse_empty_on_cuda(args)
        index = {o.name: j for j, o in enumerate(self._outputs)}
        iobinding.picks = [(index[n], self._plain.output_dtype(index[n]), self._outputs[index[n]]) for n in names]
        bind, function = getattr(self._compiled, "bound", None), self._entries.pick(args)
        call = bind(function, args, [j for j, _, _ in iobinding.picks]) if bind is not None else None
        iobinding.call = call  # None until the lean path has learnt the function: invoke meanwhile
        return call or (lambda: self._compiled.invoke(function, *args)), iobinding.picks

    def _bound_feed(self, name: str, value) -> np.ndarray:
        """A value bound to input ``name``, checked as ``run`` checks a feed."""
        arg = next((a for a in self._inputs if a.name == name), None)
        if arg is None:
            raise RuntimeInvocationError(f"unknown input name {name!r}; the inputs are: {', '.join(a.name for a in self._inputs)}")
        value = self._feed(arg, {name: value})
        return value if hasattr(value, "device_array") else _signless(value)

    def _output_arg(self, name: str) -> NodeArg:
        arg = next((o for o in self._outputs if o.name == name), None)
        if arg is None:
            raise RuntimeInvocationError(f"unknown output name {name!r}; the outputs are: {', '.join(o.name for o in self._outputs)}")
        return arg

    def device_value(self, array: np.ndarray):
        """A copy of ``array`` in the device's memory (IREE backends), for ``run_with_device_values``
        (onnxruntime's ``OrtValue.ortvalue_from_numpy(array, device)``)."""
        if not hasattr(self._compiled, "to_device"):
            raise GqaTorchMlirError("device_value needs an IREE backend (iree-cpu or iree-cuda)")
        return self._compiled.to_device(np.asarray(array))

    def run_with_device_values(self, output_names: Optional[Sequence[str]], input_feed: Dict[str, object]) -> list:
        """``run`` whose results stay in device memory (IREE backends): each a ``DeviceValue``
        (``.numpy()`` copies it to the host), which a later call takes as an input without an
        upload, numpy arrays and device values mixed.  onnxruntime's ``run_with_ort_values``;
        on a GPU, how a generation loop keeps its caches on the device between steps."""
        if not hasattr(self._compiled, "invoke_device"):
            raise GqaTorchMlirError("run_with_device_values needs an IREE backend (iree-cpu or iree-cuda)")
        args = [self._feed(arg, input_feed) for arg in self._inputs]
        unknown = set(input_feed) - {a.name for a in self._inputs}
        if unknown:
            raise RuntimeInvocationError(f"unknown input name(s): {', '.join(sorted(map(repr, unknown)))}")
        self._refuse_empty_on_cuda(args)
        raw = self._compiled.invoke_device(self._entries.pick(args), *[a if hasattr(a, "device_array") else _signless(a) for a in args])
        results = dict(zip([o.name for o in self._outputs], raw))
        names = [o.name for o in self._outputs] if not output_names else list(output_names)
        missing = [n for n in names if n not in results]
        if missing:
            raise RuntimeInvocationError(f"unknown output name(s): {', '.join(missing)}")
        return [results[n] for n in names]

    def _refuse_empty_on_cuda(self, args) -> None:
        """IREE 3.13's CUDA runtime fails on a zero-size buffer (CUDA_ERROR_INVALID_VALUE in its
        allocator; docs/gpu.md has the one-op module): named here instead."""
        if getattr(self._compiled, "driver", None) != "cuda":
            return
        for arg, value in zip(self._inputs, args):
            if 0 in getattr(value, "shape", ()):
                raise RuntimeInvocationError(
                    f"input '{arg.name}' has no elements (shape {tuple(value.shape)}): IREE 3.13's CUDA runtime fails on "
                    "zero-size buffers; on iree-cuda start a generation with a fixed-capacity cache (past and present "
                    "the same buffer, as onnxruntime-genai's past_present_share_buffer)"
                )

    @staticmethod
    def _feed(arg: NodeArg, feed: Dict[str, np.ndarray]) -> np.ndarray:
        if arg.name not in feed:
            raise RuntimeInvocationError(f"input '{arg.name}' is missing from the feed")
        want = _ONNX_TO_NUMPY.get(arg.elem_type)
        value = feed[arg.name]
        if hasattr(value, "device_array"):  # a DeviceValue (run_with_device_values): checked by the compiled signature
            if want is not None and value.dtype != want:
                raise RuntimeInvocationError(f"input '{arg.name}': expected {arg.type}, got a device value of {value.dtype}")
            return value
        if isinstance(value, (list, tuple)) and want is not None:  # nested lists, as onnxruntime takes them
            try:
                value = np.array(value, dtype=want)
            except (ValueError, TypeError, OverflowError) as e:
                raise RuntimeInvocationError(f"input '{arg.name}': a list that is not a {arg.type}: {e}") from None
        value = np.asarray(value)
        if want is not None and value.dtype != want:
            raise RuntimeInvocationError(f"input '{arg.name}': expected {arg.type}, got numpy {value.dtype}")
        if arg.shape is None:  # declared without a shape: the compiled signature checks it
            return value
        if len(arg.shape) != value.ndim:
            raise RuntimeInvocationError(f"input '{arg.name}': expected rank {len(arg.shape)}, got shape {value.shape}")
        for i, (d, n) in enumerate(zip(arg.shape, value.shape)):
            if isinstance(d, int) and d > 0 and d != n:
                raise RuntimeInvocationError(f"input '{arg.name}': dimension {i} must be {d}, got shape {value.shape}")
        return value


class _PlainFeeds:
    """``run``'s quick check of the common call: a dict of exactly the inputs, each a numpy array
    of the declared element type, rank and fixed dimensions; all outputs asked.  A decode step's
    fixed cost is mostly Python, the more so when the step before evicted the interpreter's data
    (backends/iree/fast_call.py); anything else takes the general checks, which name what is wrong."""

    def __init__(self, inputs: Sequence[NodeArg], outputs: Sequence[NodeArg]) -> None:
        specs = []
        for a in inputs:
            want = _ONNX_TO_NUMPY.get(a.elem_type)
            if want is None or want is np.uint8 or a.shape is None:  # uint8 crosses as int8 (_signless)
                specs = None
                break
            fixed = tuple((i, d) for i, d in enumerate(a.shape) if isinstance(d, int) and d > 0)
            specs.append((a.name, np.dtype(want), len(a.shape), fixed))
        self._specs = specs
        self._outputs = list(outputs)
        self._output_dtypes = [_ONNX_TO_NUMPY.get(o.elem_type) for o in outputs]

    def args(self, feed) -> Optional[List[np.ndarray]]:
        specs = self._specs
        if specs is None or type(feed) is not dict or len(feed) != len(specs):
            return None
        args = []
        for name, dtype, rank, fixed in specs:
            value = feed.get(name)
            if type(value) is not np.ndarray or value.dtype != dtype or value.ndim != rank or value.size == 0:
                return None  # (an empty feed: the general path refuses it on iree-cuda)
            shape = value.shape
            for i, d in fixed:
                if shape[i] != d:
                    return None
            args.append(value)
        return args

    def output_dtype(self, j: int):
        return self._output_dtypes[j]

    def results(self, raw) -> List[np.ndarray]:
        return [r if r.dtype == want else _as_onnx_type(r, o) for r, o, want in zip(raw, self._outputs, self._output_dtypes)]


def _refuse_run_options(run_options) -> None:
    """onnxruntime's RunOptions (log levels, a run tag, terminate) have no counterpart here:
    refused rather than ignored."""
    raise RuntimeInvocationError(f"run_options is not supported (got {type(run_options).__name__}); pass None")


def _signless(array: np.ndarray) -> np.ndarray:
    """Compiled code has signless integers: uint8 data crosses as the same bytes typed int8."""
    return array.view(np.int8) if array.dtype == np.uint8 else array


def _as_onnx_type(array: np.ndarray, arg: NodeArg) -> np.ndarray:
    want = _ONNX_TO_NUMPY.get(arg.elem_type)
    if want is not None and array.dtype != want and np.dtype(want).itemsize == array.dtype.itemsize:
        return array.view(want)
    return array


def _compile_for(
    backend: str,
    proto: onnx.ModelProto,
    threads: Optional[int],
    runtime_verification: bool,
    options: LoweringOptions,
    share_buffers: bool = False,
    specialize: Sequence[Dict[str, int]] = (),
    weight_tiling: Optional[bool] = None,
):
    """``(compiled module, function name)``: ``invoke(function, *arrays)`` runs the graph (IREE: and
    ``compiled.specialized``, the functions compiled for ``specialize``)."""
    if backend in IREE_BACKENDS:
        try:
            from .backends.iree import IreeBackend
        except ImportError as e:
            raise GqaTorchMlirError(f"backend '{backend}' needs IREE ({e}): pip install 'gqa-torch-mlir[iree]'") from None
        compiled = IreeBackend(threads=threads, options=options, share_buffers=share_buffers, target=backend,
                               weight_tiling=weight_tiling).compile(proto, specialize)
        return compiled, compiled.function
    from .backends.refbackend import RefBackend

    module = compile(proto, "linalg-on-tensors", options=options)
    return RefBackend(threads=threads, runtime_verification=runtime_verification).compile(module), main_function_name(module)


def main_function_name(module) -> str:
    """The module's public function (the imported ONNX graph)."""
    from torch_mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func":
            vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
            if vis is None or ir.StringAttr(vis).value == "public":
                return ir.StringAttr(op.attributes["sym_name"]).value
    raise GqaTorchMlirError("the compiled module has no public function")
