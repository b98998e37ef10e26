// Gelu with approximate = "tanh", spelled out: 0.5 x (1 + tanh(x (sqrt(2/pi) + 0.044715 sqrt(2/pi) x^2))).
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @gelu_tanh
// CHECK:         %[[X2:.+]] = torch.aten.mul.Tensor %arg0, %arg0
// CHECK:         %[[C:.+]] = torch.aten.mul.Scalar %[[X2]], %float3.567740e-02
// CHECK:         %[[INNER:.+]] = torch.aten.add.Scalar %[[C]], %float7.978850e-01
// CHECK:         %[[ARG:.+]] = torch.aten.mul.Tensor %arg0, %[[INNER]]
// CHECK:         %[[T:.+]] = torch.aten.tanh %[[ARG]]
// CHECK:         %[[HALF:.+]] = torch.aten.mul.Scalar %arg0, %float5.000000e-01
// CHECK:         %[[ONE_T:.+]] = torch.aten.add.Scalar %[[T]], %float1.000000e00
// CHECK:         %[[Y:.+]] = torch.aten.mul.Tensor %[[HALF]], %[[ONE_T]]
// CHECK:         return %[[Y]] : !torch.vtensor<[2,8],f32>
func.func @gelu_tanh(%x: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %0 = torch.operator "onnx.Gelu"(%x) {torch.onnx.approximate = "tanh"} : (!torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>
  return %0 : !torch.vtensor<[2,8],f32>
}
