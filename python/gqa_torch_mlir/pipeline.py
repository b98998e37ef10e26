"""The Python compile pipeline: ONNX model -> torch-mlir module at a chosen level.

Stages, each a PassManager run whose failure names the stage and gives a
one-line command reproducing it on a saved copy of its input:

  import               torch-mlir's ONNX importer (no onnx.checker: contrib ops pass)
  guard-onnx-indices   our index guards: Gather/Scatter indices checked and clamped (guards/)
  convert-onnx-gqa-to-torch   our registered lowerings (must precede the next one)
  torch                func.func(convert-torch-onnx-to-torch): every other ONNX op
  torch-backend        torch-onnx-to-torch-backend-pipeline (backend contract; flatten/unflatten kept)
  linalg-on-tensors    torch-backend-to-linalg-on-tensors-backend-pipeline
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable, Optional, Union

import onnx

from .context import make_context
from .errors import CompileStageError, GqaTorchMlirError
from .preimport import prepare_for_import
from .options import LoweringOptions
from .passes import GUARD_ARGUMENT, PASS_ARGUMENT, PYTHON_PASSES  # (importing passes registers the lowerings)
from .repro import repro_command

OUTPUT_TYPES = ("torch", "torch-backend", "linalg-on-tensors")

# Ops the torch backend contract keeps for linalg-on-tensors, as torch-mlir's own
# linalg backend does.  Decomposed, flatten/unflatten become aten.view, whose
# linalg lowering (for two or more dynamic dims) divides by the product of the
# sizes at run time: an empty batch or sequence then dies of SIGFPE.  Kept,
# they lower to tensor.collapse_shape / expand_shape, which never divide by a
# dynamic size.
LINALG_BACKEND_LEGAL_OPS = ("aten.flatten.using_ints", "aten.unflatten.int")

# (stage name, textual pipeline elements or None for our Python pass of that name, last output type it completes)
STAGES = [
    (GUARD_ARGUMENT, None, None),
    (PASS_ARGUMENT, None, None),
    ("torch", "func.func(convert-torch-onnx-to-torch),canonicalize", "torch"),
    ("torch-backend", f"torch-onnx-to-torch-backend-pipeline{{backend-legal-ops={','.join(LINALG_BACKEND_LEGAL_OPS)}}}", "torch-backend"),
    ("linalg-on-tensors", "torch-backend-to-linalg-on-tensors-backend-pipeline", "linalg-on-tensors"),
]

ModelLike = Union[str, os.PathLike, bytes, onnx.ModelProto]


def load_model(model: ModelLike) -> onnx.ModelProto:
    """A ModelProto from a path (external weights next to the file are loaded), from its serialized bytes, or as given."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):  # a serialized model, as onnxruntime takes it
        try:
            return onnx.load_model_from_string(bytes(model))
        except Exception as e:  # protobuf decode errors
            raise GqaTorchMlirError(f"cannot load ONNX model from {len(model)} bytes: {e}") from None
    if not isinstance(model, (str, os.PathLike)):
        raise GqaTorchMlirError(f"model must be a path, serialized bytes or an onnx.ModelProto, got {type(model).__name__}")
    path = Path(model)
    try:
        is_file = path.is_file()
    except (OSError, ValueError) as e:  # a name too long for the file system, a NUL byte
        raise GqaTorchMlirError(f"no ONNX model at '{path}': {e}") from None
    if not is_file:
        raise GqaTorchMlirError(f"no ONNX model at '{path}'")
    try:
        proto = onnx.load(str(path), load_external_data=True)
    except Exception as e:  # protobuf decode errors, missing external data files
        raise GqaTorchMlirError(f"cannot load ONNX model '{path}': {e}") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise GqaTorchMlirError(f"'{path}' is not an ONNX model: it has no graph or no opset_import")
    return proto


def import_onnx(model: ModelLike, context=None):
    """Import into a torch-dialect module with ``torch.operator "onnx.*"`` ops."""
    from torch_mlir.extras import onnx_importer

    proto = prepare_for_import(load_model(model))
    context = context or make_context()
    try:
        with warnings.catch_warnings():
            # An output with an empty name (an unused optional output) has no type; the
            # importer warns and suggests its CLI's --clear-domain, which is not ours.
            warnings.filterwarnings("ignore", message="Found a node without a valid type proto")
            info = onnx_importer.ModelInfo(proto)
            module = info.create_module(context=context)
            onnx_importer.NodeImporter.define_function(info.main_graph, module.operation).import_all()
    except Exception as e:
        raise CompileStageError("import", f"{type(e).__name__}: {e}") from None
    return module


def compile(
    model: ModelLike,
    output_type: str = "linalg-on-tensors",
    context=None,
    options: Optional[LoweringOptions] = None,
    progress: Optional[Callable[[str], None]] = None,
):
    """Import ``model`` and lower it to ``output_type`` (one of :data:`OUTPUT_TYPES`).

    ``options`` are the plugin pass's (e.g. ``LoweringOptions(attention="sdpa")``);
    ``progress(stage)`` is called as each stage starts.
    """
    if output_type not in OUTPUT_TYPES:
        raise GqaTorchMlirError(f"output_type '{output_type}' is not one of {', '.join(OUTPUT_TYPES)}")
    if options is not None and not isinstance(options, LoweringOptions):
        raise GqaTorchMlirError(f"options must be a LoweringOptions (e.g. LoweringOptions(attention='sdpa')), got {type(options).__name__}")
    if progress:
        progress("import")
    module = import_onnx(model, context)
    lower(module, output_type, options, progress)
    return module


def lower(module, output_type: str, options: Optional[LoweringOptions] = None, progress=None) -> None:
    """Run the stages on an imported module, in place, up to ``output_type``."""
    for stage, pipeline, completes in STAGES:
        if progress:
            progress(stage)
        run_stage(module, stage, pipeline, options)
        if completes == output_type:
            return


def run_stage(module, stage: str, pipeline: Optional[str], options: Optional[LoweringOptions] = None) -> None:
    """One PassManager run; a failure raises CompileStageError with a repro command."""
    from torch_mlir.passmanager import PassManager

    with module.context:
        input_asm = module.operation.get_asm(enable_debug_info=True, large_elements_limit=16)
        pm = PassManager("builtin.module")
        if pipeline is None:
            PYTHON_PASSES[stage](pm, options)
        else:
            pm.add(pipeline)
        try:
            pm.run(module.operation)
        except Exception as e:
            ours = f"{PASS_ARGUMENT}{{{options.text()}}}" if options is not None and stage == PASS_ARGUMENT else stage
            full = ours if pipeline is None else f"builtin.module({pipeline})"
            raise CompileStageError(stage, str(e), repro_command(stage, input_asm, full)) from None
