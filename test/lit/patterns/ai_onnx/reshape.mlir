// ONNX Reshape with a shape known only at run time: the target dims are
// resolved and checked by exact division, and the data is flattened and
// unflattened to them. torch-mlir's own lowering divided the element count by
// the product of the dims (SIGFPE on an empty input); the lowered code here
// divides only by max(dim, 1). Constant shapes are left to torch-mlir.
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s
// RUN: gqa-torch-mlir-opt --split-input-file --pass-pipeline='builtin.module(convert-onnx-gqa-to-torch, torch-onnx-to-torch-backend-pipeline{backend-legal-ops=aten.flatten.using_ints,aten.unflatten.int}, torch-backend-to-linalg-on-tensors-backend-pipeline)' %s | FileCheck %s --check-prefix=LINALG

// CHECK-LABEL: func.func @runtime_shape
// CHECK-NOT:     onnx.Reshape
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: Reshape: shape may hold one -1 and no other negative value (onnxruntime rejects it) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: Reshape: a -1 in shape cannot be inferred next to a dimension of 0 (the ONNX spec and onnxruntime reject it) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: Reshape: the dims of shape must multiply to the data's element count
// CHECK:         %[[FLAT:.+]] = torch.aten.flatten.using_ints %arg0, %{{.+}}, %{{.+}} : !torch.vtensor<[?,64],f32>, !torch.int, !torch.int -> !torch.vtensor<[?],f32>
// CHECK:         %[[OUT:.+]] = torch.aten.unflatten.int %[[FLAT]], %{{.+}}, %{{.+}} : !torch.vtensor<[?],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?],f32>
// CHECK:         return %[[OUT]]
// LINALG-LABEL: func.func @runtime_shape
// LINALG-NOT:     arith.divsi
// LINALG:         tensor.collapse_shape
// LINALG-NOT:     arith.divsi
// LINALG:         tensor.reshape
func.func @runtime_shape(%x: !torch.vtensor<[?,64],f32>, %shape: !torch.vtensor<[2],si64>) -> !torch.vtensor<[?,?],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Reshape"(%x, %shape) {torch.onnx.allowzero = 0 : si64} : (!torch.vtensor<[?,64],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[?,?],f32>
  return %0 : !torch.vtensor<[?,?],f32>
}

// -----

// CHECK-LABEL: func.func @constant_shape
// CHECK-NOT:     torch.runtime.assert
// CHECK:         torch.operator "onnx.Reshape"
func.func @constant_shape(%x: !torch.vtensor<[?,64],f32>) -> !torch.vtensor<[?,8,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %shape = torch.operator "onnx.Constant"() {torch.onnx.value = dense<[0, 8, -1]> : tensor<3xsi64>} : () -> !torch.vtensor<[3],si64>
  %0 = torch.operator "onnx.Reshape"(%x, %shape) : (!torch.vtensor<[?,64],f32>, !torch.vtensor<[3],si64>) -> !torch.vtensor<[?,8,8],f32>
  return %0 : !torch.vtensor<[?,8,8],f32>
}
