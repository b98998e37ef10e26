// SkipSimplifiedLayerNormalization: the residual sum, then RMSNorm over the last dim in
// element order, divided by std (onnxruntime's rounding); output 3 is the sum itself.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @skip_rms
// CHECK:         %[[SUM:.+]] = torch.aten.add.Tensor %arg0, %arg1, {{.+}} -> !torch.vtensor<[1,2,16],f32>
// CHECK:         %[[SQ:.+]] = torch.aten.mul.Tensor %[[SUM]], %[[SUM]]
// CHECK:         %[[MEAN:.+]] = torch.aten.mean.dim %[[SQ]], {{.+}} -> !torch.vtensor<[1,2,1],f32>
// CHECK:         %[[VAR:.+]] = torch.aten.add.Scalar %[[MEAN]]
// CHECK:         %[[STD:.+]] = torch.aten.sqrt %[[VAR]]
// CHECK:         %[[XN:.+]] = torch.aten.div.Tensor %[[SUM]], %[[STD]] : {{.+}} -> !torch.vtensor<[1,2,16],f32>
// CHECK:         %[[Y:.+]] = torch.aten.mul.Tensor %[[XN]], %arg2
// CHECK:         return %[[Y]], %[[SUM]] : !torch.vtensor<[1,2,16],f32>, !torch.vtensor<[1,2,16],f32>
func.func @skip_rms(%x: !torch.vtensor<[1,2,16],f32>, %skip: !torch.vtensor<[1,2,16],f32>, %g: !torch.vtensor<[16],f32>) -> (!torch.vtensor<[1,2,16],f32>, !torch.vtensor<[1,2,16],f32>) attributes {torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0:4 = torch.operator "onnx.SkipSimplifiedLayerNormalization"(%x, %skip, %g) {torch.onnx.epsilon = 9.99999997E-7 : f32} : (!torch.vtensor<[1,2,16],f32>, !torch.vtensor<[1,2,16],f32>, !torch.vtensor<[16],f32>) -> (!torch.vtensor<[1,2,16],f32>, !torch.none, !torch.none, !torch.vtensor<[1,2,16],f32>)
  return %0#0, %0#3 : !torch.vtensor<[1,2,16],f32>, !torch.vtensor<[1,2,16],f32>
}
