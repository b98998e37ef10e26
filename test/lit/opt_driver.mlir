// gqa-torch-mlir-opt behaves like torch-mlir-opt: stdin, -o, pass flags in
// order, errors on stderr with a non-zero exit and no Python traceback.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch < %s | FileCheck %s --check-prefix=STDIN
// RUN: gqa-torch-mlir-opt --canonicalize --convert-onnx-gqa-to-torch %s -o %t.mlir
// RUN: FileCheck %s --check-prefix=STDIN --input-file=%t.mlir
// RUN: not gqa-torch-mlir-opt --no-such-pass %s 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not gqa-torch-mlir-opt %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not gqa-torch-mlir-opt --pass-pipeline='builtin.module(canonicalize' %s 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %S/Inputs/not_mlir.txt 2>&1 | FileCheck %s --check-prefix=PARSE
// RUN: not gqa-torch-mlir-opt --convert-onnx-gqa-to-torch=attention=fast %s 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not gqa-torch-mlir-opt --guard-onnx-indices=attention=sdpa %s 2>&1 | FileCheck %s --check-prefix=GUARD-OPTION
// RUN: not gqa-torch-mlir-opt --verify-diagnostics --convert-onnx-gqa-to-torch %S/Inputs/verify_mismatch.mlir 2>&1 | FileCheck %s --check-prefix=VERIFY

// STDIN-LABEL: func.func @decode
// STDIN:         torch.aten.matmul
// UNKNOWN:       gqa-torch-mlir-opt: error: 'no-such-pass' is not a pass or pipeline known to torch-mlir-opt
// UNKNOWN-NOT:   Traceback
// MISSING:       gqa-torch-mlir-opt: error: cannot open input file '{{.+}}.missing'
// SYNTAX:        gqa-torch-mlir-opt: error: invalid --pass-pipeline: unbalanced '('
// PARSE:         not_mlir.txt:1:1: error:
// PARSE-NOT:     Traceback
// OPTION:        gqa-torch-mlir-opt: error: option attention='fast' is not one of decomposed, sdpa
// GUARD-OPTION:  gqa-torch-mlir-opt: error: guard-onnx-indices takes no options, got 'attention=sdpa'
func.func @decode(%q: !torch.vtensor<[1,1,64],f32>, %k: !torch.vtensor<[1,1,32],f32>, %v: !torch.vtensor<[1,1,32],f32>, %pk: !torch.vtensor<[1,2,4,16],f32>, %pv: !torch.vtensor<[1,2,4,16],f32>, %sk: !torch.vtensor<[1],si32>, %tot: !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.opset_versions = {com.microsoft = 1 : si64}} {
  %0:3 = torch.operator "onnx.GroupQueryAttention"(%q, %k, %v, %pk, %pv, %sk, %tot) {torch.onnx.kv_num_heads = 2 : si64, torch.onnx.num_heads = 4 : si64} : (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,1,32],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1,2,4,16],f32>, !torch.vtensor<[1],si32>, !torch.vtensor<[],si32>) -> (!torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[1,1,64],f32>, !torch.vtensor<[1,2,5,16],f32>, !torch.vtensor<[1,2,5,16],f32>
}

// --verify-diagnostics reports an expected error that was not produced, and an error no comment expects.
// VERIFY: verify_mismatch.mlir:4: error: expected error "attribute 'num_heads': is something else" was not produced
// VERIFY: verify_mismatch.mlir:5:10: error: unexpected error: com.microsoft.GroupQueryAttention: attribute 'num_heads': is required but absent
