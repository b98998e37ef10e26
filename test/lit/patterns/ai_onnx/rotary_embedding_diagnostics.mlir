// Refusals of the standard RotaryEmbedding (opset 23): the attribute or input is named, with what is supported.
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

// A 3-D input needs num_heads.
func.func @rotary_3d_without_heads(%x: !torch.vtensor<[1,3,32],f32>, %cos: !torch.vtensor<[16,8],f32>, %sin: !torch.vtensor<[16,8],f32>, %pos: !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,3,32],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  // expected-error@+1 {{ai.onnx.RotaryEmbedding: attribute 'num_heads': value 0 is not supported for a 3-D X; supported: the number of heads, >= 1}}
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %cos, %sin, %pos) : (!torch.vtensor<[1,3,32],f32>, !torch.vtensor<[16,8],f32>, !torch.vtensor<[16,8],f32>, !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,3,32],f32>
  return %0 : !torch.vtensor<[1,3,32],f32>
}

// -----

// The caches' width must be rotary_embedding_dim / 2.
func.func @rotary_cache_width(%x: !torch.vtensor<[1,2,3,8],f32>, %cos: !torch.vtensor<[16,3],f32>, %sin: !torch.vtensor<[16,3],f32>, %pos: !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,2,3,8],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  // expected-error@+1 {{ai.onnx.RotaryEmbedding: input 1 'cos_cache': last dimension 3 is not rotary_embedding_dim / 2 (4)}}
  %0 = torch.operator "onnx.RotaryEmbedding"(%x, %cos, %sin, %pos) : (!torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[16,3],f32>, !torch.vtensor<[16,3],f32>, !torch.vtensor<[1,3],si64>) -> !torch.vtensor<[1,2,3,8],f32>
  return %0 : !torch.vtensor<[1,2,3,8],f32>
}
