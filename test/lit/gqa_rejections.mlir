// Refusals: each unsupported or malformed GroupQueryAttention is reported at the
// op's location, naming the attribute or input, what was found and what is
// supported; the op is left in place and the pass fails.
// (The python filecheck has no [[@LINE+N]]: the first case pins its line, the
// others check that a file:line:col location leads the message.)
// RUN: not gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s 2>&1 | FileCheck %s

// A required attribute that is absent is named.
// CHECK: {{.+}}gqa_rejections.mlir:12:10: error: com.microsoft.GroupQueryAttention: attribute 'num_heads': is required but absent
func.func @missing_num_heads(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// num_heads must be a multiple of kv_num_heads.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: attribute 'kv_num_heads': num_heads (4) must be a multiple of kv_num_heads (3)
func.func @heads_not_dividing(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 3 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A non-default value of an attribute not lowered yet is refused by name, with what is supported.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: attribute 'softcap': value 50.0 is not supported; supported: 0.0 (softcap is not lowered yet)
func.func @softcap(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.softcap = 5.000000e+01 : f32} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// Sliding window attention is refused by name.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: attribute 'local_window_size': value 4 is not supported; supported: -1
func.func @local_window(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.local_window_size = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// An attribute the op does not define is refused, not ignored.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: attribute 'flavour': is not an attribute of GroupQueryAttention
func.func @unknown_attribute(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.flavour = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// do_rotary=1 needs cos_cache and sin_cache.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 7 'cos_cache': is required when do_rotary is 1
func.func @rotary_without_cache(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64, torch.onnx.do_rotary = 1 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// key given but value absent.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 'value': 'key' is given but 'value' is absent; give both, or neither for packed QKV
func.func @key_without_value(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %none, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.none, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A packed hidden size that does not split into num_heads + 2 * kv_num_heads heads.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 0 'query': hidden size 100 is not a multiple of num_heads + 2 * kv_num_heads (packed QKV) = 8
func.func @packed_size_mismatch(%qkv: !torch.vtensor<[1,1,100],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%qkv, %none, %none, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,100],f32>, !torch.none, !torch.none, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// An optional input not lowered yet is refused when present.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 9 'position_ids': is not supported yet (refused when given)
func.func @position_ids_given(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>, %pid: !torch.vtensor<[1,1],si64>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %pid) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.vtensor<[1,1],si64>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// A fourth output (output_qk) is refused.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: output 3 'output_qk': is not supported yet (qk_output must be 0)
func.func @qk_output_requested(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,4,1,5],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:4 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,4,1,5],f32>)
  return %0#0, %0#1, %0#2, %0#3 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,4,1,5],f32>
}

// -----

// seqlens_k must be int32, as onnxruntime requires.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 5 'seqlens_k': element type si64 is not supported; onnxruntime requires int32
func.func @seqlens_int64(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si64>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si64>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// Without past_key the growing cache has nothing to grow; refused by name.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 3 'past_key': is required but absent
func.func @past_missing(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %none, %none, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.none, !torch.none, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// past_key's head dim must be kv_num_heads.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 3 'past_key': dimension 1 (3) must be kv_num_heads (2)
func.func @wrong_past_heads(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,3,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,3,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// -----

// The hidden size must be static to know the head size.
// CHECK: {{.+}}gqa_rejections.mlir:{{[0-9]+}}:{{[0-9]+}}: error: com.microsoft.GroupQueryAttention: input 0 'query': dimension 2 (hidden size) must be static
func.func @dynamic_hidden(%q: !torch.vtensor<[1,1,?],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,?],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}
