// Refusals of the standard RMSNormalization (opset 23): the attribute or input is named, with what is supported.
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --convert-onnx-gqa-to-torch %s

// Statistics in another precision than float are refused by name.
func.func @stash_type(%x: !torch.vtensor<[2,16],f32>, %s: !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16],f32> attributes {torch.onnx_meta.opset_version = 23 : si64} {
  // expected-error@+1 {{ai.onnx.RMSNormalization: attribute 'stash_type': value 10 is not supported; supported: 1 (float statistics, as onnxruntime computes)}}
  %0 = torch.operator "onnx.RMSNormalization"(%x, %s) {torch.onnx.stash_type = 10 : si64} : (!torch.vtensor<[2,16],f32>, !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16],f32>
  return %0 : !torch.vtensor<[2,16],f32>
}
