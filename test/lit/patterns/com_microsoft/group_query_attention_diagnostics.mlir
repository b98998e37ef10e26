// Refusals: each unsupported or malformed GroupQueryAttention is reported at the
// op's location, naming the attribute or input, what was found and what is
// supported; the op is left in place and the pass fails.
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

// A required attribute that is absent is named.
func.func @missing_num_heads(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'num_heads': is required but absent}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// num_heads must be a multiple of kv_num_heads.
func.func @heads_not_dividing(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'kv_num_heads': num_heads (4) must be a multiple of kv_num_heads (3)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 3 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A non-finite scale is refused by name, with what is supported.
func.func @scale(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'scale': value inf is not supported; supported: finite; 0 means 1/sqrt(head_size), other values used as given}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.scale = 0x7F800000 : f32} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// local_window_size with causal=0 is refused, as onnxruntime does.
func.func @local_window(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'local_window_size': must be -1 when causal is 0, got 4 (onnxruntime rejects it too)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.causal = 0 : si64, torch.onnx.local_window_size = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// An attribute the op does not define is refused, not ignored.
func.func @unknown_attribute(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'flavour': is not an attribute of GroupQueryAttention}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.flavour = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// do_rotary=1 needs cos_cache and sin_cache.
func.func @rotary_without_cache(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 7 'cos_cache': is required when do_rotary is 1}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.do_rotary = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// key given but value absent.
func.func @key_without_value(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 'value': 'key' is given but 'value' is absent; give both, or neither for packed QKV}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %none, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.none, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A packed hidden size that does not split into num_heads + 2 * kv_num_heads heads.
func.func @packed_size_mismatch(%qkv: !torch.vtensor<[1,1,100],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 0 'query': hidden size 100 is not a multiple of num_heads + 2 * kv_num_heads (packed QKV) = 8}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%qkv, %none, %none, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,100],f32>, !torch.none, !torch.none, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A hidden size of 0 (head size 0: onnxruntime divides by it) is refused by name, not an internal error.
func.func @zero_hidden_size(%q: !torch.vtensor<[1,1,0],f32>, %k: !torch.vtensor<[1,1,0],f32>, %v: !torch.vtensor<[1,1,0],f32>, %pk: !torch.vtensor<[1,2,4,0],f32>, %pv: !torch.vtensor<[1,2,4,0],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,0],f32>, !torch.vtensor<[1,2,5,0],f32>, !torch.vtensor<[1,2,5,0],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 0 'query': hidden size 0 gives head size 0; supported: a head size > 0}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,0],f32>, !torch.vtensor<[1,1,0],f32>, !torch.vtensor<[1,1,0],f32>, !torch.vtensor<[1,2,4,0],f32>, !torch.vtensor<[1,2,4,0],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,0],f32>, !torch.vtensor<[1,2,5,0],f32>, !torch.vtensor<[1,2,5,0],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,0],f32>, !torch.vtensor<[1,2,5,0],f32>, !torch.vtensor<[1,2,5,0],f32>
}

// -----

// A float attribute is read as ONNX holds it, in f32: an f64 1e300 is infinite there and refused.
func.func @f64_scale_past_f32(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'scale': value inf is not supported; supported: finite}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.scale = 1.0e300 : f64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A result declared unranked (or !torch.none) and returned: the lowered op's ranked type would not
// verify against the function's, so it is refused naming the output.
func.func @unranked_result_returned(%a0: !torch.vtensor<[1,1,64],f32>, %a1: !torch.vtensor<[1,1,32],f32>, %a2: !torch.vtensor<[1,1,32],f32>, %a3: !torch.vtensor<[1,2,4,16],f32>, %a4: !torch.vtensor<[1,2,4,16],f32>, %a5: !torch.vtensor<[1],si32>, %a6: !torch.vtensor<[],si32>) -> (!torch.vtensor<*,f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: output 0 'output': is declared !torch.vtensor<*,f32>, not a ranked tensor type, and 'func.return' uses it}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%a0, %a1, %a2, %a3, %a4, %a5, %a6) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<*,f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<*,f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// An input onnxruntime's CPU kernel rejects (so it cannot be verified) is refused when present.
func.func @q_norm_weight_given(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>, %qn: !torch.vtensor<[16],f32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 14 'q_norm_weight': is not supported (refused when given: onnxruntime's CPU kernel rejects it, so it cannot be verified)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none, %none, %none, %qn) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none, !torch.vtensor<[16],f32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A fourth output (output_qk) with qk_output=0 is refused: onnxruntime leaves it uninitialized.
func.func @qk_output_requested(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,4,1,5],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: output 3 'output_qk': is requested but qk_output is 0 (onnxruntime leaves it uninitialized)}}
  %0:4 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,4,1,5],f32>)
  return %0#0, %0#1, %0#2, %0#3 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,4,1,5],f32>
}

// -----

// seqlens_k must be int32, as onnxruntime requires.
func.func @seqlens_int64(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si64>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 5 'seqlens_k': element type si64 is not supported; onnxruntime requires int32}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si64>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// past_key without past_value is refused.
func.func @past_missing(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 4 'past_value': past_key and past_value must be both given or both absent}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %none, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.none, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// past_key's head dim must be kv_num_heads.
func.func @wrong_past_heads(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,3,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 3 'past_key': dimension 1 (3) must be kv_num_heads (2)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,3,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// The hidden size must be static to know the head size.
func.func @dynamic_hidden(%q: !torch.vtensor<[1,1,?],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 0 'query': dimension 2 (hidden size) must be static}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,?],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A declared result type that contradicts the op (a window-sized cache keeps its 4 rows, the model says 5) is refused, not cast.
func.func @sliding_window_cache(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: output 1 'present_key': is declared !torch.vtensor<[1,2,5,16],f32> but the op produces !torch.vtensor<[1,2,4,16],f32>}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.local_window_size = 4 : si64, torch.onnx.sliding_window_cache = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// qk_output=1 needs the fourth output.
func.func @qk_output_without_output(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'qk_output': qk_output=1 needs output 3 'output_qk', which the node does not name (onnxruntime rejects the model)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.qk_output = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// causal must be 0 or 1.
func.func @causal_two(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'causal': value 2 is not supported; supported: 0 or 1 (0 requires local_window_size -1)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.causal = 2 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A window-sized cache needs a window.
func.func @window_cache_without_window(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'local_window_size': sliding_window_cache=1 needs local_window_size > 0, got -1}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.sliding_window_cache = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>
}

// -----

// cos/sin caches are checked even with do_rotary=0, as onnxruntime checks them: a width of 4 is not a multiple of 8.
func.func @rotary_off_cache_width_4(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>, %cos: !torch.vtensor<[16,4],f32>, %sin: !torch.vtensor<[16,4],f32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 7 'cos_cache': dimension 1 (4) must be static, a multiple of 8 and at most head_size / 2 (8) (onnxruntime rejects it otherwise)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %cos, %sin) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.do_rotary = 0 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>, !torch.vtensor<[16,4],f32>, !torch.vtensor<[16,4],f32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// present_key without present_value (an empty output name imports as !torch.none): onnxruntime refuses it.
func.func @present_key_only(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: output 1 'present_key': is produced without output 2 'present_value'; onnxruntime requires both present outputs or neither}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.none)
  return %0#0, %0#1 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A boolean attribute is no ONNX integer (true would read as -1): refused by name.
func.func @boolean_attribute(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'do_rotary': must be an integer, got true}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.do_rotary = true} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// Opset metadata that is not an integer is named, at the op.
func.func @opset_metadata_string(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = "17", torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{onnx.GroupQueryAttention: the function's torch.onnx_meta.opset_version(s) must hold integers}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// onnxruntime defines com.microsoft opset 1 only, and refuses a model importing 2.
func.func @com_microsoft_opset_2(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 2 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: the model's opset 2 for domain 'com.microsoft' is newer than onnxruntime defines (1)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// An empty first output name (a !torch.none result 0 with no use): onnxruntime rejects the model.
func.func @empty_output_0(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: output 0 'output': is required, but the node's first output name is empty (onnxruntime rejects the model)}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.none, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#1, %0#2 : !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// Packed QKV with the caches moved up to slots 1 and 2 (the operand-count
// convention torch-mlir's own tests use): the importer keeps empty slots as
// !torch.none, so slot 1 is key, and the refusal says where past_key goes.
func.func @packed_with_cache_in_key_slot(%qkv: !torch.vtensor<[1,1,64],f32>, %pk: !torch.vtensor<[1,2,0,8],f32>, %pv: !torch.vtensor<[1,2,0,8],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[1],si32>) -> (!torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>) attributes {torch.onnx_meta.opset_version = 22 : si64} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: input 1 'key': must have rank 3, got shape [1,2,0,8], a cache's; with packed QKV the key and value slots stay empty (!torch.none operands), and past_key is input 3}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%qkv, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,0,8],f32>, !torch.vtensor<[1,2,0,8],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[1],si32>) -> (!torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>
}

// -----

// A window-sized cache whose node omits both present outputs is refused, as onnxruntime refuses it at run time.
func.func @window_cache_without_presents(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> !torch.vtensor<[1,1,64],f32> attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{com.microsoft.GroupQueryAttention: attribute 'sliding_window_cache': sliding_window_cache=1 needs outputs 1 'present_key' and 2 'present_value', which the node omits (onnxruntime rejects it at run time)}}
  %0 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.local_window_size = 3 : si64, torch.onnx.sliding_window_cache = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> !torch.vtensor<[1,1,64],f32>
  return %0 : !torch.vtensor<[1,1,64],f32>
}
