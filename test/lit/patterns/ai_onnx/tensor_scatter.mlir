// TensorScatter (24): each batch row's update rows written at write_indices[b] + s, modulo
// the cache length in circular mode, checked (>= 0) and clamped, as one scatter on the axis.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @circular
// CHECK:         torch.runtime.assert {{.+}} "gqa-torch-mlir: TensorScatter: write_indices must be >= 0
// CHECK:         %[[ROWS:.+]] = torch.aten.add.Tensor {{.+}} -> !torch.vtensor<[2,2],si64>
// CHECK:         %[[WRAPPED:.+]] = torch.aten.remainder.Scalar %[[ROWS]], %int8
// CHECK:         torch.aten.clamp %[[WRAPPED]], %int0, %int7
// CHECK:         %[[INDEX:.+]] = torch.aten.expand {{.+}} -> !torch.vtensor<[2,3,2,4],si64>
// CHECK:         %[[PRESENT:.+]] = torch.aten.scatter.src %arg0, %int2, %[[INDEX]], %arg1
// CHECK:         return %[[PRESENT]]
func.func @circular(%past: !torch.vtensor<[2,3,8,4],f32>, %upd: !torch.vtensor<[2,3,2,4],f32>, %w: !torch.vtensor<[2],si64>) -> !torch.vtensor<[2,3,8,4],f32> attributes {torch.onnx_meta.opset_version = 24 : si64} {
  %0 = torch.operator "onnx.TensorScatter"(%past, %upd, %w) {torch.onnx.mode = "circular"} : (!torch.vtensor<[2,3,8,4],f32>, !torch.vtensor<[2,3,2,4],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[2,3,8,4],f32>
  return %0 : !torch.vtensor<[2,3,8,4],f32>
}
