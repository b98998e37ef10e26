// Refusals of the standard Attention: what onnxruntime rejects, and values the spec and
// onnxruntime compute differently, are named with what is supported.
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

// GQA needs the query heads to be a multiple of the KV heads.
func.func @heads(%q: !torch.vtensor<[1,4,2,8],f32>, %k: !torch.vtensor<[1,3,2,8],f32>, %v: !torch.vtensor<[1,3,2,8],f32>) -> !torch.vtensor<[1,4,2,8],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  // expected-error@+1 {{ai.onnx.Attention: input 1 'K': q_num_heads (4) must be a multiple of kv_num_heads (3) (onnxruntime rejects it)}}
  %0 = torch.operator "onnx.Attention"(%q, %k, %v) : (!torch.vtensor<[1,4,2,8],f32>, !torch.vtensor<[1,3,2,8],f32>, !torch.vtensor<[1,3,2,8],f32>) -> !torch.vtensor<[1,4,2,8],f32>
  return %0 : !torch.vtensor<[1,4,2,8],f32>
}

// -----

// A negative softcap: onnxruntime ignores it, the spec applies it.
func.func @softcap(%q: !torch.vtensor<[1,4,2,8],f32>, %k: !torch.vtensor<[1,2,2,8],f32>, %v: !torch.vtensor<[1,2,2,8],f32>) -> !torch.vtensor<[1,4,2,8],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  // expected-error@+1 {{ai.onnx.Attention: attribute 'softcap': value -1.0 is not supported; supported: 0 (none) or a finite value > 0}}
  %0 = torch.operator "onnx.Attention"(%q, %k, %v) {torch.onnx.softcap = -1.0 : f32} : (!torch.vtensor<[1,4,2,8],f32>, !torch.vtensor<[1,2,2,8],f32>, !torch.vtensor<[1,2,2,8],f32>) -> !torch.vtensor<[1,4,2,8],f32>
  return %0 : !torch.vtensor<[1,4,2,8],f32>
}

// -----

// One query after a past with several new keys, causal: onnxruntime skips the mask there.
func.func @decode_causal(%q: !torch.vtensor<[1,4,1,8],f32>, %k: !torch.vtensor<[1,2,3,8],f32>, %v: !torch.vtensor<[1,2,3,8],f32>, %pk: !torch.vtensor<[1,2,4,8],f32>, %pv: !torch.vtensor<[1,2,4,8],f32>) -> (!torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,7,8],f32>, !torch.vtensor<[1,2,7,8],f32>) attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %none = torch.constant.none
  // expected-error@+1 {{ai.onnx.Attention: attribute 'is_causal': is_causal with one query after a past and several new keys: onnxruntime skips the causal mask there, the spec applies it}}
  %0:3 = torch.operator "onnx.Attention"(%q, %k, %v, %none, %pk, %pv) {torch.onnx.is_causal = 1 : si64} : (!torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[1,2,3,8],f32>, !torch.none, !torch.vtensor<[1,2,4,8],f32>, !torch.vtensor<[1,2,4,8],f32>) -> (!torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,7,8],f32>, !torch.vtensor<[1,2,7,8],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,7,8],f32>, !torch.vtensor<[1,2,7,8],f32>
}

// -----

// nonpad_kv_seqlen is an opset-24 input.
func.func @nonpad_at_23(%q: !torch.vtensor<[1,4,2,8],f32>, %k: !torch.vtensor<[1,2,2,8],f32>, %v: !torch.vtensor<[1,2,2,8],f32>, %n: !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,4,2,8],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %none = torch.constant.none
  // expected-error@+1 {{ai.onnx.Attention: input 6 'nonpad_kv_seqlen': is an opset-24 input; the model imports opset 23}}
  %0 = torch.operator "onnx.Attention"(%q, %k, %v, %none, %none, %none, %n) : (!torch.vtensor<[1,4,2,8],f32>, !torch.vtensor<[1,2,2,8],f32>, !torch.vtensor<[1,2,2,8],f32>, !torch.none, !torch.none, !torch.none, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1,4,2,8],f32>
  return %0 : !torch.vtensor<[1,4,2,8],f32>
}
