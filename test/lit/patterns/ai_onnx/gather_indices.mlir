// ONNX Gather: indices only known at run time are checked against [-n, n) and
// clamped, then the op is left for torch-mlir's conversion; constant indices
// (shape arithmetic torch-mlir folds) are left untouched.
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s

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
// way (patterns/ai_onnx/_indices.py): checked, clamped, rebuilt for torch-mlir.
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
