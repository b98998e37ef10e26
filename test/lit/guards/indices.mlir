// The guard-onnx-indices pass (guards/indices.py): indices only known at run
// time are checked against [-n, n) and clamped, dims checked as onnxruntime
// checks them, and the op rebuilt for torch-mlir's conversion; constant indices
// (shape arithmetic torch-mlir folds) are left untouched.
// RUN: gqa-torch-mlir-opt --split-input-file --guard-onnx-indices %s | FileCheck %s
// The lowering pass alone leaves them to torch-mlir: the guards are their own pass.
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s --check-prefix=UNGUARDED
// UNGUARDED-NOT: torch.runtime.assert
// UNGUARDED-NOT: torch.aten.clamp

// Token ids into an embedding table of 211 rows.
// CHECK-LABEL: func.func @embedding
// CHECK:         %[[ALL:.+]] = torch.aten.all
// CHECK:         %[[OK:.+]] = torch.aten.Bool.Tensor %[[ALL]]
// CHECK:         torch.runtime.assert %[[OK]], "gqa-torch-mlir: Gather: indices must lie in [-n, n), n = data dimension 0 (onnxruntime rejects them otherwise) [at {{.+}}]"
// CHECK:         %[[IDS:.+]] = torch.aten.clamp %arg1, %{{.+}}, %{{.+}} : !torch.vtensor<[1,?],si64>
// CHECK:         torch.operator "onnx.Gather"(%arg0, %[[IDS]]) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[211,64],f32>, !torch.vtensor<[1,?],si64>) -> !torch.vtensor<[1,?,64],f32>
func.func @embedding(%table: !torch.vtensor<[211,64],f32>, %ids: !torch.vtensor<[1,?],si64>) -> !torch.vtensor<[1,?,64],f32> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %0 = torch.operator "onnx.Gather"(%table, %ids) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[211,64],f32>, !torch.vtensor<[1,?],si64>) -> !torch.vtensor<[1,?,64],f32>
  return %0 : !torch.vtensor<[1,?,64],f32>
}

// -----

// A constant index (an ONNX initializer, imported as onnx.Constant) is not checked.
// CHECK-LABEL: func.func @constant_index
// CHECK-NOT:     torch.runtime.assert
// CHECK:         torch.operator "onnx.Gather"(%arg0, %{{.+}}) {torch.onnx.axis = 0 : si64}
func.func @constant_index(%shape: !torch.vtensor<[3],si64>) -> !torch.vtensor<[],si64> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %idx = torch.operator "onnx.Constant"() {torch.onnx.value = dense<1> : tensor<si64>} : () -> !torch.vtensor<[],si64>
  %0 = torch.operator "onnx.Gather"(%shape, %idx) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[3],si64>, !torch.vtensor<[],si64>) -> !torch.vtensor<[],si64>
  return %0 : !torch.vtensor<[],si64>
}

// -----

// GatherElements, ScatterElements, GatherND and ScatterND are guarded the same
// way (one row each in guards/indices.py's table): checked, clamped, rebuilt.
// CHECK-LABEL: func.func @gather_elements
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GatherElements: indices dimension 0 must not exceed the data's (onnxruntime rejects it) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GatherElements: indices must lie in [-n, n), n = data dimension 1 (onnxruntime rejects them otherwise) [at {{.+}}]"
// CHECK:         %[[IDS:.+]] = torch.aten.clamp %arg1
// CHECK:         torch.operator "onnx.GatherElements"(%arg0, %[[IDS]]) {torch.onnx.axis = 1 : si64}
func.func @gather_elements(%x: !torch.vtensor<[?,5],f32>, %idx: !torch.vtensor<[?,2],si64>) -> !torch.vtensor<[?,2],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %0 = torch.operator "onnx.GatherElements"(%x, %idx) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[?,5],f32>, !torch.vtensor<[?,2],si64>) -> !torch.vtensor<[?,2],f32>
  return %0 : !torch.vtensor<[?,2],f32>
}

// -----

// Each column of the index tuples is checked against its own data dim.
// CHECK-LABEL: func.func @scatter_nd
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterND: updates dimension 0 must match indices.shape[:-1] + data.shape[k:] (onnxruntime rejects it) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterND: indices[..., 0] must lie in [-n, n), n = data dimension 0 (onnxruntime rejects them otherwise) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterND: indices[..., 1] must lie in [-n, n), n = data dimension 1 (onnxruntime rejects them otherwise) [at {{.+}}]"
// CHECK:         %[[IDS:.+]] = torch.aten.cat
// CHECK:         torch.operator "onnx.ScatterND"(%arg0, %[[IDS]], %arg2)
func.func @scatter_nd(%x: !torch.vtensor<[?,5,3],f32>, %idx: !torch.vtensor<[?,2],si64>, %u: !torch.vtensor<[?,3],f32>) -> !torch.vtensor<[?,5,3],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %0 = torch.operator "onnx.ScatterND"(%x, %idx, %u) : (!torch.vtensor<[?,5,3],f32>, !torch.vtensor<[?,2],si64>, !torch.vtensor<[?,3],f32>) -> !torch.vtensor<[?,5,3],f32>
  return %0 : !torch.vtensor<[?,5,3],f32>
}

// -----

// ScatterElements: indices no larger than the data off the axis, updates of the
// indices' shape; the reduction attribute is carried over to the rebuilt op.
// CHECK-LABEL: func.func @scatter_elements
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterElements: indices dimension 0 must not exceed the data's (onnxruntime rejects it) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterElements: updates dimension 0 must equal the indices' (onnxruntime rejects it) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterElements: indices must lie in [-n, n), n = data dimension -1 (onnxruntime rejects them otherwise) [at {{.+}}]"
// CHECK:         %[[IDS:.+]] = torch.aten.clamp %arg1
// CHECK:         torch.operator "onnx.ScatterElements"(%arg0, %[[IDS]], %arg2) {torch.onnx.axis = -1 : si64, torch.onnx.reduction = "add"}
func.func @scatter_elements(%x: !torch.vtensor<[?,5],f32>, %idx: !torch.vtensor<[?,2],si64>, %u: !torch.vtensor<[?,2],f32>) -> !torch.vtensor<[?,5],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %0 = torch.operator "onnx.ScatterElements"(%x, %idx, %u) {torch.onnx.axis = -1 : si64, torch.onnx.reduction = "add"} : (!torch.vtensor<[?,5],f32>, !torch.vtensor<[?,2],si64>, !torch.vtensor<[?,2],f32>) -> !torch.vtensor<[?,5],f32>
  return %0 : !torch.vtensor<[?,5],f32>
}

// -----

// GatherND with batch_dims = 1: the batch dim must match, and the one tuple
// column addresses data dim 1.
// CHECK-LABEL: func.func @gather_nd_batch_dims
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GatherND: indices dimension 0 (a batch dim) must equal the data's (onnxruntime rejects it) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: GatherND: indices[..., 0] must lie in [-n, n), n = data dimension 1 (onnxruntime rejects them otherwise) [at {{.+}}]"
// CHECK:         torch.operator "onnx.GatherND"(%arg0, %{{.+}}) {torch.onnx.batch_dims = 1 : si64}
func.func @gather_nd_batch_dims(%x: !torch.vtensor<[?,4,5],f32>, %idx: !torch.vtensor<[?,3,1],si64>) -> !torch.vtensor<[?,3,5],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %0 = torch.operator "onnx.GatherND"(%x, %idx) {torch.onnx.batch_dims = 1 : si64} : (!torch.vtensor<[?,4,5],f32>, !torch.vtensor<[?,3,1],si64>) -> !torch.vtensor<[?,3,5],f32>
  return %0 : !torch.vtensor<[?,3,5],f32>
}

// -----

// An inline constant in range of a static dim is checked here and left as it is.
// CHECK-LABEL: func.func @inline_constant_in_range
// CHECK-NOT:     torch.runtime.assert
// CHECK:         torch.operator "onnx.Gather"(%arg0, %{{.+}}) {torch.onnx.axis = 1 : si64}
func.func @inline_constant_in_range(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,2],f32> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %idx = torch.vtensor.literal(dense<[-4, 3]> : tensor<2xsi64>) : !torch.vtensor<[2],si64>
  %0 = torch.operator "onnx.Gather"(%x, %idx) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

// Inside a --pass-pipeline, nested or not, both of our passes run where named.
// RUN: gqa-torch-mlir-opt --split-input-file --pass-pipeline='builtin.module(func.func(canonicalize,guard-onnx-indices),convert-onnx-gqa-to-torch)' %s | FileCheck %s --check-prefix=PIPELINE
// PIPELINE-LABEL: func.func @in_a_pipeline
// PIPELINE:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: Gather: indices must lie in [-n, n)
// PIPELINE:         torch.operator "onnx.Gather"
func.func @in_a_pipeline(%table: !torch.vtensor<[7,3],f32>, %ids: !torch.vtensor<[?],si64>) -> !torch.vtensor<[?,3],f32> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %0 = torch.operator "onnx.Gather"(%table, %ids) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[7,3],f32>, !torch.vtensor<[?],si64>) -> !torch.vtensor<[?,3],f32>
  return %0 : !torch.vtensor<[?,3],f32>
}
