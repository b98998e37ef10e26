// ScatterND: an unknown reduction refused by name; the rest is torch-mlir's (indices: guard-onnx-indices).
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

func.func @unknown_reduction(%x: !torch.vtensor<[4,5],f32>, %idx: !torch.vtensor<[2,1],si64>, %u: !torch.vtensor<[2,5],f32>) -> !torch.vtensor<[4,5],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  // expected-error@+1 {{ai.onnx.ScatterND: attribute 'reduction': value 'Add' is not supported; supported: none, add, mul, min, max}}
  %0 = torch.operator "onnx.ScatterND"(%x, %idx, %u) {torch.onnx.reduction = "Add"} : (!torch.vtensor<[4,5],f32>, !torch.vtensor<[2,1],si64>, !torch.vtensor<[2,5],f32>) -> !torch.vtensor<[4,5],f32>
  return %0 : !torch.vtensor<[4,5],f32>
}
