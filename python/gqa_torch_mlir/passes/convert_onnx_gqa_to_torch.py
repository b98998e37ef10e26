"""The ``convert-onnx-gqa-to-torch`` pass: registered ONNX lowerings as MLIR rewrite patterns.

One pattern roots on ``torch.operator`` and dispatches on its ``name``
attribute through the :mod:`registry`.  It is applied with the walk-based
driver (ops that Python patterns create are not revisited, llvm-project
#163694, and need not be).  An op whose lowering refuses is left in place and
reported as an error at its location with the reason; the pass then fails.
An op name two domains define (RotaryEmbedding, Attention) is first told
apart by its operands and the model's opset imports (dispatch.py).
It must run before torch-mlir's ``convert-torch-onnx-to-torch``, whose own
C++ GroupQueryAttention lowering must never see the op.  Last, a uint8
constant that a function returns is routed through two bitwise NOTs
(function_outputs.py), which torch-mlir's backend conversion needs, and with
device=gpu (and always in the IREE backends) the run-time checks move to the
end of their function (deferred_checks.py).

The bindings are taken from the op handed to the pass, so the same pass runs
inside torch-mlir's and IREE's Python bindings.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import List, Optional

from .. import patterns as _patterns  # noqa: F401  (registers the lowerings)
from ..binder import OpBinder
from ..builder import TorchBuilder, TypeCache
from ..deferred_checks import defer_runtime_checks
from ..dispatch import domain_of
from ..errors import LoweringError
from ..function_outputs import guard_constant_uint8_results
from ..options import LoweringOptions
from ..registry import NOT_LOWERED, REGISTRY, Refusal, Registry

PASS_ARGUMENT = "convert-onnx-gqa-to-torch"
PASS_NAME = "ConvertOnnxGqaToTorch"
PASS_DESCRIPTION = "Lower onnx.GroupQueryAttention (and other registered ONNX ops) to torch-dialect ops"

# The newest version of each contrib domain onnxruntime defines: it refuses a model importing a newer one.
NEWEST_OPSET = {"com.microsoft": 1}


@dataclass
class RefusedOp:
    location: object
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


def bindings_of(op):
    """The ``(ir, rewrite)`` modules of the bindings ``op`` comes from."""
    ir = sys.modules[type(op.operation).__module__]
    package = ir.__name__.rsplit(".", 1)[0]
    return ir, importlib.import_module(package + ".rewrite")


def _opset_lookup(ir, op):
    """``domain -> opset`` read from the enclosing function's ONNX metadata."""
    parent = op.parent
    while parent is not None and "torch.onnx_meta.opset_version" not in parent.attributes:
        parent = parent.parent
    if parent is None:
        return lambda domain: None
    attrs = parent.attributes
    default = int(ir.IntegerAttr(attrs["torch.onnx_meta.opset_version"]).value)
    others = {}
    if "torch.onnx_meta.opset_versions" in attrs:
        d = ir.DictAttr(attrs["torch.onnx_meta.opset_versions"])
        for i in range(len(d)):
            named = d[i]
            others[named.name] = int(ir.IntegerAttr(named.attr).value)

    def opset_of(domain: str) -> Optional[int]:
        # A domain the function does not list has no known version (torch-mlir's own tests
        # write com.microsoft ops under a default opset of 22): not the default domain's.
        return default if domain == "" else others.get(domain)

    return opset_of


def apply_lowerings(root, registry: Registry = REGISTRY, options: Optional[LoweringOptions] = None,
                    route_uint8_results: bool = True, defer_checks: "Optional[bool | str]" = None) -> List[RefusedOp]:
    """Lower every ``torch.operator`` under ``root`` that ``registry`` holds; return the refusals.

    ``defer_checks``: move the run-time checks to the end of their function
    (deferred_checks.py); None: with device=gpu only.  The IREE backends
    defer them on every device; ``"result"`` (iree-cpu) makes each public
    function return them instead, for the caller to read.
    (The guard pass runs its own registry through this driver, without the uint8 routing.)"""
    root = root.operation
    ir, rewrite = bindings_of(root)
    types = TypeCache(ir, root.context)
    refused: List[RefusedOp] = []
    if options is not None and not _has_iree_dialects(root.context):
        if options.attention == "fused":
            return [RefusedOp(root.location, FUSED_OUTSIDE_IREE)]
        if options.matmul_nbits != "dequantize":
            return [RefusedOp(root.location, NBITS_KERNEL_OUTSIDE_IREE.format(form=options.matmul_nbits))]

    def pattern(op, rewriter):
        op = op.operation
        name = ir.StringAttr(op.attributes["name"]).value
        try:
            opset_of = _opset_lookup(ir, op)
        except (ValueError, TypeError) as e:
            if registry.candidates(name):
                refused.append(RefusedOp(op.location, f"{name}: the function's torch.onnx_meta.opset_version(s) must hold integers ({e})"))
            return True
        try:
            domain = domain_of(name, OpBinder(op, ir, options), opset_of)
        except Refusal as r:
            refused.append(RefusedOp(op.location, r.message(name.split(".", 1)[1])))
            return True
        lowering = registry.lookup(name, opset_of, domain)
        if lowering is None:
            # A registered op outside every lowering's versions is refused, never
            # left to torch-mlir's own conversion (its GQA lowering must not see it).
            # A shared name whose node is of a domain with no lowering here is left to it.
            candidates = registry.candidates(name, domain)
            if candidates:
                first = min(candidates, key=lambda e: e.since)
                version = opset_of(first.domain)
                refused.append(RefusedOp(op.location, f"{first.label}: the model's opset {version} for domain '{first.domain or 'ai.onnx'}' is below the lowest version lowered ({first.since})"))
            return True
        newest, version = NEWEST_OPSET.get(lowering.domain), opset_of(lowering.domain)
        if newest is not None and version is not None and version > newest:
            refused.append(RefusedOp(op.location, f"{lowering.label}: the model's opset {version} for domain '{lowering.domain}' is newer than onnxruntime defines ({newest})"))
            return True
        try:
            builder = TorchBuilder(ir, types, rewriter.ip, op.location)
            with op.location:  # default location and context for attribute builders
                result = lowering.fn(OpBinder(op, ir, options), builder)
            if isinstance(result, Refusal):
                raise result
            if result is NOT_LOWERED:
                return True
        except Refusal as r:
            refused.append(RefusedOp(op.location, r.message(lowering.label)))
            return True
        except Exception as e:  # a bug in a lowering must not take the process down
            refused.append(RefusedOp(op.location, f"{lowering.label}: internal error in lowering: {type(e).__name__}: {e}"))
            return True
        rewriter.replace_op(op, list(result))
        return None

    patterns = rewrite.RewritePatternSet(root.context)
    patterns.add("torch.operator", pattern)
    rewrite.walk_and_apply_patterns(root, patterns.freeze())
    if types.functions and not refused:
        _add_functions(ir, root, types.functions)
    if route_uint8_results:
        guard_constant_uint8_results(root, ir)  # function_outputs.py: a torch-mlir fold cannot type them
    if defer_checks is None:
        defer_checks = options is not None and options.device == "gpu"
    if defer_checks and not refused:
        # deferred_checks.py: one host read per call, at the end; or none, the checks returned
        defer_runtime_checks(root, ir, as_result=defer_checks == "result")
    return refused


FUSED_OUTSIDE_IREE = (
    "attention=fused emits IREE dispatches (flow.dispatch of a stream.executable, kernels/): it runs only inside "
    "IREE's compiler (the iree-cpu backend); use attention=decomposed here")
NBITS_KERNEL_OUTSIDE_IREE = (
    "matmul_nbits={form} emits an IREE dispatch (flow.dispatch of a stream.executable, kernels/nbits_matmul*.py): it "
    "runs only inside IREE's compiler (the iree-cpu backend); use matmul_nbits=dequantize here")


def _has_iree_dialects(context) -> bool:
    """Whether ``context`` knows IREE's flow and stream dialects (IREE's bindings do; torch-mlir's do not)."""
    try:
        context.dialects["flow"], context.dialects["stream"]  # noqa: B018  loads them
    except (IndexError, KeyError, ValueError, AttributeError):
        return False
    return True


def _add_functions(ir, root, functions) -> None:
    """The functions the lowerings call (``functions``: symbol -> text of the function and the
    executables it dispatches), parsed into ``root``: the executables stay, each call is replaced
    by its function's body and the function dropped.  IREE's torch input pipeline converts only
    calls it can inline (a call left inside a ``torch.prim.If`` fails its func conversion)."""
    body = root.regions[0].blocks[0]
    callees = {}
    for symbol, text in functions.items():
        parsed = ir.Module.parse(text, root.context)
        for op in list(parsed.body.operations):
            op = op.operation
            if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == symbol:
                callees[symbol] = op
            op.detach_from_parent()
            body.append(op)
    calls = []

    def collect(op):
        if op.name == "func.call" and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in callees:
            calls.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(collect)
    for call in calls:
        _inline(ir, call, callees[ir.FlatSymbolRefAttr(call.attributes["callee"]).value])
    for callee in callees.values():
        callee.erase()


def _inline(ir, call, callee) -> None:
    """``call`` replaced by a copy of ``callee``'s one block (flat: no op in it has a region)."""
    block = callee.regions[0].blocks[0]
    mapping = {arg: operand for arg, operand in zip(block.arguments, call.operands)}
    ip = ir.InsertionPoint(call)
    for op in block.operations:
        op = op.operation
        if op.name == "func.return":
            for result, value in zip(call.results, op.operands):
                result.replace_all_uses_with(mapping.get(value, value))
            break
        copy = op.clone(ip=ip)
        for i, operand in enumerate(op.operands):
            if operand in mapping:
                copy.operands[i] = mapping[operand]
        for old, new in zip(op.results, copy.results):
            mapping[old] = new
    call.erase()


def run_pass(op, pass_, options: Optional[LoweringOptions] = None, apply=None, argument: str = PASS_ARGUMENT) -> None:
    """The pass body: lower (``apply(op)``, by default :func:`apply_lowerings`), then report each
    refusal at its op and fail."""
    try:
        refused = apply(op) if apply is not None else apply_lowerings(op, options=options)
    except Exception as e:  # never let a Python error escape into the pass manager
        refused = [RefusedOp(op.location, f"{argument}: internal error: {type(e).__name__}: {e}")]
    for r in refused:
        r.location.emit_error(r.message)
    if refused:
        pass_.signal_pass_failure()


def add_pass(pm, options: Optional[LoweringOptions] = None) -> None:
    """Append ``convert-onnx-gqa-to-torch`` to a (module-anchored) PassManager."""

    def run(op, pass_):
        run_pass(op, pass_, options)

    pm.add(run, name=PASS_NAME, argument=PASS_ARGUMENT, description=PASS_DESCRIPTION)


def lower_module(module, registry: Registry = REGISTRY, options: Optional[LoweringOptions] = None) -> None:
    """Python API: lower in place; raise :class:`LoweringError` listing every refusal."""
    refused = apply_lowerings(module.operation, registry, options)
    if refused:
        lines = "\n".join(f"error: {r}" for r in refused)
        raise LoweringError(f"{PASS_ARGUMENT} failed:\n{lines}", [str(r) for r in refused])
