// The two attention forms (pass option attention=decomposed|sdpa). Neither
// hands a backend K/V repeated to num_heads: decomposed regroups the queries
// by KV head ([B,H,S,Dh] -> [B,Hkv,G*S,Dh]) and multiplies with K/V as they
// are; sdpa passes K/V at Hkv heads with enable_gqa. With several batch rows,
// decomposed splits P.V at m, the fewest rows any batch row reads: the value
// rows [m, T) a batch row does not read are zeroed (0 * NaN would reach its
// output), the rest are read as they are.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s --check-prefix=DECOMPOSED
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch --torch-onnx-to-torch-backend-pipeline %s | FileCheck %s --check-prefix=BACKEND
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch=attention=sdpa %s | FileCheck %s --check-prefix=SDPA
// The third form, fused (iree-cpu's default: a decode step in one IREE dispatch), needs IREE's
// dialects; gqa-torch-mlir-opt (torch-mlir's) refuses it by name.
// RUN: not gqa-torch-mlir-opt --convert-onnx-gqa-to-torch=attention=fused %s 2>&1 | FileCheck %s --check-prefix=FUSED
// FUSED: error: attention=fused emits IREE dispatches {{.*}}: it runs only inside IREE's compiler (the iree-cpu backend); use attention=decomposed here
// The GPU form (device=gpu, iree-cuda's default): the new row written by a select over the cache
// rows, no scatter, and every row read, masked: no length read back to the host (aten.item);
// the run-time checks' conjunction computed with them, before the compute (so IREE runs it with the
// step's first dispatches), and read back once, after the compute, before the return (each check's
// own read and message only when it is false: deferred_checks.py).
// RUN: gqa-torch-mlir-opt '--convert-onnx-gqa-to-torch=attention=sdpa device=gpu' %s | FileCheck %s --check-prefix=GPU

// B=1, S=1, T=5 cache rows, H=8, Hkv=2 (G=4), Dh=16. One batch row on the CPU: the new row
// copied in at a row read back to the host with the rows read (one aten.item for both), and the
// cache read on rows [0, R), every one of them by the one batch row: P.V is one plain matmul.
// DECOMPOSED-LABEL: func.func @decode
// DECOMPOSED-NOT:     vtensor<[1,8,5,16]
// DECOMPOSED:         %[[PACKED:.+]] = torch.aten.item %{{.+}} : !torch.vtensor<[1],si64> -> !torch.int
// DECOMPOSED-NOT:     torch.aten.item
// DECOMPOSED:         %[[PRESENT_K:.+]] = torch.aten.slice_scatter %{{.+}}, %{{.+}}, %int2, %{{.+}} : !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,1,16],f32>, {{.+}} -> !torch.vtensor<[1,2,5,16],f32>
// DECOMPOSED:         %[[Q_GROUPED:.+]] = torch.aten.flatten.using_ints %{{.+}} : !torch.vtensor<[1,2,4,1,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[1,2,4,16],f32>
// DECOMPOSED:         %[[K_T:.+]] = torch.aten.transpose.int %{{.+}} : !torch.vtensor<[1,2,?,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[1,2,16,?],f32>
// DECOMPOSED:         %[[SCORES:.+]] = torch.aten.matmul %[[Q_GROUPED]], %[[K_T]] : !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,16,?],f32> -> !torch.vtensor<[1,2,4,?],f32>
// DECOMPOSED:         torch.aten.exp
// DECOMPOSED:         torch.aten.matmul %{{.+}}, %{{.+}} : !torch.vtensor<[1,2,4,?],f32>, !torch.vtensor<[1,2,?,16],f32> -> !torch.vtensor<[1,2,4,16],f32>
// DECOMPOSED-NOT:     torch.aten.matmul
// DECOMPOSED-NOT:     torch.aten.scaled_dot_product_attention
// DECOMPOSED-NOT:     vtensor<[1,8,5,16]
// DECOMPOSED:         return

// BACKEND-LABEL: func.func @decode
// BACKEND-NOT:     vtensor<[1,8,5,16]
// BACKEND:         torch.aten.matmul {{.+}} -> !torch.vtensor<[1,2,4,?],f32>
// BACKEND:         torch.aten.matmul {{.+}} -> !torch.vtensor<[1,2,4,16],f32>
// BACKEND-NOT:     torch.aten.matmul
// BACKEND-NOT:     vtensor<[1,8,5,16]

// SDPA-LABEL: func.func @decode
// SDPA:         torch.aten.scaled_dot_product_attention {{.+}} : !torch.vtensor<[1,8,1,16],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>, {{.+}} -> !torch.vtensor<[1,8,1,16],f32>
func.func @decode(%q: !torch.vtensor<[1,1,128],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 8 : si64} : (!torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,128],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// Two batch rows (B=2, S=1, T=5): decomposed splits P.V at m, the fewest rows any batch row
// reads (read back to the host): the value rows [m, T) a batch row does not read are zeroed.
// DECOMPOSED-LABEL: func.func @decode_two_rows
// BACKEND-LABEL: func.func @decode_two_rows
// DECOMPOSED-NOT:     vtensor<[2,8,5,16]
// DECOMPOSED:         torch.aten.scatter.src {{.+}} -> !torch.vtensor<[2,2,5,16],f32>
// DECOMPOSED:         %[[K_T:.+]] = torch.aten.transpose.int %{{.+}} : !torch.vtensor<[2,2,5,16],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,2,16,5],f32>
// DECOMPOSED:         torch.aten.matmul %{{.+}}, %[[K_T]] : !torch.vtensor<[2,2,4,16],f32>, !torch.vtensor<[2,2,16,5],f32> -> !torch.vtensor<[2,2,4,5],f32>
// DECOMPOSED:         %[[M:.+]] = torch.aten.item
// DECOMPOSED:         %[[HEAD:.+]] = torch.aten.matmul %{{.+}}, %{{.+}} : !torch.vtensor<[2,2,4,?],f32>, !torch.vtensor<[2,2,?,16],f32> -> !torch.vtensor<[2,2,4,16],f32>
// DECOMPOSED:         %[[TAIL_V:.+]] = torch.aten.where.ScalarOther %{{.+}} : !torch.vtensor<[2,1,?,1],i1>, !torch.vtensor<[2,2,?,16],f32>, !torch.float -> !torch.vtensor<[2,2,?,16],f32>
// DECOMPOSED:         %[[TAIL:.+]] = torch.aten.matmul %{{.+}}, %[[TAIL_V]] : !torch.vtensor<[2,2,4,?],f32>, !torch.vtensor<[2,2,?,16],f32> -> !torch.vtensor<[2,2,4,16],f32>
// DECOMPOSED:         torch.aten.add.Tensor %[[HEAD]], %[[TAIL]], %{{.+}} -> !torch.vtensor<[2,2,4,16],f32>
// DECOMPOSED-NOT:     vtensor<[2,8,5,16]
// DECOMPOSED:         return
func.func @decode_two_rows(%q: !torch.vtensor<[2,1,128],f32>, %k: !torch.vtensor<[2,1,32],f32>, %v: !torch.vtensor<[2,1,32],f32>, %pk: !torch.vtensor<[2,2,4,16],f32>, %pv: !torch.vtensor<[2,2,4,16],f32>, %sk: !torch.vtensor<[2],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[2,1,128],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 8 : si64} : (!torch.vtensor<[2,1,128],f32>, !torch.vtensor<[2,1,32],f32>, !torch.vtensor<[2,1,32],f32>, !torch.vtensor<[2,2,4,16],f32>, !torch.vtensor<[2,2,4,16],f32>, !torch.vtensor<[2],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[2,1,128],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[2,1,128],f32>, !torch.vtensor<[2,2,5,16],f32>, !torch.vtensor<[2,2,5,16],f32>
}

// A shared 64-row buffer, f16.
// GPU-LABEL: func.func @shared_buffer
// GPU-NOT:     torch.aten.scatter
// GPU-NOT:     torch.aten.item
// GPU-NOT:     torch.aten.Bool.Tensor
// GPU:         %[[NEW_ROW:.+]] = torch.aten.unsqueeze {{.+}} -> !torch.vtensor<[1,1,64,1],i1>
// GPU:         %[[NEW_K:.+]] = torch.aten.expand {{.+}} -> !torch.vtensor<[1,2,64,16],f16>
// GPU:         %[[PRESENT_K:.+]] = torch.aten.where.self %[[NEW_ROW]], %[[NEW_K]], %arg3 : {{.+}} -> !torch.vtensor<[1,2,64,16],f16>
// GPU:         torch.aten.where.self {{.+}}, %arg4 : {{.+}} -> !torch.vtensor<[1,2,64,16],f16>
// GPU-NOT:     torch.aten.slice.Tensor %[[PRESENT_K]]
// GPU:         torch.aten.scaled_dot_product_attention {{.+}} : !torch.vtensor<[1,8,1,16],f32>, !torch.vtensor<[1,2,64,16],f32>, !torch.vtensor<[1,2,64,16],f32>
// GPU-NOT:     torch.aten.item
// GPU-NOT:     torch.aten.logical_and
// GPU:         %[[ALL_OK:.+]] = torch.aten.Bool.Tensor %{{.+}} : !torch.vtensor<[],i1>
// GPU-NEXT:    torch.prim.If %[[ALL_OK]] -> () {
// GPU-NEXT:      torch.prim.If.yield
// GPU-NEXT:    } else {
// GPU-NEXT:      %[[OK:.+]] = torch.aten.Bool.Tensor
// GPU-NEXT:      torch.runtime.assert %[[OK]], "gqa-torch-mlir: GroupQueryAttention: seqlens_k[b] must be >= 0
// GPU-NOT:     torch.aten.scaled_dot_product_attention
// GPU:         return {{.+}}, %[[PRESENT_K]],
func.func @shared_buffer(%q: !torch.vtensor<[1,1,128],f16>, %k: !torch.vtensor<[1,1,32],f16>, %v: !torch.vtensor<[1,1,32],f16>, %pk: !torch.vtensor<[1,2,64,16],f16>, %pv: !torch.vtensor<[1,2,64,16],f16>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,128],f16>, !torch.vtensor<[1,2,64,16],f16>, !torch.vtensor<[1,2,64,16],f16>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 8 : si64} : (!torch.vtensor<[1,1,128],f16>, !torch.vtensor<[1,1,32],f16>, !torch.vtensor<[1,1,32],f16>, !torch.vtensor<[1,2,64,16],f16>, !torch.vtensor<[1,2,64,16],f16>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,128],f16>, !torch.vtensor<[1,2,64,16],f16>, !torch.vtensor<[1,2,64,16],f16>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,128],f16>, !torch.vtensor<[1,2,64,16],f16>, !torch.vtensor<[1,2,64,16],f16>
}
