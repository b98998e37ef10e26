// The standard Attention (opset 23): present = past grown by zero rows, the new rows scattered in; causal keys excluded
// bottom-right (t > s + P) with the lowest finite value; scores on queries grouped by KV
// head (K/V never repeated), the mask and its empty rows copied per query of a group to
// match; softmax with rows that see no key set to 0; P.V regrouped.
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @gqa_causal_past
// CHECK:         %[[KGROWN:.+]] = torch.aten.cat {{.+}} -> !torch.vtensor<[1,2,5,8],f32>
// CHECK:         %[[K:.+]] = torch.aten.scatter.src %[[KGROWN]], %int2, %{{.+}}, %arg1 {{.+}} -> !torch.vtensor<[1,2,5,8],f32>
// CHECK:         %[[VGROWN:.+]] = torch.aten.cat {{.+}} -> !torch.vtensor<[1,2,5,8],f32>
// CHECK:         %[[V:.+]] = torch.aten.scatter.src %[[VGROWN]], %int2, %{{.+}}, %arg2 {{.+}} -> !torch.vtensor<[1,2,5,8],f32>
// CHECK:         %[[ROWS:.+]] = torch.aten.add.Scalar {{.+}}, %int3, {{.+}} -> !torch.vtensor<[2,1],si64>
// CHECK:         %[[EXCLUDED:.+]] = torch.aten.ge.Tensor {{.+}} -> !torch.vtensor<[2,5],i1>
// CHECK:         %[[BIAS:.+]] = torch.aten.where.Scalar {{.+}}, %float-3.402820e38, %float0.000000e00 {{.+}} -> !torch.vtensor<[1,1,2,5],f32>
// CHECK:         %[[FULL:.+]] = torch.aten.lt.Scalar {{.+}}, %float5.000000e-01 {{.+}} -> !torch.vtensor<[1,1,2,1],i1>
// CHECK:         %[[Q:.+]] = torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[1,2,4,8],f32>
// CHECK:         %[[KT:.+]] = torch.aten.transpose.int %[[K]], %int2, %int3
// CHECK:         torch.aten.matmul %[[Q]], %[[KT]] {{.+}} -> !torch.vtensor<[1,2,4,5],f32>
// CHECK:         %[[SCALED:.+]] = torch.aten.mul.Scalar {{.+}} -> !torch.vtensor<[1,2,4,5],f32>
// CHECK:         %[[BIASES:.+]] = torch.prim.ListConstruct %[[BIAS]], %[[BIAS]]
// CHECK:         %[[GBIAS:.+]] = torch.aten.cat %[[BIASES]], %int2 {{.+}} -> !torch.vtensor<[1,1,4,5],f32>
// CHECK:         torch.aten.add.Tensor %[[SCALED]], %[[GBIAS]]
// CHECK:         torch.aten.exp
// CHECK:         %[[FULLS:.+]] = torch.prim.ListConstruct %[[FULL]], %[[FULL]]
// CHECK:         %[[GFULL:.+]] = torch.aten.cat %[[FULLS]], %int2 {{.+}} -> !torch.vtensor<[1,1,4,1],i1>
// CHECK:         torch.aten.where.ScalarSelf %[[GFULL]], %float0.000000e00
// CHECK:         torch.aten.matmul {{.+}}, %[[V]] {{.+}} -> !torch.vtensor<[1,2,4,8],f32>
// CHECK:         %[[Y:.+]] = torch.aten.flatten.using_ints {{.+}} -> !torch.vtensor<[1,4,2,8],f32>
// CHECK:         return %[[Y]], %[[K]], %[[V]]
func.func @gqa_causal_past(%q: !torch.vtensor<[1,4,2,8],f32>, %k: !torch.vtensor<[1,2,2,8],f32>, %v: !torch.vtensor<[1,2,2,8],f32>, %pk: !torch.vtensor<[1,2,3,8],f32>, %pv: !torch.vtensor<[1,2,3,8],f32>) -> (!torch.vtensor<[1,4,2,8],f32>, !torch.vtensor<[1,2,5,8],f32>, !torch.vtensor<[1,2,5,8],f32>) attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.Attention"(%q, %k, %v, %none, %pk, %pv) {torch.onnx.is_causal = 1 : si64} : (!torch.vtensor<[1,4,2,8],f32>, !torch.vtensor<[1,2,2,8],f32>, !torch.vtensor<[1,2,2,8],f32>, !torch.none, !torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[1,2,3,8],f32>) -> (!torch.vtensor<[1,4,2,8],f32>, !torch.vtensor<[1,2,5,8],f32>, !torch.vtensor<[1,2,5,8],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,4,2,8],f32>, !torch.vtensor<[1,2,5,8],f32>, !torch.vtensor<[1,2,5,8],f32>
}

// -----

// A decode step (one new key after a past): causality excludes no key, so no mask is built.
// CHECK-LABEL: func.func @decode_causal_is_void
// CHECK-NOT:     torch.aten.where.Scalar
// CHECK-NOT:     torch.aten.lt.Scalar
// CHECK:         torch.aten.matmul
func.func @decode_causal_is_void(%q: !torch.vtensor<[1,4,1,8],f32>, %k: !torch.vtensor<[1,2,1,8],f32>, %v: !torch.vtensor<[1,2,1,8],f32>, %pk: !torch.vtensor<[1,2,3,8],f32>, %pv: !torch.vtensor<[1,2,3,8],f32>) -> (!torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,4,8],f32>, !torch.vtensor<[1,2,4,8],f32>) attributes {torch.onnx_meta.opset_version = 23 : si64} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.Attention"(%q, %k, %v, %none, %pk, %pv) {torch.onnx.is_causal = 1 : si64} : (!torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.vtensor<[1,2,1,8],f32>, !torch.none, !torch.vtensor<[1,2,3,8],f32>, !torch.vtensor<[1,2,3,8],f32>) -> (!torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,4,8],f32>, !torch.vtensor<[1,2,4,8],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,4,1,8],f32>, !torch.vtensor<[1,2,4,8],f32>, !torch.vtensor<[1,2,4,8],f32>
}
