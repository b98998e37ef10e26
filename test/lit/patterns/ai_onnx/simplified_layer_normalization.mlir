// SimplifiedLayerNormalization in onnxruntime's rounding order: squares summed in 8 lanes
// (element i < 16 into lane i mod 8), lanes reduced as halves 8 -> 4 -> 2 -> 1, the last
// D mod 8 = 3 squares added one by one, then x * (1 / std) * scale.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @rms_lanes
// CHECK:         %[[SQ:.+]] = torch.aten.mul.Tensor %arg0, %arg0 : !torch.vtensor<[2,19],f32>, !torch.vtensor<[2,19],f32> -> !torch.vtensor<[2,19],f32>
// CHECK:         %[[HEAD:.+]] = torch.aten.slice.Tensor %[[SQ]], {{.+}} -> !torch.vtensor<[2,16],f32>
// CHECK:         %[[ROWS:.+]] = torch.aten.unflatten.int %[[HEAD]], {{.+}} -> !torch.vtensor<[2,2,8],f32>
// CHECK:         torch.aten.sum.dim_IntList %[[ROWS]], {{.+}} -> !torch.vtensor<[2,1,8],f32>
// CHECK:         torch.aten.add.Tensor {{.+}} -> !torch.vtensor<[2,4],f32>
// CHECK:         torch.aten.add.Tensor {{.+}} -> !torch.vtensor<[2,2],f32>
// CHECK:         %[[LANES:.+]] = torch.aten.add.Tensor {{.+}} -> !torch.vtensor<[2,1],f32>
// CHECK:         %[[X16:.+]] = torch.aten.slice.Tensor %[[SQ]], %{{.+}}, %int16, %int17, {{.+}} -> !torch.vtensor<[2,1],f32>
// CHECK:         %[[S16:.+]] = torch.aten.add.Tensor %[[LANES]], %[[X16]]
// CHECK:         %[[X17:.+]] = torch.aten.slice.Tensor %[[SQ]], %{{.+}}, %int17, %int18,
// CHECK:         %[[S17:.+]] = torch.aten.add.Tensor %[[S16]], %[[X17]]
// CHECK:         %[[X18:.+]] = torch.aten.slice.Tensor %[[SQ]], %{{.+}}, %int18, %int19,
// CHECK:         %[[SUM:.+]] = torch.aten.add.Tensor %[[S17]], %[[X18]]
// CHECK:         %[[MEAN:.+]] = torch.aten.div.Scalar %[[SUM]]
// CHECK:         %[[STD:.+]] = torch.aten.sqrt
// CHECK:         %[[INV:.+]] = torch.aten.div.Tensor %{{.+}}, %[[STD]]
// CHECK:         %[[XN:.+]] = torch.aten.mul.Tensor %arg0, %[[INV]]
// CHECK:         %[[Y:.+]] = torch.aten.mul.Tensor %[[XN]], %arg1
// CHECK:         return %[[Y]]
func.func @rms_lanes(%x: !torch.vtensor<[2,19],f32>, %s: !torch.vtensor<[19],f32>) -> !torch.vtensor<[2,19],f32> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %0 = torch.operator "onnx.SimplifiedLayerNormalization"(%x, %s) {torch.onnx.axis = -1 : si64, torch.onnx.epsilon = 9.99999997E-7 : f32} : (!torch.vtensor<[2,19],f32>, !torch.vtensor<[19],f32>) -> !torch.vtensor<[2,19],f32>
  return %0 : !torch.vtensor<[2,19],f32>
}
