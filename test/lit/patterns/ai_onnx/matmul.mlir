// ONNX MatMul of [.., K] activations by a constant [K, N] weight: the leading
// dims flattened, one aten.mm on the weight as it is, the result unflattened.
// torch-mlir's aten.matmul broadcast the weight to [B, K, N]; with a static
// batch IREE folded that into a second copy of the weight. Other MatMuls are
// left to torch-mlir.
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s
// RUN: gqa-torch-mlir-opt --split-input-file --pass-pipeline='builtin.module(convert-onnx-gqa-to-torch, torch-onnx-to-torch-backend-pipeline{backend-legal-ops=aten.flatten.using_ints,aten.unflatten.int}, torch-backend-to-linalg-on-tensors-backend-pipeline)' %s | FileCheck %s --check-prefix=LINALG

// CHECK-LABEL: func.func @by_weight
// CHECK-NOT:     onnx.MatMul
// CHECK:         %[[W:.+]] = torch.operator "onnx.Constant"
// CHECK:         %[[X_MK:.+]] = torch.aten.flatten.using_ints %arg0, %{{.+}}, %{{.+}} : !torch.vtensor<[?,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[?,16],f32>
// CHECK:         %[[Y_MN:.+]] = torch.aten.mm %[[X_MK]], %[[W]] : !torch.vtensor<[?,16],f32>, !torch.vtensor<[16,8],f32> -> !torch.vtensor<[?,8],f32>
// CHECK:         %[[Y:.+]] = torch.aten.unflatten.int %[[Y_MN]], %{{.+}}, %{{.+}} : !torch.vtensor<[?,8],f32>, !torch.int, !torch.list<int> -> !torch.vtensor<[?,?,8],f32>
// CHECK:         return %[[Y]]
// LINALG-LABEL: func.func @by_weight
// LINALG-NOT:     linalg.batch_matmul
// LINALG:         linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<?x16xf32>, tensor<16x8xf32>)
// LINALG-NOT:     linalg.batch_matmul
func.func @by_weight(%x: !torch.vtensor<[?,?,16],f32>) -> !torch.vtensor<[?,?,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %w = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.5> : tensor<16x8xf32>} : () -> !torch.vtensor<[16,8],f32>
  %0 = torch.operator "onnx.MatMul"(%x, %w) : (!torch.vtensor<[?,?,16],f32>, !torch.vtensor<[16,8],f32>) -> !torch.vtensor<[?,?,8],f32>
  return %0 : !torch.vtensor<[?,?,8],f32>
}

// -----

// The static decode shape: the weight stays [16, 8].
// CHECK-LABEL: func.func @static_row
// CHECK:         torch.aten.mm %{{.+}}, %{{.+}} : !torch.vtensor<[1,16],f32>, !torch.vtensor<[16,8],f32> -> !torch.vtensor<[1,8],f32>
// CHECK:         torch.aten.unflatten.int %{{.+}} -> !torch.vtensor<[1,1,8],f32>
// LINALG-LABEL: func.func @static_row
// LINALG-NOT:     linalg.batch_matmul
// LINALG:         linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1x16xf32>, tensor<16x8xf32>)
func.func @static_row(%x: !torch.vtensor<[1,1,16],f32>) -> !torch.vtensor<[1,1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %w = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.5> : tensor<16x8xf32>} : () -> !torch.vtensor<[16,8],f32>
  %0 = torch.operator "onnx.MatMul"(%x, %w) : (!torch.vtensor<[1,1,16],f32>, !torch.vtensor<[16,8],f32>) -> !torch.vtensor<[1,1,8],f32>
  return %0 : !torch.vtensor<[1,1,8],f32>
}

// -----

// A run-time right operand, and 2-D activations: torch-mlir's lowering.
// CHECK-LABEL: func.func @left_alone
// CHECK:         torch.operator "onnx.MatMul"(%arg0, %arg1)
// CHECK:         torch.operator "onnx.MatMul"(%arg2, %{{.+}})
// CHECK-NOT:     torch.aten.mm
func.func @left_alone(%x: !torch.vtensor<[2,3,16],f32>, %y: !torch.vtensor<[16,8],f32>, %z: !torch.vtensor<[3,16],f32>) -> (!torch.vtensor<[2,3,8],f32>, !torch.vtensor<[3,8],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %w = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.5> : tensor<16x8xf32>} : () -> !torch.vtensor<[16,8],f32>
  %0 = torch.operator "onnx.MatMul"(%x, %y) : (!torch.vtensor<[2,3,16],f32>, !torch.vtensor<[16,8],f32>) -> !torch.vtensor<[2,3,8],f32>
  %1 = torch.operator "onnx.MatMul"(%z, %w) : (!torch.vtensor<[3,16],f32>, !torch.vtensor<[16,8],f32>) -> !torch.vtensor<[3,8],f32>
  return %0, %1 : !torch.vtensor<[2,3,8],f32>, !torch.vtensor<[3,8],f32>
}
