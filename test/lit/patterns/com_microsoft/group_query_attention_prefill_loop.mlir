// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s --check-prefix=CPU
// RUN: gqa-torch-mlir-opt "--convert-onnx-gqa-to-torch=device=gpu attention=decomposed" %s | FileCheck %s --check-prefix=GPU

// A prefill whose query length is known at run time only (B=1, H=4, Hkv=2,
// Dh=16): from 128 rows on, blocks of 64 query rows in a loop, each over the
// keys it can see.  On the CPU each block takes those keys in chunks of 64 in
// a loop of its own, every chunk's shapes static (scores [1,2,G*64,64]), the
// softmax carried across the chunks online (running maximum, sum and
// unnormalised output: three loop-carried tensors), normalised once after the
// chunks.  K and V are padded to whole chunks once, before the blocks.  The
// GPU form keeps one matmul per block over a run-time key count.

// CPU-LABEL: func.func @dynamic_prefill
// CPU:         torch.aten.constant_pad_nd {{.+}} : !torch.vtensor<[1,2,?,16],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[1,2,?,16],f32>
// CPU:         torch.aten.constant_pad_nd {{.+}} : !torch.vtensor<[1,2,?,16],f32>, !torch.list<int>, !torch.float -> !torch.vtensor<[1,2,?,16],f32>
// CPU:         torch.prim.Loop {{.+}} init({{.+}}) {
// CPU:           %[[CHUNKS:.+]] = torch.aten.floordiv.int %{{.+}}, %int64
// CPU:           %[[ONLINE:.+]]:3 = torch.prim.Loop %[[CHUNKS]], %{{.+}}, init(%{{.+}}, %{{.+}}, %{{.+}}) {
// CPU:             torch.aten.matmul {{.+}} : !torch.vtensor<[1,2,128,16],f32>, !torch.vtensor<[1,2,16,64],f32> -> !torch.vtensor<[1,2,128,64],f32>
// CPU:             torch.aten.amax {{.+}} -> !torch.vtensor<[1,2,128,1],f32>
// CPU:             torch.aten.maximum
// CPU:             torch.aten.exp {{.+}} : !torch.vtensor<[1,2,128,64],f32>
// CPU:             torch.aten.sum.dim_IntList
// CPU:             torch.aten.matmul {{.+}} : !torch.vtensor<[1,2,128,64],f32>, !torch.vtensor<[1,2,64,16],f32> -> !torch.vtensor<[1,2,128,16],f32>
// CPU:             torch.prim.Loop.condition {{.+}}, iter({{.+}} : !torch.vtensor<[1,2,128,1],f32>, !torch.vtensor<[1,2,128,1],f32>, !torch.vtensor<[1,2,128,16],f32>)
// CPU:           torch.aten.div.Tensor %[[ONLINE]]#2, {{.+}} -> !torch.vtensor<[1,2,128,16],f32>
// CPU:           torch.aten.slice_scatter
// CPU:           torch.prim.Loop.condition

// GPU-LABEL: func.func @dynamic_prefill
// GPU:         torch.prim.Loop {{.+}} init({{.+}}) {
// GPU-NOT:       torch.prim.Loop %
// GPU:           torch.aten.matmul {{.+}} : !torch.vtensor<[1,2,128,16],f32>, !torch.vtensor<[1,2,16,?],f32> -> !torch.vtensor<[1,2,128,?],f32>
// GPU-NOT:       torch.prim.Loop %
// GPU:           torch.prim.Loop.condition
func.func @dynamic_prefill(%q: !torch.vtensor<[1,?,64],f32>, %k: !torch.vtensor<[1,?,32],f32>, %v: !torch.vtensor<[1,?,32],f32>, %pk: !torch.vtensor<[1,2,?,16],f32>, %pv: !torch.vtensor<[1,2,?,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,?,64],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.do_rotary = 0 : si64, torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,?,64],f32>, !torch.vtensor<[1,?,32],f32>, !torch.vtensor<[1,?,32],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,?,64],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,?,64],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>
}
