// One op name, two domains: the importer writes onnx.RotaryEmbedding for both the
// standard op (opset 23) and com.microsoft's. The operands tell them apart (input 1
// is a float cos_cache in the standard op, int64 position_ids in the contrib one),
// checked against the function's opset imports.  (torch-mlir's own conversion would
// bind the contrib meaning to both, and computes even the contrib op wrongly.)
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s

// The standard op is lowered, with com.microsoft imported too.
// CHECK-LABEL: func.func @standard_rotary
// CHECK-NOT:     torch.operator "onnx.RotaryEmbedding"
// CHECK:         torch.aten.index.Tensor
func.func @standard_rotary(%x: !torch.vtensor<[1,2,3,8],f32>, %cos: !torch.vtensor<[16,4],f32>, %sin: !torch.vtensor<[16,4],f32>, %pos: !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,2,3,8],f32> attributes {torch.onnx_meta.opset_version = 23 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %cos, %sin, %pos) : (!torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,2,3,8],f32>
  return %0 : !torch.vtensor<[1,2,3,8],f32>
}

// -----

// The contrib op reaches its own lowering: position_ids is input 1, the caches inputs 2 and 3.
// CHECK-LABEL: func.func @contrib_rotary
// CHECK-NOT:     torch.operator "onnx.RotaryEmbedding"
// CHECK:         torch.aten.clamp %arg1
// CHECK:         torch.aten.index.Tensor %arg2
// CHECK:         torch.aten.index.Tensor %arg3
func.func @contrib_rotary(%x: !torch.vtensor<[1,3,16],f32>, %pos: !torch.vtensor<[1,3],si64>, %cos: !torch.vtensor<[16,4],f32>, %sin: !torch.vtensor<[16,4],f32>) -> !torch.vtensor<[1,3,16],f32> attributes {torch.onnx_meta.opset_version = 23 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %pos, %cos, %sin) : (!torch.vtensor<[1,3,16],f32>, !torch.vtensor<[1,3],si64>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[16,4],f32>) -> !torch.vtensor<[1,3,16],f32>
  return %0 : !torch.vtensor<[1,3,16],f32>
}
