// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch=attention=sdpa %s | FileCheck %s

// KV cache, static shapes (B=2, S=3, P=5, H=4, Hkv=2, Dh=16): the past is followed
// by S zero rows on the sequence axis (a cat: backends fill the new rows only, not
// the whole present buffer); a growing cache gaining several rows then takes row t
// from new token t - past_len[b] where that is in [0, S) (a gather of the new rows
// and a select over the 8 rows: one pass writes present), the positions checked at
// run time. (One new row, or a fixed-capacity buffer, is a scatter: see
// @decode_scatter below.) No aten.size.int: every dim is static.
// CHECK-LABEL: func.func @kv_cache
// CHECK-NOT:     torch.aten.size.int
// CHECK:         %[[K_BHSD:.+]] = torch.aten.transpose.int %{{.+}} -> !torch.vtensor<[2,2,3,16],f32>
// CHECK:         %[[V_BHSD:.+]] = torch.aten.transpose.int %{{.+}} -> !torch.vtensor<[2,2,3,16],f32>
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GroupQueryAttention: seqlens_k[b] must lie in [0, present length)
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GroupQueryAttention: the new tokens must fit the cache
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GroupQueryAttention: total_sequence_length must equal past length + S
// CHECK:         %[[EMPTY_K:.+]] = torch.aten.slice.Tensor %arg3, %int2, %int0, %int0, %int1 : {{.+}} -> !torch.vtensor<[2,2,0,16],f32>
// CHECK:         %[[ZEROS_K:.+]] = torch.aten.constant_pad_nd %[[EMPTY_K]], {{.+}} -> !torch.vtensor<[2,2,3,16],f32>
// CHECK:         %[[ROWS_K:.+]] = torch.prim.ListConstruct %arg3, %[[ZEROS_K]]
// CHECK:         %[[GROWN_K:.+]] = torch.aten.cat %[[ROWS_K]], %int2 : {{.+}} -> !torch.vtensor<[2,2,8,16],f32>
// CHECK:         %[[GROWN_V:.+]] = torch.aten.cat %{{.+}}, %int2 : {{.+}} -> !torch.vtensor<[2,2,8,16],f32>
// CHECK:         %[[NEW_ROW:.+]] = torch.aten.unsqueeze %{{.+}}, %int3 : !torch.vtensor<[2,1,8],i1>, !torch.int -> !torch.vtensor<[2,1,8,1],i1>
// CHECK:         %[[TOKEN:.+]] = torch.aten.clamp %{{.+}}, %int0, %int2 : !torch.vtensor<[2,8],si64>, !torch.int, !torch.int -> !torch.vtensor<[2,8],si64>
// CHECK:         %[[NEW_K:.+]] = torch.aten.gather %[[K_BHSD]], %int2, %{{.+}}, %false : !torch.vtensor<[2,2,3,16],f32>, !torch.int, !torch.vtensor<[2,2,8,16],si64>, !torch.bool -> !torch.vtensor<[2,2,8,16],f32>
// CHECK:         %[[PRESENT_K:.+]] = torch.aten.where.self %[[NEW_ROW]], %[[NEW_K]], %[[GROWN_K]] : {{.+}} -> !torch.vtensor<[2,2,8,16],f32>
// CHECK:         %[[NEW_V:.+]] = torch.aten.gather %[[V_BHSD]], %int2,
// CHECK:         %[[PRESENT_V:.+]] = torch.aten.where.self %{{.+}}, %[[NEW_V]], %[[GROWN_V]]
// CHECK-NOT:     torch.aten.scatter.src
// CHECK:         return %{{.+}}, %[[PRESENT_K]], %[[PRESENT_V]] : !torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>
func.func @kv_cache(%q: !torch.vtensor<[2,3,64],f32>, %k: !torch.vtensor<[2,3,32],f32>, %v: !torch.vtensor<[2,3,32],f32>, %pk: !torch.vtensor<[2,2,5,16],f32>, %pv: !torch.vtensor<[2,2,5,16],f32>, %sk: !torch.vtensor<[2],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,3,32],f32>, !torch.vtensor<[2,3,32],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>
}

// -----

// One new row (decode, B=2, S=1, P=5): scatter.src on dim 2 writes the new K/V at
// past_len[b], checked at run time and clamped into the 6 rows.
// CHECK-LABEL: func.func @decode_scatter
// CHECK:         %[[ROWS:.+]] = torch.aten.clamp %{{.+}}, %int0, %int5 : !torch.vtensor<[2,1],si64>, !torch.int, !torch.int -> !torch.vtensor<[2,1],si64>
// CHECK:         %[[INDEX:.+]] = torch.aten.expand %{{.+}} -> !torch.vtensor<[2,2,1,16],si64>
// CHECK:         %[[GROWN_K:.+]] = torch.aten.cat %{{.+}}, %int2 : {{.+}} -> !torch.vtensor<[2,2,6,16],f32>
// CHECK:         %[[PRESENT_K:.+]] = torch.aten.scatter.src %[[GROWN_K]], %int2, %[[INDEX]], %{{.+}} : !torch.vtensor<[2,2,6,16],f32>, !torch.int, !torch.vtensor<[2,2,1,16],si64>, !torch.vtensor<[2,2,1,16],f32> -> !torch.vtensor<[2,2,6,16],f32>
// CHECK:         %[[PRESENT_V:.+]] = torch.aten.scatter.src %{{.+}}, %int2, %[[INDEX]], %{{.+}}
// CHECK:         return %{{.+}}, %[[PRESENT_K]], %[[PRESENT_V]]
func.func @decode_scatter(%q: !torch.vtensor<[2,1,64],f32>, %k: !torch.vtensor<[2,1,32],f32>, %v: !torch.vtensor<[2,1,32],f32>, %pk: !torch.vtensor<[2,2,5,16],f32>, %pv: !torch.vtensor<[2,2,5,16],f32>, %sk: !torch.vtensor<[2],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[2,1,64],f32>, !torch.vtensor<[2,2,6,16],f32>, !torch.vtensor<[2,2,6,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[2,1,64],f32>, !torch.vtensor<[2,1,32],f32>, !torch.vtensor<[2,1,32],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[2,1,64],f32>, !torch.vtensor<[2,2,6,16],f32>, !torch.vtensor<[2,2,6,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[2,1,64],f32>, !torch.vtensor<[2,2,6,16],f32>, !torch.vtensor<[2,2,6,16],f32>
}

// -----

// Causal mask: key t is visible to query s iff t <= min(past_len[b] + s, seqlens_k[b]); the float
// mask (0 / -inf) is [B,1,S,T] and feeds SDPA with enable_gqa and no explicit scale.
// CHECK-LABEL: func.func @causal_mask
// CHECK:         %[[POS_BS:.+]] = torch.aten.add.Tensor %{{.+}}, %{{.+}}, %{{.+}} : !torch.vtensor<[1,1],si64>, !torch.vtensor<[1],si64>, !torch.int -> !torch.vtensor<[1,1],si64>
// CHECK:         %[[KEY_POS:.+]] = torch.aten.arange %{{.+}}, %int4, {{.+}} -> !torch.vtensor<[?],si64>
// CHECK:         %[[SEQLENS_B1:.+]] = torch.aten.unsqueeze %[[SEQLENS:.+]], %int1 : !torch.vtensor<[1],si64>, !torch.int -> !torch.vtensor<[1,1],si64>
// CHECK:         %[[LAST_KEY:.+]] = torch.aten.minimum %[[POS_BS]], %[[SEQLENS_B1]] : !torch.vtensor<[1,1],si64>, !torch.vtensor<[1,1],si64> -> !torch.vtensor<[1,1],si64>
// CHECK:         %[[LAST_KEY_BS1:.+]] = torch.aten.unsqueeze %[[LAST_KEY]], %int2 : !torch.vtensor<[1,1],si64>, !torch.int -> !torch.vtensor<[1,1,1],si64>
// CHECK:         %[[VISIBLE:.+]] = torch.aten.le.Tensor %[[KEY_POS]], %[[LAST_KEY_BS1]] : !torch.vtensor<[?],si64>, !torch.vtensor<[1,1,1],si64> -> !torch.vtensor<[1,1,?],i1>
// CHECK:         %[[NEG_INF:.+]] = torch.constant.float 0xFFF0000000000000
// CHECK:         %[[MASK_BST:.+]] = torch.aten.where.Scalar %[[VISIBLE]], %{{.+}}, %[[NEG_INF]] : !torch.vtensor<[1,1,?],i1>, !torch.float, !torch.float -> !torch.vtensor<[1,1,?],f32>
// CHECK:         %[[MASK:.+]] = torch.aten.unsqueeze %[[MASK_BST]], %int1 {{.+}} -> !torch.vtensor<[1,1,1,?],f32>
// CHECK:         %[[TRUE:.+]] = torch.constant.bool true
// CHECK:         torch.aten.scaled_dot_product_attention %{{.+}}, %{{.+}}, %{{.+}}, %[[MASK]], %{{.+}}, %false{{.*}}, %none{{.*}}, %[[TRUE]] : !torch.vtensor<[1,8,1,16],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,1,1,?],f32>, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,8,1,16],f32>
func.func @causal_mask(%q: !torch.vtensor<[1,1,128],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,5,16],f32>, %pv: !torch.vtensor<[1,2,5,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,2,6,16],f32>, !torch.vtensor<[1,2,6,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 8 : si64} : (!torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,2,6,16],f32>, !torch.vtensor<[1,2,6,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,2,6,16],f32>, !torch.vtensor<[1,2,6,16],f32>
}

// -----

// Prefill with an empty past (P=0): the cache is padded from 0 to S rows, which take
// the new tokens as one block at the row read back (one batch row, several new rows);
// MHA (H == Hkv).
// CHECK-LABEL: func.func @prefill
// CHECK:         %[[START:.+]] = torch.aten.item %{{.+}} : !torch.vtensor<[1],si64> -> !torch.int
// CHECK:         %[[PAD:.+]] = torch.aten.constant_pad_nd %arg3, {{.+}} : !torch.vtensor<[1,4,0,16],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[1,4,7,16],f32>
// CHECK:         torch.aten.slice_scatter %[[PAD]], %{{.+}}, %int2, %[[START]], %{{.+}}, %int1 : {{.+}} -> !torch.vtensor<[1,4,7,16],f32>
// CHECK-NOT:     torch.aten.gather
// CHECK:         torch.aten.scaled_dot_product_attention {{.+}} : !torch.vtensor<[1,4,7,16],f32>, !torch.vtensor<[1,4,7,16],f32>, !torch.vtensor<[1,4,7,16],f32>, !torch.vtensor<[1,1,7,7],f32>
func.func @prefill(%q: !torch.vtensor<[1,7,64],f32>, %k: !torch.vtensor<[1,7,64],f32>, %v: !torch.vtensor<[1,7,64],f32>, %pk: !torch.vtensor<[1,4,0,16],f32>, %pv: !torch.vtensor<[1,4,0,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,7,64],f32>, !torch.vtensor<[1,4,7,16],f32>, !torch.vtensor<[1,4,7,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.kv_num_heads = 4 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,7,64],f32>, !torch.vtensor<[1,7,64],f32>, !torch.vtensor<[1,7,64],f32>, !torch.vtensor<[1,4,0,16],f32>, !torch.vtensor<[1,4,0,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[1,7,64],f32>, !torch.vtensor<[1,4,7,16],f32>, !torch.vtensor<[1,4,7,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,7,64],f32>, !torch.vtensor<[1,4,7,16],f32>, !torch.vtensor<[1,4,7,16],f32>
}

// -----

// Position ids: seqlens_k (int32) -> int64 keeping its shape [B]; past_len = seqlens_k + 1 - S,
// or 0 on a first prompt (total_sequence_length == S); positions = past_len[b] + arange(S)
// select the rotary rows for Q (H heads) and K (Hkv heads), checked at run time to lie in
// the cos/sin caches and clamped there so no value reads outside them.
// CHECK-LABEL: func.func @position_ids_rotary
// CHECK:         %[[SEQLENS:.+]] = torch.aten.to.dtype %arg5, %int4, {{.+}} : !torch.vtensor<[2],si32>, {{.+}} -> !torch.vtensor<[2],si64>
// CHECK:         %[[TOTAL:.+]] = torch.aten.to.dtype %arg6, %int4, {{.+}} : !torch.vtensor<[],si32>, {{.+}} -> !torch.vtensor<[],si64>
// CHECK:         %[[FIRST_PROMPT:.+]] = torch.aten.eq.Scalar %[[TOTAL]], %int3 : !torch.vtensor<[],si64>, !torch.int -> !torch.vtensor<[],i1>
// CHECK:         %[[ONE_MINUS_S:.+]] = torch.constant.int -2
// CHECK:         %[[DECODE_PAST:.+]] = torch.aten.add.Scalar %[[SEQLENS]], %[[ONE_MINUS_S]], %int1 : !torch.vtensor<[2],si64>, !torch.int, !torch.int -> !torch.vtensor<[2],si64>
// CHECK:         %[[PAST_LEN:.+]] = torch.aten.where.ScalarSelf %[[FIRST_PROMPT]], %int0, %[[DECODE_PAST]] : !torch.vtensor<[],i1>, !torch.int, !torch.vtensor<[2],si64> -> !torch.vtensor<[2],si64>
// CHECK:         %[[PAST_LEN_B1:.+]] = torch.aten.unsqueeze %[[PAST_LEN]], %int1 {{.+}} -> !torch.vtensor<[2,1],si64>
// CHECK:         %[[ARANGE_S:.+]] = torch.aten.arange %int3, %int4, {{.+}} -> !torch.vtensor<[3],si64>
// CHECK:         %[[POS:.+]] = torch.aten.add.Tensor %[[PAST_LEN_B1]], %[[ARANGE_S]], %int1 {{.+}} -> !torch.vtensor<[2,3],si64>
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GroupQueryAttention: rotary positions (position_ids, or the tokens' positions) must lie in [0, cos_cache rows) [at {{.+}}]"
// CHECK:         %[[ROPE_POS:.+]] = torch.aten.clamp %[[POS]], %int0, %int31 : !torch.vtensor<[2,3],si64>, !torch.int, !torch.int -> !torch.vtensor<[2,3],si64>
// CHECK:         %[[POS_LIST:.+]] = torch.prim.ListConstruct %[[ROPE_POS]] : (!torch.vtensor<[2,3],si64>) -> !torch.list<optional<vtensor>>
// CHECK:         %[[COS:.+]] = torch.aten.index.Tensor %arg7, %[[POS_LIST]] : !torch.vtensor<[32,8],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[2,3,8],f32>
// CHECK:         torch.aten.index.Tensor %arg8, {{.+}} -> !torch.vtensor<[2,3,8],f32>
// CHECK:         torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[2,4,3,16],f32>
// CHECK:         torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[2,2,3,16],f32>
// CHECK-NOT:     torch.aten.index.Tensor
// CHECK:         return
func.func @position_ids_rotary(%q: !torch.vtensor<[2,3,64],f32>, %k: !torch.vtensor<[2,3,32],f32>, %v: !torch.vtensor<[2,3,32],f32>, %pk: !torch.vtensor<[2,2,5,16],f32>, %pv: !torch.vtensor<[2,2,5,16],f32>, %sk: !torch.vtensor<[2],si32>, %tot: !torch.vtensor<[],si32>, %cos: !torch.vtensor<[32,8],f32>, %sin: !torch.vtensor<[32,8],f32>) -> (!torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %cos, %sin, %none, %none, %none) {torch.onnx.do_rotary = 1 : si64, torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,3,32],f32>, !torch.vtensor<[2,3,32],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2],si32>, !torch.vtensor<[],si32>, !torch.vtensor<[32,8],f32>, !torch.vtensor<[32,8],f32>, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[2,3,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>
}

// -----

// f16 inputs, caches and outputs stay f16; attention runs in f32 (as onnxruntime
// computes f16) and its result is rounded once to f16.
// CHECK-LABEL: func.func @f16
// CHECK:         torch.aten.where.Scalar {{.+}} -> !torch.vtensor<[1,1,?],f16>
// CHECK:         torch.aten.scaled_dot_product_attention {{.+}} -> !torch.vtensor<[1,4,1,16],f32>
// CHECK:         torch.aten.to.dtype %{{.+}}, %int5, {{.+}} -> !torch.vtensor<[1,4,1,16],f16>
// CHECK:         return {{.+}} : !torch.vtensor<[1,1,64],f16>, !torch.vtensor<[1,2,5,16],f16>, !torch.vtensor<[1,2,5,16],f16>
func.func @f16(%q: !torch.vtensor<[1,1,64],f16>, %k: !torch.vtensor<[1,1,32],f16>, %v: !torch.vtensor<[1,1,32],f16>, %pk: !torch.vtensor<[1,2,4,16],f16>, %pv: !torch.vtensor<[1,2,4,16],f16>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f16>, !torch.vtensor<[1,2,5,16],f16>, !torch.vtensor<[1,2,5,16],f16>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f16>, !torch.vtensor<[1,1,32],f16>, !torch.vtensor<[1,1,32],f16>, !torch.vtensor<[1,2,4,16],f16>, !torch.vtensor<[1,2,4,16],f16>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[1,1,64],f16>, !torch.vtensor<[1,2,5,16],f16>, !torch.vtensor<[1,2,5,16],f16>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f16>, !torch.vtensor<[1,2,5,16],f16>, !torch.vtensor<[1,2,5,16],f16>
}

// -----

// Variable seqlens_k (ragged batch, decode): each row's scatter index and mask
// come from its own seqlens_k entry, not from the past capacity.
// CHECK-LABEL: func.func @variable_seqlens_k
// CHECK:         %[[SEQLENS:.+]] = torch.aten.to.dtype %arg5
// CHECK:         %[[DECODE_PAST:.+]] = torch.aten.add.Scalar %[[SEQLENS]], %int0, %int1
// CHECK:         %[[PAST_LEN:.+]] = torch.aten.where.ScalarSelf %{{.+}}, %int0, %[[DECODE_PAST]]
// CHECK:         %[[PAST_LEN_B1:.+]] = torch.aten.unsqueeze %[[PAST_LEN]], %int1
// CHECK:         %[[POS:.+]] = torch.aten.add.Tensor %[[PAST_LEN_B1]]
// CHECK:         %[[ROWS:.+]] = torch.aten.clamp %[[POS]], %int0, %int9
// CHECK:         %[[POS_B1S:.+]] = torch.aten.unsqueeze %[[ROWS]], %int1
// CHECK:         %[[POS_B1S1:.+]] = torch.aten.unsqueeze %[[POS_B1S]], %int3
// CHECK:         %[[INDEX:.+]] = torch.aten.expand %[[POS_B1S1]]
// CHECK:         torch.aten.scatter.src %{{.+}}, %int2, %[[INDEX]]
// CHECK:         torch.aten.minimum %[[POS]]
func.func @variable_seqlens_k(%q: !torch.vtensor<[3,1,64],f32>, %k: !torch.vtensor<[3,1,16],f32>, %v: !torch.vtensor<[3,1,16],f32>, %pk: !torch.vtensor<[3,1,9,16],f32>, %pv: !torch.vtensor<[3,1,9,16],f32>, %sk: !torch.vtensor<[3],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[3,1,64],f32>, !torch.vtensor<[3,1,10,16],f32>, !torch.vtensor<[3,1,10,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.kv_num_heads = 1 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[3,1,64],f32>, !torch.vtensor<[3,1,16],f32>, !torch.vtensor<[3,1,16],f32>, !torch.vtensor<[3,1,9,16],f32>, !torch.vtensor<[3,1,9,16],f32>, !torch.vtensor<[3],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[3,1,64],f32>, !torch.vtensor<[3,1,10,16],f32>, !torch.vtensor<[3,1,10,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[3,1,64],f32>, !torch.vtensor<[3,1,10,16],f32>, !torch.vtensor<[3,1,10,16],f32>
}

// -----

// Packed QKV as the importer emits it: key and value are !torch.none operands
// and the trailing optional slots too; the packed rows are split into their
// 8 heads first, then Q, K, V are slices of whole heads (dim 1) (here in the
// branch of a run-time batch size other than 1: @dynamic_batch_seq).
// CHECK-LABEL: func.func @packed_qkv
// CHECK-NOT:     torch.operator
// CHECK:         } else {
// CHECK:         %[[HEADS:.+]] = torch.aten.unflatten.int %arg0, %int2{{.*}}, {{.+}} -> !torch.vtensor<[?,?,8,16],f32>
// CHECK:         %[[QKV:.+]] = torch.aten.transpose.int %[[HEADS]], %int1{{.*}}, %int2{{.*}} -> !torch.vtensor<[?,8,?,16],f32>
// CHECK:         torch.aten.slice.Tensor %[[QKV]], %int1{{.*}}, %int0{{.*}}, %int4{{.*}}, %int1{{.*}} -> !torch.vtensor<[?,4,?,16],f32>
// CHECK:         torch.aten.slice.Tensor %[[QKV]], %int1{{.*}}, %int4{{.*}}, %int6{{.*}}, %int1{{.*}} -> !torch.vtensor<[?,2,?,16],f32>
// CHECK:         torch.aten.slice.Tensor %[[QKV]], %int1{{.*}}, %int6{{.*}}, %int8{{.*}}, %int1{{.*}} -> !torch.vtensor<[?,2,?,16],f32>
func.func @packed_qkv(%qkv: !torch.vtensor<[?,?,128],f32>, %pk: !torch.vtensor<[?,2,?,16],f32>, %pv: !torch.vtensor<[?,2,?,16],f32>, %sk: !torch.vtensor<[?],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%qkv, %none, %none, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.do_rotary = 0 : si64, torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[?,?,128],f32>, !torch.none, !torch.none, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>
}

// -----

// Dynamic batch, sequence and cache lengths.  Each input's batch and sequence
// dims, past_value's rows and seqlens_k's entries are checked at run time
// against the query's (and past_key's), as onnxruntime checks them on every
// call: torch-mlir's broadcasts and casts trust the types.  Then the step
// branches once on B == 1: there every size that follows from the batch is
// typed static and one batch row's forms apply (its new rows copied in as one
// block, no scatter; total_sequence_length read back to the host with the
// block's first row and the rows read, one [2] tensor, one read, the growth
// computed from it there); the output leaves
// each branch as [B,S,H*Dh], no transpose after the If.  The other branch is
// the step for any batch size.  There
// S is read with aten.size.int and feeds past_len and arange; the cache grows
// by clamp(total - P, 0, S) rows, read from total_sequence_length at run time
// (S for a growing cache, 0 for a fixed-capacity buffer). Such a cache may be
// a fixed-capacity buffer, so attention reads its rows [0, R), R =
// clamp(max(seqlens_k) + 1, 1, T): the rows onnxruntime reads, whatever the
// capacity; R feeds the mask. A growth known only at run time branches once
// for both caches: none, and the pasts are present (a shared buffer written in
// place); else both are padded.  Trailing optional slots dropped by the
// exporter (7 operands) read as absent.
// CHECK-LABEL: func.func @dynamic_batch_seq
// CHECK:         %[[B:.+]] = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,64],f32>, !torch.int -> !torch.int
// CHECK:         %[[KEY_B:.+]] = torch.aten.size.int %arg1, %int0
// CHECK:         %[[SAME_B:.+]] = torch.aten.eq.int %[[KEY_B]], %[[B]]
// CHECK:         torch.runtime.assert %[[SAME_B]], "gqa-torch-mlir: GroupQueryAttention: key dimension 0 must equal the batch size (query dimension 0)
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GroupQueryAttention: past_value dimension 0 must equal the batch size
// CHECK:         %[[ENTRIES:.+]] = torch.aten.size.int %arg5, %int0
// CHECK:         %[[ONE_PER_ROW:.+]] = torch.aten.eq.int %[[ENTRIES]], %[[B]]
// CHECK:         torch.runtime.assert %[[ONE_PER_ROW]], "gqa-torch-mlir: GroupQueryAttention: seqlens_k dimension 0 must equal the batch size
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GroupQueryAttention: value dimension 1 must equal the sequence size (query dimension 1)
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GroupQueryAttention: past_value dimension 2 must equal past_key's
// CHECK:         %[[ONE_ROW:.+]] = torch.aten.eq.int %[[B]], %int1
// CHECK:         %[[STEP:.+]]:3 = torch.prim.If %[[ONE_ROW]] -> (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>) {
// CHECK:           torch.tensor_static_info_cast %arg0 : !torch.vtensor<[?,?,64],f32> to !torch.vtensor<[1,?,64],f32>
// CHECK:           torch.tensor_static_info_cast %arg3 : !torch.vtensor<[?,2,?,16],f32> to !torch.vtensor<[1,2,?,16],f32>
// CHECK-NOT:       torch.aten.item
// CHECK:           %[[LENGTHS:.+]] = torch.aten.cat %{{.+}}, %int0{{.*}} : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[2],si64>
// CHECK:           %[[PACKED_1:.+]] = torch.aten.slice.Tensor %[[LENGTHS]], %int0{{.*}}, %int0{{.*}}, %int1{{.*}}, %int1
// CHECK:           torch.aten.item %[[PACKED_1]] : !torch.vtensor<[1],si64> -> !torch.int
// CHECK:           %[[TOTAL_1:.+]] = torch.aten.slice.Tensor %[[LENGTHS]], %int0{{.*}}, %int1{{.*}}, %int2{{.*}}, %int1
// CHECK:           %[[TOTAL_INT_1:.+]] = torch.aten.item %[[TOTAL_1]] : !torch.vtensor<[1],si64> -> !torch.int
// CHECK:           torch.aten.sub.int %[[TOTAL_INT_1]], %{{.+}} : !torch.int, !torch.int -> !torch.int
// CHECK-NOT:       torch.aten.item
// CHECK-NOT:       torch.aten.scatter.src
// CHECK:           torch.aten.slice_scatter {{.+}} -> !torch.vtensor<[1,2,?,16],f32>
// CHECK-NOT:       torch.aten.scatter.src
// CHECK:           torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[1,?,64],f32>
// CHECK:           torch.prim.If.yield %{{.+}}, %{{.+}}, %{{.+}} : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>
// CHECK-NEXT:    } else {
// CHECK:           %[[S:.+]] = torch.aten.size.int %arg0, %int1{{.*}} : !torch.vtensor<[?,?,64],f32>, !torch.int -> !torch.int
// CHECK:           %[[ONE_MINUS_S:.+]] = torch.aten.sub.int %int1{{.*}}, %[[S]]
// CHECK:           torch.aten.add.Scalar %{{.+}}, %[[ONE_MINUS_S]], %int1{{.*}} : !torch.vtensor<[?],si64>, !torch.int, !torch.int -> !torch.vtensor<[?],si64>
// CHECK:           torch.aten.arange %[[S]], %int4, {{.+}} -> !torch.vtensor<[?],si64>
// CHECK:           %[[P:.+]] = torch.aten.size.int %arg3, %int2
// CHECK:           %[[TOTAL_INT:.+]] = torch.aten.item %{{.+}} : !torch.vtensor<[],si64> -> !torch.int
// CHECK:           %[[EXTRA:.+]] = torch.aten.sub.int %[[TOTAL_INT]], %[[P]]
// CHECK:           %[[AT_MOST_S:.+]] = torch.prim.min.int %[[EXTRA]], %[[S]]
// CHECK:           %[[GROWTH:.+]] = torch.prim.max.int %[[AT_MOST_S]], %int0
// CHECK:           %[[INDEX:.+]] = torch.aten.expand {{.+}} -> !torch.vtensor<[?,2,?,16],si64>
// CHECK:           %[[NO_GROWTH:.+]] = torch.aten.eq.int %[[GROWTH]], %int0
// CHECK:           %[[GROWN:.+]]:2 = torch.prim.If %[[NO_GROWTH]] -> (!torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>) {
// CHECK-NEXT:        torch.prim.If.yield %arg3, %arg4
// CHECK-NEXT:      } else {
// CHECK:             %[[PADS:.+]] = torch.prim.ListConstruct %int0{{.*}}, %int0{{.*}}, %int0{{.*}}, %[[GROWTH]]
// CHECK:             %[[PAD_K:.+]] = torch.aten.constant_pad_nd %arg3, %[[PADS]], {{.+}} -> !torch.vtensor<[?,2,?,16],f32>
// CHECK:             %[[PAD_V:.+]] = torch.aten.constant_pad_nd %arg4, {{.+}} -> !torch.vtensor<[?,2,?,16],f32>
// CHECK:             torch.prim.If.yield %[[PAD_K]], %[[PAD_V]]
// CHECK:           }
// CHECK:           %[[PRESENT_K:.+]] = torch.aten.scatter.src %[[GROWN]]#0, %int2{{.*}}, %[[INDEX]]
// CHECK:           %[[T:.+]] = torch.aten.size.int %[[PRESENT_K]], %int2
// CHECK:           %[[LAST:.+]] = torch.aten.item %{{.+}} : !torch.vtensor<[1],si32> -> !torch.int
// CHECK:           %[[ROWS:.+]] = torch.prim.max.int %{{.+}}, %int1
// CHECK:           %[[READ_K:.+]] = torch.aten.slice.Tensor %[[PRESENT_K]], %int2{{.*}}, %int0{{.*}}, %[[ROWS]], %int1
// CHECK:           %[[R:.+]] = torch.aten.size.int %[[READ_K]], %int2
// CHECK:           torch.aten.arange %[[R]], %int4, {{.+}} -> !torch.vtensor<[?],si64>
// CHECK:           torch.aten.scaled_dot_product_attention {{.+}} -> !torch.vtensor<[?,4,?,16],f32>
// CHECK:           %[[OUT:.+]] = torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[?,?,64],f32>
// CHECK:           torch.prim.If.yield %[[OUT]], %[[PRESENT_K]], %{{.+}} : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>
// CHECK-NEXT:    }
// CHECK-NOT:     torch.aten.size.int
// CHECK-NOT:     torch.aten.transpose.int
// CHECK:         return %{{.+}}, %[[STEP]]#1, %[[STEP]]#2
func.func @dynamic_batch_seq(%q: !torch.vtensor<[?,?,64],f32>, %k: !torch.vtensor<[?,?,32],f32>, %v: !torch.vtensor<[?,?,32],f32>, %pk: !torch.vtensor<[?,2,?,16],f32>, %pv: !torch.vtensor<[?,2,?,16],f32>, %sk: !torch.vtensor<[?],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,?,32],f32>, !torch.vtensor<[?,?,32],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>
}

// -----

// Only the attention output requested (one result): no present outputs are returned.
// CHECK-LABEL: func.func @output_only
// CHECK:         %[[OUT:.+]] = torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[1,1,64],f32>
// CHECK:         return %[[OUT]] : !torch.vtensor<[1,1,64],f32>
func.func @output_only(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> !torch.vtensor<[1,1,64],f32> attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> !torch.vtensor<[1,1,64],f32>
  return %0 : !torch.vtensor<[1,1,64],f32>
}

// -----

// Written as torch-mlir's own tests write it: a default opset of 22 and no
// torch.onnx_meta.opset_versions. The com.microsoft version is then unknown
// (not 22, which onnxruntime does not define): the op is lowered.
// CHECK-LABEL: func.func @no_com_microsoft_version
// CHECK-NOT:     torch.operator "onnx.GroupQueryAttention"
// CHECK:         return %{{.+}}, %{{.+}}, %{{.+}} : !torch.vtensor<[1,1,16],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>
func.func @no_com_microsoft_version(%q: !torch.vtensor<[1,1,16],f32>, %k: !torch.vtensor<[1,1,16],f32>, %v: !torch.vtensor<[1,1,16],f32>, %pk: !torch.vtensor<[1,2,0,8],f32>, %pv: !torch.vtensor<[1,2,0,8],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[1],si32>) -> (!torch.vtensor<[1,1,16],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>) attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 22 : si64} {
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 2 : si64} : (!torch.vtensor<[1,1,16],f32>, !torch.vtensor<[1,1,16],f32>, !torch.vtensor<[1,1,16],f32>, !torch.vtensor<[1,2,0,8],f32>, !torch.vtensor<[1,2,0,8],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[1],si32>) -> (!torch.vtensor<[1,1,16],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,16],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>
}
