// GatherBlockQuantized, 4 bits: rows gathered at clamped indices, unpacked (low nibble
// first), centered on 8 and scaled by the row's block scale; an out-of-range index gives zeros.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @gather_4bit_rows
// CHECK:         %[[GE:.+]] = torch.aten.ge.Scalar %arg1, %int-4
// CHECK:         %[[LT:.+]] = torch.aten.lt.Scalar %arg1, %int4
// CHECK:         %[[IN_RANGE:.+]] = torch.aten.logical_and %[[GE]], %[[LT]]
// CHECK:         torch.aten.clamp %{{.+}}, %int0, %int3
// CHECK:         %[[ROWS:.+]] = torch.aten.index.Tensor %arg0, {{.+}} -> !torch.vtensor<[3,16],ui8>
// CHECK:         torch.aten.bitwise_right_shift.Tensor {{.+}} -> !torch.vtensor<[3,16,2],si64>
// CHECK:         %[[SCALES:.+]] = torch.aten.index.Tensor %arg2, {{.+}} -> !torch.vtensor<[3,1],f32>
// CHECK:         %[[VALUES:.+]] = torch.aten.mul.Tensor {{.+}} -> !torch.vtensor<[3,32],f32>
// CHECK:         %[[KEEP:.+]] = torch.aten.unsqueeze %[[IN_RANGE]]
// CHECK:         %[[Y:.+]] = torch.aten.where.ScalarOther %[[KEEP]], %[[VALUES]], %float0.000000e00
// CHECK:         return %[[Y]] : !torch.vtensor<[3,32],f32>
func.func @gather_4bit_rows(%data: !torch.vtensor<[4,16],ui8>, %idx: !torch.vtensor<[3],si64>, %scales: !torch.vtensor<[4,1],f32>) -> !torch.vtensor<[3,32],f32> attributes {torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0 = torch.operator "onnx.GatherBlockQuantized"(%data, %idx, %scales) {torch.onnx.bits = 4 : si64, torch.onnx.block_size = 32 : si64, torch.onnx.gather_axis = 0 : si64, torch.onnx.quantize_axis = 1 : si64} : (!torch.vtensor<[4,16],ui8>, !torch.vtensor<[3],si64>, !torch.vtensor<[4,1],f32>) -> !torch.vtensor<[3,32],f32>
  return %0 : !torch.vtensor<[3,32],f32>
}
