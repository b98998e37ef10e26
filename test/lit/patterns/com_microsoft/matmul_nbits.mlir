// MatMulNBits, 4 bits, one block of 32 along K, no zero points: each byte's two nibbles
// (low first) minus the default zero point 8, times the block's scale, then A x B^T.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @matmul_4bit
// CHECK:         %[[SHIFTED:.+]] = torch.aten.bitwise_right_shift.Tensor {{.+}} -> !torch.vtensor<[8,1,16,2],si64>
// CHECK:         %[[NIBBLES:.+]] = torch.aten.bitwise_and.Scalar %[[SHIFTED]], %int15
// CHECK:         %[[CODES:.+]] = torch.aten.flatten.using_ints %[[NIBBLES]], {{.+}} -> !torch.vtensor<[8,1,32],si64>
// CHECK:         %[[CODES_F:.+]] = torch.aten.to.dtype %[[CODES]], {{.+}} -> !torch.vtensor<[8,1,32],f32>
// CHECK:         %[[CENTERED:.+]] = torch.aten.add.Scalar %[[CODES_F]], %float-8.000000e00
// CHECK:         %[[B_NKb:.+]] = torch.aten.mul.Tensor %[[CENTERED]], {{.+}} -> !torch.vtensor<[8,1,32],f32>
// CHECK:         %[[B_NK:.+]] = torch.aten.flatten.using_ints %[[B_NKb]], {{.+}} -> !torch.vtensor<[8,32],f32>
// CHECK:         %[[B_KN:.+]] = torch.aten.transpose.int %[[B_NK]], {{.+}} -> !torch.vtensor<[32,8],f32>
// CHECK:         %[[Y:.+]] = torch.aten.matmul %arg0, %[[B_KN]] : !torch.vtensor<[2,32],f32>, !torch.vtensor<[32,8],f32> -> !torch.vtensor<[2,8],f32>
// CHECK:         return %[[Y]]
func.func @matmul_4bit(%a: !torch.vtensor<[2,32],f32>, %b: !torch.vtensor<[8,1,16],ui8>, %scales: !torch.vtensor<[8],f32>) -> !torch.vtensor<[2,8],f32> attributes {torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0 = torch.operator "onnx.MatMulNBits"(%a, %b, %scales) {torch.onnx.K = 32 : si64, torch.onnx.N = 8 : si64, torch.onnx.bits = 4 : si64, torch.onnx.block_size = 32 : si64} : (!torch.vtensor<[2,32],f32>, !torch.vtensor<[8,1,16],ui8>, !torch.vtensor<[8],f32>) -> !torch.vtensor<[2,8],f32>
  return %0 : !torch.vtensor<[2,8],f32>
}
