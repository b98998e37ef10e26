// The standard RotaryEmbedding (opset 23): a 3-D input split into heads, cos/sin rows
// gathered at the checked (and clamped) position_ids, the first rotary_embedding_dim
// dims rotated as halves (a dim of 2, swapped by a flip), the rest passed through, the heads
// merged back.
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @rotary_3d_partial
// CHECK:         %[[X:.+]] = torch.aten.transpose.int {{.+}} -> !torch.vtensor<[1,2,3,16],f32>
// CHECK:         torch.runtime.assert {{.+}} "gqa-torch-mlir: RotaryEmbedding: position_ids must lie in [0, cos_cache rows)
// CHECK:         %[[POS:.+]] = torch.aten.clamp %arg3
// CHECK:         %[[COS:.+]] = torch.aten.index.Tensor %arg1, {{.+}} -> !torch.vtensor<[1,3,4],f32>
// CHECK:         %[[SIN:.+]] = torch.aten.index.Tensor %arg2, {{.+}} -> !torch.vtensor<[1,3,4],f32>
// CHECK:         %[[R:.+]] = torch.aten.slice.Tensor %[[X]], %int3, %int0, %int8, %int1
// CHECK:         %[[HALVES:.+]] = torch.aten.unflatten.int %[[R]], %int3, {{.+}} -> !torch.vtensor<[1,2,3,2,4],f32>
// CHECK:         %[[SWAPPED:.+]] = torch.aten.flip %[[HALVES]], {{.+}} -> !torch.vtensor<[1,2,3,2,4],f32>
// CHECK:         torch.aten.mul.Tensor %[[SWAPPED]], {{.+}} : !torch.vtensor<[1,2,3,2,4],f32>, !torch.vtensor<[2,1],f32>
// CHECK:         torch.aten.add.Tensor {{.+}} -> !torch.vtensor<[1,2,3,2,4],f32>
// CHECK:         torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[1,2,3,8],f32>
// CHECK:         torch.aten.slice.Tensor %[[X]], %int3, %int8, %int16, %int1
// CHECK:         torch.aten.cat {{.+}} -> !torch.vtensor<[1,2,3,16],f32>
// CHECK:         %[[Y:.+]] = torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[1,3,32],f32>
// CHECK:         return %[[Y]]
func.func @rotary_3d_partial(%x: !torch.vtensor<[1,3,32],f32>, %cos: !torch.vtensor<[16,4],f32>, %sin: !torch.vtensor<[16,4],f32>, %pos: !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,3,32],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %cos, %sin, %pos) {torch.onnx.num_heads = 2 : si64, torch.onnx.rotary_embedding_dim = 8 : si64} : (!torch.vtensor<[1,3,32],f32>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,3,32],f32>
  return %0 : !torch.vtensor<[1,3,32],f32>
}

// -----

// Without position_ids the caches are per token, [B,S,R/2].
// CHECK-LABEL: func.func @rotary_per_token
// CHECK-NOT:     torch.aten.index.Tensor
// CHECK:         torch.aten.unsqueeze %arg1, %int1 {{.+}} -> !torch.vtensor<[1,1,3,4],f32>
func.func @rotary_per_token(%x: !torch.vtensor<[1,2,3,8],f32>, %cos: !torch.vtensor<[1,3,4],f32>, %sin: !torch.vtensor<[1,3,4],f32>) -> !torch.vtensor<[1,2,3,8],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %cos, %sin) : (!torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[1,3,4],f32>, !torch.vtensor<[1,3,4],f32>) -> !torch.vtensor<[1,2,3,8],f32>
  return %0 : !torch.vtensor<[1,2,3,8],f32>
}
