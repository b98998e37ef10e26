// guard-onnx-indices refuses a constant index out of range of a static dim (onnxruntime rejects it when run).
// RUN: gqa-torch-mlir-opt --split-input-file --verify-diagnostics --guard-onnx-indices %s

func.func @gather(%x: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3,2],f32> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %idx = torch.vtensor.literal(dense<[1, 4]> : tensor<2xsi64>) : !torch.vtensor<[2],si64>
  // expected-error@+1 {{ai.onnx.Gather: input 1 'indices': holds 4, outside [-4, 4) for data dimension 1 (onnxruntime rejects it at run time)}}
  %0 = torch.operator "onnx.Gather"(%x, %idx) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[3,2],f32>
  return %0 : !torch.vtensor<[3,2],f32>
}

// -----

func.func @gather_nd(%x: !torch.vtensor<[4,5,3],f32>) -> !torch.vtensor<[1,3],f32> attributes {torch.onnx_meta.opset_version = 18 : si64} {
  %idx = torch.vtensor.literal(dense<[[0, -6]]> : tensor<1x2xsi64>) : !torch.vtensor<[1,2],si64>
  // expected-error@+1 {{ai.onnx.GatherND: input 1 'indices': holds -6, outside [-5, 5) for column 1 (data dimension 1) (onnxruntime rejects it at run time)}}
  %0 = torch.operator "onnx.GatherND"(%x, %idx) : (!torch.vtensor<[4,5,3],f32>, !torch.vtensor<[1,2],si64>) -> !torch.vtensor<[1,3],f32>
  return %0 : !torch.vtensor<[1,3],f32>
}
