// The plugin pass followed by torch-mlir's own pipelines, through our driver:
// as flags, inside --pass-pipeline, and nested in func.func(...).
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch --torch-onnx-to-torch-backend-pipeline %s | FileCheck %s --check-prefix=BACKEND
// RUN: gqa-torch-mlir-opt --pass-pipeline='builtin.module(convert-onnx-gqa-to-torch, torch-onnx-to-torch-backend-pipeline)' %s | FileCheck %s --check-prefix=BACKEND
// RUN: gqa-torch-mlir-opt --pass-pipeline='builtin.module(func.func(canonicalize, convert-onnx-gqa-to-torch, convert-torch-onnx-to-torch))' %s | FileCheck %s --check-prefix=NESTED
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch --torch-onnx-to-torch-backend-pipeline --torch-backend-to-linalg-on-tensors-backend-pipeline %s | FileCheck %s --check-prefix=LINALG
// Upstream's own conversion alone does not lower this op: our pass must run first.
// RUN: gqa-torch-mlir-opt --pass-pipeline='builtin.module(convert-onnx-gqa-to-torch{attention=sdpa}, torch-onnx-to-torch-backend-pipeline)' %s | FileCheck %s --check-prefix=SDPA
// RUN: not gqa-torch-mlir-opt --convert-torch-onnx-to-torch %s 2>&1 | FileCheck %s --check-prefix=UPSTREAM

// BACKEND-LABEL: func.func @decoder_layer_attention
// BACKEND-NOT:     torch.operator
// BACKEND:         torch.aten.scatter.src
// BACKEND:         torch.aten.matmul
// BACKEND:         torch.aten.matmul
// BACKEND:         %[[SUM:.+]] = torch.aten.add.Tensor {{.+}} : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,?,64],f32>
// BACKEND:         return %[[SUM]], %{{.+}}, %{{.+}} : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>

// NESTED-LABEL: func.func @decoder_layer_attention
// NESTED-NOT:     torch.operator
// NESTED:         torch.aten.matmul
// NESTED:         torch.aten.add.Tensor

// SDPA-LABEL: func.func @decoder_layer_attention
// SDPA:         torch.aten.scaled_dot_product_attention

// LINALG-LABEL: func.func @decoder_layer_attention
// LINALG-NOT:     torch.
// LINALG:         linalg.generic
// LINALG:         return {{.+}} : tensor<?x?x64xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>

// UPSTREAM: error: failed to legalize operation 'torch.operator'
func.func @decoder_layer_attention(%q: !torch.vtensor<[?,?,64],f32>, %k: !torch.vtensor<[?,?,32],f32>, %v: !torch.vtensor<[?,?,32],f32>, %pk: !torch.vtensor<[?,2,?,16],f32>, %pv: !torch.vtensor<[?,2,?,16],f32>, %sk: !torch.vtensor<[?],si32>, %tot: !torch.vtensor<[],si32>, %residual: !torch.vtensor<[?,?,64],f32>) -> (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %none = torch.constant.none
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot, %none, %none, %none, %none, %none) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,?,32],f32>, !torch.vtensor<[?,?,32],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?],si32>, !torch.vtensor<[],si32>, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none) -> (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>)
  %1 = torch.operator "onnx.Add"(%0#0, %residual) : (!torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,?,64],f32>) -> !torch.vtensor<[?,?,64],f32>
  return %1, %0#1, %0#2 : !torch.vtensor<[?,?,64],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>
}
