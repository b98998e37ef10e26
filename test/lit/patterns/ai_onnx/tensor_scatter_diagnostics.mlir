// Refusals of TensorScatter (24), named with what is supported.
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

// The batch dim cannot be the sequence axis.
func.func @axis_zero(%past: !torch.vtensor<[2,8],f32>, %upd: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32> attributes {torch.onnx_meta.opset_version = 24 : si64} {
  // expected-error@+1 {{ai.onnx.TensorScatter: attribute 'axis': value -2 is not supported for rank 2; supported: a sequence dim in [1, 2) or [-1, 0)}}
  %0 = torch.operator "onnx.TensorScatter"(%past, %upd) : (!torch.vtensor<[2,8],f32>, !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>
  return %0 : !torch.vtensor<[2,8],f32>
}

// -----

// Modes are case-sensitive, as onnxruntime reads them.
func.func @mode(%past: !torch.vtensor<[2,8,4],f32>, %upd: !torch.vtensor<[2,1,4],f32>) -> !torch.vtensor<[2,8,4],f32> attributes {torch.onnx_meta.opset_version = 24 : si64} {
  // expected-error@+1 {{ai.onnx.TensorScatter: attribute 'mode': value 'Linear' is not supported; supported: 'linear' or 'circular'}}
  %0 = torch.operator "onnx.TensorScatter"(%past, %upd) {torch.onnx.mode = "Linear"} : (!torch.vtensor<[2,8,4],f32>, !torch.vtensor<[2,1,4],f32>) -> !torch.vtensor<[2,8,4],f32>
  return %0 : !torch.vtensor<[2,8,4],f32>
}
