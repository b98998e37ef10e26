// ScatterElements' min and max reductions, which torch-mlir's conversion lacks,
// become aten.scatter_reduce (amin/amax, the data's value included), negative
// indices wrapped; a NaN where the order of updates would decide fails a named
// check.  Other reductions are left to torch-mlir.  (The indices are guarded by
// guard-onnx-indices, test/lit/guards/indices.mlir.)
// RUN: gqa-torch-mlir-opt --split-input-file --convert-onnx-gqa-to-torch %s | FileCheck %s

// CHECK-LABEL: func.func @scatter_max
// CHECK:         %[[NEG:.+]] = torch.aten.lt.Scalar %arg1
// CHECK:         %[[WRAPPED:.+]] = torch.aten.where.self %[[NEG]]
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterElements: reduction 'max' with a NaN in the updates is not supported (onnxruntime's result depends on the update order) [at {{.+}}]"
// CHECK:         torch.runtime.assert %{{.+}}, "gqa-torch-mlir: ScatterElements: reduction 'max' with a NaN in the data where updates go is not supported (onnxruntime's result depends on the update order) [at {{.+}}]"
// CHECK:         %[[MODE:.+]] = torch.constant.str "amax"
// CHECK:         torch.aten.scatter_reduce.two %arg0, %{{.+}}, %[[WRAPPED]], %arg2, %[[MODE]], %true
// CHECK-NOT:     torch.operator
func.func @scatter_max(%x: !torch.vtensor<[?,5],f32>, %idx: !torch.vtensor<[?,2],si64>, %u: !torch.vtensor<[?,2],f32>) -> !torch.vtensor<[?,5],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %0 = torch.operator "onnx.ScatterElements"(%x, %idx, %u) {torch.onnx.axis = 1 : si64, torch.onnx.reduction = "max"} : (!torch.vtensor<[?,5],f32>, !torch.vtensor<[?,2],si64>, !torch.vtensor<[?,2],f32>) -> !torch.vtensor<[?,5],f32>
  return %0 : !torch.vtensor<[?,5],f32>
}

// -----

// Integer data has no NaN to check.
// CHECK-LABEL: func.func @scatter_min_int
// CHECK-NOT:     torch.runtime.assert
// CHECK:         torch.constant.str "amin"
// CHECK:         torch.aten.scatter_reduce.two
func.func @scatter_min_int(%x: !torch.vtensor<[4,5],si32>, %idx: !torch.vtensor<[4,2],si64>, %u: !torch.vtensor<[4,2],si32>) -> !torch.vtensor<[4,5],si32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %0 = torch.operator "onnx.ScatterElements"(%x, %idx, %u) {torch.onnx.axis = 1 : si64, torch.onnx.reduction = "min"} : (!torch.vtensor<[4,5],si32>, !torch.vtensor<[4,2],si64>, !torch.vtensor<[4,2],si32>) -> !torch.vtensor<[4,5],si32>
  return %0 : !torch.vtensor<[4,5],si32>
}

// -----

// CHECK-LABEL: func.func @scatter_add
// CHECK:         torch.operator "onnx.ScatterElements"(%arg0, %arg1, %arg2) {torch.onnx.axis = 1 : si64, torch.onnx.reduction = "add"}
func.func @scatter_add(%x: !torch.vtensor<[4,5],f32>, %idx: !torch.vtensor<[4,2],si64>, %u: !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[4,5],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %0 = torch.operator "onnx.ScatterElements"(%x, %idx, %u) {torch.onnx.axis = 1 : si64, torch.onnx.reduction = "add"} : (!torch.vtensor<[4,5],f32>, !torch.vtensor<[4,2],si64>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[4,5],f32>
  return %0 : !torch.vtensor<[4,5],f32>
}
