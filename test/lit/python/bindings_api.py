# RUN: %PYTHON %s | FileCheck %s
#
# One test per MLIR Python bindings API the plugin stands on (these APIs moved
# during upstream review; the wheel is pinned and these tests tell when a new
# one breaks us), plus the registry's dispatch by ONNX name and opset.

from torch_mlir import ir, passmanager, rewrite

from gqa_torch_mlir.binder import OpBinder
from gqa_torch_mlir.context import make_context
from gqa_torch_mlir.passes import apply_lowerings
from gqa_torch_mlir.registry import Refusal, Registry

TESTS = []


def run(f):
    print(f"TEST: {f.__name__}")
    with make_context(), ir.Location.unknown():
        f()
    return f


ADD = """
func.func @f(%a: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> attributes {torch.onnx_meta.opset_version = %OPSET% : si64} {
  %0 = torch.operator "onnx.Foo"(%a) {torch.onnx.alpha = 2 : si64} : (!torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32>
  return %0 : !torch.vtensor<[2],f32>
}
"""


# CHECK-LABEL: TEST: pattern_set_add_with_op_name_and_walk_driver
# CHECK: torch.aten.neg %arg0
# CHECK-NOT: torch.operator
@run
def pattern_set_add_with_op_name_and_walk_driver():
    module = ir.Module.parse(ADD.replace("%OPSET%", "17"))

    def to_neg(op, rewriter):
        (res,) = ir.Operation.create("torch.aten.neg", results=[op.results[0].type], operands=[op.operands[0]], ip=rewriter.ip).results
        rewriter.replace_op(op, [res])

    patterns = rewrite.RewritePatternSet()
    patterns.add("torch.operator", to_neg)
    rewrite.walk_and_apply_patterns(module.operation, patterns.freeze())
    print(module)


# CHECK-LABEL: TEST: truthy_return_means_no_match
# CHECK: torch.operator "onnx.Foo"
@run
def truthy_return_means_no_match():
    module = ir.Module.parse(ADD.replace("%OPSET%", "17"))
    patterns = rewrite.RewritePatternSet()
    patterns.add("torch.operator", lambda op, rewriter: True)
    rewrite.walk_and_apply_patterns(module.operation, patterns.freeze())
    print(module)


# CHECK-LABEL: TEST: python_pass_mixed_with_textual_elements
# CHECK: python pass ran on builtin.module
# CHECK: func.func @f
@run
def python_pass_mixed_with_textual_elements():
    module = ir.Module.parse(ADD.replace("%OPSET%", "17"))
    pm = passmanager.PassManager("builtin.module")
    pm.add(lambda op, pass_: print("python pass ran on", op.name), name="Probe", argument="probe")
    pm.add("func.func(canonicalize)")
    pm.run(module.operation)
    print(module)


# CHECK-LABEL: TEST: emit_error_and_signal_pass_failure
# CHECK: caught MLIRError: probe failed here
@run
def emit_error_and_signal_pass_failure():
    module = ir.Module.parse(ADD.replace("%OPSET%", "17"))

    def failing(op, pass_):
        op.location.emit_error("probe failed here")
        pass_.signal_pass_failure()

    pm = passmanager.PassManager("builtin.module")
    pm.add(failing, name="Failing", argument="failing")
    try:
        pm.run(module.operation)
    except ir.MLIRError as e:
        print("caught MLIRError:", e.error_diagnostics[0].message)


# CHECK-LABEL: TEST: op_with_regions_and_appended_blocks
# CHECK: torch.prim.If %{{.+}} -> (!torch.vtensor<[2],f32>) {
# CHECK-NEXT: torch.aten.neg %arg0
# CHECK-NEXT: torch.prim.If.yield
# CHECK-NEXT: } else {
# CHECK-NEXT: torch.prim.If.yield %arg0
@run
def op_with_regions_and_appended_blocks():
    module = ir.Module.parse(ADD.replace("%OPSET%", "17"))
    foo = next(op for op in module.body.operations[0].regions[0].blocks[0].operations if op.operation.name == "torch.operator")
    arg, f32x2 = foo.operands[0], foo.results[0].type
    true = ir.Operation.create("torch.constant.bool", results=[ir.Type.parse("!torch.bool")], attributes={"value": ir.BoolAttr.get(True)}, ip=ir.InsertionPoint(foo))
    if_op = ir.Operation.create("torch.prim.If", results=[f32x2], operands=[true.result], regions=2, ip=ir.InsertionPoint(foo))
    then_block, else_block = (region.blocks.append() for region in if_op.regions)
    neg = ir.Operation.create("torch.aten.neg", results=[f32x2], operands=[arg], ip=ir.InsertionPoint(then_block))
    ir.Operation.create("torch.prim.If.yield", operands=[neg.result], ip=ir.InsertionPoint(then_block))
    ir.Operation.create("torch.prim.If.yield", operands=[arg], ip=ir.InsertionPoint(else_block))
    module.operation.verify()
    print(module)


def _toy_registry():
    registry = Registry()

    @registry.register("Foo", since=1)
    def foo_v1(b: OpBinder, tb):
        return [tb.tensor_op("torch.aten.neg", [b.op.operands[0]], (2,), "f32").value]

    @registry.register("Foo", since=20)
    def foo_v20(b: OpBinder, tb):
        if b.attr_int("alpha", 1) != 1:
            raise Refusal("value 2 is not supported; supported: 1", "attribute 'alpha'")
        return [b.op.operands[0]]

    return registry


# CHECK-LABEL: TEST: registry_picks_by_opset
# CHECK: opset 17 refusals: {{$}}
# CHECK: torch.aten.neg
# CHECK: opset 21 refusals: loc("-":3:8): ai.onnx.Foo: attribute 'alpha': value 2 is not supported; supported: 1
@run
def registry_picks_by_opset():
    registry = _toy_registry()
    for opset in (17, 21):
        module = ir.Module.parse(ADD.replace("%OPSET%", str(opset)))
        refused = apply_lowerings(module.operation, registry)
        print(f"opset {opset} refusals:", " | ".join(str(r) for r in refused))
        if opset == 17:
            print(module)


# CHECK-LABEL: TEST: duplicate_registration_is_an_error
# CHECK: ValueError: ai.onnx.Foo since 1 is registered twice
@run
def duplicate_registration_is_an_error():
    registry = _toy_registry()
    try:
        registry.register("Foo", since=1)(lambda b, tb: None)
    except ValueError as e:
        print("ValueError:", e)
