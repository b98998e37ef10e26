// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s --check-prefix=CPU
// RUN: gqa-torch-mlir-opt "--convert-onnx-gqa-to-torch=device=gpu" %s | FileCheck %s --check-prefix=GPU

// The standard Attention's causal prefill whose query length is known at run
// time only (B=1, H=4, Hkv=2, Dh=16, f32): from 128 rows on, blocks of 64
// query rows in a loop, each over the keys it can see.  On the CPU each block
// takes those keys in chunks of 64 in a loop of its own, every chunk's shapes
// static (scores [1,2,G*64,64] plus the bias chunk), the softmax carried across
// the chunks online (three loop-carried tensors), normalised once after them.
// K, V and the bias are padded to whole chunks once, before the blocks: the bias
// with -inf, and -inf in the rows with no key to see (onnxruntime's zero rows).
// The GPU form keeps one matmul per block over a run-time key count.

// CPU-LABEL: func.func @dynamic_prefill
// CPU:         torch.aten.constant_pad_nd %arg1, {{.+}} -> !torch.vtensor<[1,2,?,16],f32>
// CPU:         torch.aten.constant_pad_nd %arg2, {{.+}} -> !torch.vtensor<[1,2,?,16],f32>
// CPU:         %[[ROWLESS:.+]] = torch.aten.where.ScalarSelf %{{.+}}, %float-Inf, %{{.+}} : !torch.vtensor<[1,1,?,1],i1>, !torch.float, !torch.vtensor<[1,1,?,?],f32>
// CPU:         torch.aten.constant_pad_nd %[[ROWLESS]], %{{.+}}, %float-Inf {{.+}} -> !torch.vtensor<[1,1,?,?],f32>
// CPU:         torch.prim.Loop {{.+}} init({{.+}}) {
// CPU:           %[[CHUNKS:.+]] = torch.aten.floordiv.int %{{.+}}, %int64
// CPU:           %[[ONLINE:.+]]:3 = torch.prim.Loop %[[CHUNKS]], %{{.+}}, init(%{{.+}}, %{{.+}}, %{{.+}}) {
// CPU:             torch.aten.matmul {{.+}} : !torch.vtensor<[1,2,128,16],f32>, !torch.vtensor<[1,2,16,64],f32> -> !torch.vtensor<[1,2,128,64],f32>
// CPU:             torch.aten.mul.Scalar {{.+}} -> !torch.vtensor<[1,2,128,64],f32>
// CPU:             torch.aten.add.Tensor {{.+}} : !torch.vtensor<[1,2,128,64],f32>, !torch.vtensor<[1,1,128,64],f32>, !torch.int -> !torch.vtensor<[1,2,128,64],f32>
// CPU:             torch.aten.amax {{.+}} -> !torch.vtensor<[1,2,128,1],f32>
// CPU:             torch.aten.exp {{.+}} : !torch.vtensor<[1,2,128,64],f32>
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
func.func @dynamic_prefill(%q: !torch.vtensor<[1,4,?,16],f32>, %k: !torch.vtensor<[1,2,?,16],f32>, %v: !torch.vtensor<[1,2,?,16],f32>) -> !torch.vtensor<[1,4,?,16],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %0 = torch.operator "onnx.Attention"(%q, %k, %v) {torch.onnx.is_causal = 1 : si64} : (!torch.vtensor<[1,4,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>, !torch.vtensor<[1,2,?,16],f32>) -> !torch.vtensor<[1,4,?,16],f32>
  return %0 : !torch.vtensor<[1,4,?,16],f32>
}
