// A node whose domain cannot be told, or whose operands contradict the model's opset
// imports, is refused by name and never lowered.
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

// Standard operands under a default opset below 23.
func.func @standard_operands_opset_22(%x: !torch.vtensor<[1,2,3,8],f32>, %cos: !torch.vtensor<[16,4],f32>, %sin: !torch.vtensor<[16,4],f32>, %pos: !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,2,3,8],f32> attributes {torch.onnx_meta.opset_version = 22 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{RotaryEmbedding: input 1: the operands are those of ai.onnx.RotaryEmbedding (since opset 23), but the model imports ai.onnx 22, com.microsoft 1}}
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %cos, %sin, %pos) : (!torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,2,3,8],f32>
  return %0 : !torch.vtensor<[1,2,3,8],f32>
}

// -----

// Input 1 fits neither signature.
func.func @neither(%x: !torch.vtensor<[1,2,3,8],f32>, %odd: !torch.vtensor<[16,4],i1>, %sin: !torch.vtensor<[16,4],f32>) -> !torch.vtensor<[1,2,3,8],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  // expected-error@+1 {{RotaryEmbedding: input 1: the node's domain cannot be told from its operands; supported: ai.onnx (23): input 1 is a float cos_cache; com.microsoft: input 1 is int64 position_ids}}
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %odd, %sin) : (!torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[16,4],i1>, !torch.vtensor<[16,4],f32>) -> !torch.vtensor<[1,2,3,8],f32>
  return %0 : !torch.vtensor<[1,2,3,8],f32>
}
