// Refusals of ScatterElements, named with what is supported.
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

// onnxruntime runs an unknown reduction as 'none'; torch-mlir's conversion multiplied.
func.func @unknown_reduction(%x: !torch.vtensor<[4,5],f32>, %idx: !torch.vtensor<[4,2],si64>, %u: !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[4,5],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  // expected-error@+1 {{ai.onnx.ScatterElements: attribute 'reduction': value 'sum' is not supported; supported: none, add, mul, min, max}}
  %0 = torch.operator "onnx.ScatterElements"(%x, %idx, %u) {torch.onnx.axis = 1 : si64, torch.onnx.reduction = "sum"} : (!torch.vtensor<[4,5],f32>, !torch.vtensor<[4,2],si64>, !torch.vtensor<[4,2],f32>) -> !torch.vtensor<[4,5],f32>
  return %0 : !torch.vtensor<[4,5],f32>
}

// -----

func.func @bool_max(%x: !torch.vtensor<[4,5],i1>, %idx: !torch.vtensor<[4,2],si64>, %u: !torch.vtensor<[4,2],i1>) -> !torch.vtensor<[4,5],i1> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  // expected-error@+1 {{ai.onnx.ScatterElements: input 0 'data': reduction 'max' of bool data is not supported (onnxruntime's kernel has none)}}
  %0 = torch.operator "onnx.ScatterElements"(%x, %idx, %u) {torch.onnx.axis = 1 : si64, torch.onnx.reduction = "max"} : (!torch.vtensor<[4,5],i1>, !torch.vtensor<[4,2],si64>, !torch.vtensor<[4,2],i1>) -> !torch.vtensor<[4,5],i1>
  return %0 : !torch.vtensor<[4,5],i1>
}
