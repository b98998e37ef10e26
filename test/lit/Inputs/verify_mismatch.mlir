// Input of opt_driver.mlir's VERIFY case: one expected error that is not emitted
// (its text differs), and one error that no comment expects.
func.func @wrong_text(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> !torch.vtensor<[1,1,64],f32> attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  // expected-error@+1 {{attribute 'num_heads': is something else}}
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0 : !torch.vtensor<[1,1,64],f32>
}
