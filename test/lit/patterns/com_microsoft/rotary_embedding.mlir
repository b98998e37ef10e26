// com.microsoft.RotaryEmbedding: position_ids of one element is the first token's position
// (token s at p + s, broadcast over the batch); heads derived from the cos_cache width when
// num_heads is absent (16 / (2 * 4) = 2); cos/sin rows gathered, halves rotated.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @offset_positions
// CHECK:         torch.aten.unflatten.int %arg0, {{.+}} -> !torch.vtensor<[2,3,2,8],f32>
// CHECK:         %[[ARANGE:.+]] = torch.aten.arange {{.+}} -> !torch.vtensor<[3],si64>
// CHECK:         %[[POS:.+]] = torch.aten.add.Tensor {{.+}}, %[[ARANGE]], {{.+}} -> !torch.vtensor<[1,3],si64>
// CHECK:         torch.aten.expand %[[POS]], {{.+}} -> !torch.vtensor<[2,3],si64>
// CHECK:         torch.runtime.assert {{.+}} "gqa-torch-mlir: com.microsoft.RotaryEmbedding: position_ids must lie in [0, cos_cache rows)
// CHECK:         torch.aten.index.Tensor %arg2, {{.+}} -> !torch.vtensor<[2,3,4],f32>
// CHECK:         torch.aten.index.Tensor %arg3, {{.+}} -> !torch.vtensor<[2,3,4],f32>
// CHECK:         %[[Y:.+]] = torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[2,3,16],f32>
// CHECK:         return %[[Y]]
func.func @offset_positions(%x: !torch.vtensor<[2,3,16],f32>, %pos: !torch.vtensor<[1],si64>, %cos: !torch.vtensor<[16,4],f32>, %sin: !torch.vtensor<[16,4],f32>) -> !torch.vtensor<[2,3,16],f32> attributes {torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %pos, %cos, %sin) : (!torch.vtensor<[2,3,16],f32>, !torch.vtensor<[1],si64>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[16,4],f32>) -> !torch.vtensor<[2,3,16],f32>
  return %0 : !torch.vtensor<[2,3,16],f32>
}
