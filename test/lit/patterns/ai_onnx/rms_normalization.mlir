// The standard RMSNormalization (opset 23) in onnxruntime's rounding order, the same
// arithmetic as SimplifiedLayerNormalization: squares summed in 8 lanes, x * (1/std) * scale.
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @rms
// CHECK:         %[[SQ:.+]] = torch.aten.mul.Tensor %arg0, %arg0
// CHECK:         torch.aten.unflatten.int {{.+}} -> !torch.vtensor<[2,2,8],f32>
// CHECK:         torch.aten.sqrt
// CHECK:         %[[XN:.+]] = torch.aten.mul.Tensor %arg0, %{{.+}}
// CHECK:         %[[Y:.+]] = torch.aten.mul.Tensor %[[XN]], %arg1
// CHECK:         return %[[Y]]
func.func @rms(%x: !torch.vtensor<[2,16],f32>, %s: !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %0 = torch.operator "onnx.RMSNormalization"(%x, %s) {torch.onnx.epsilon = 9.99999997E-7 : f32} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16],f32>
  return %0 : !torch.vtensor<[2,16],f32>
}
