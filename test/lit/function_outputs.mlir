// A uint8 constant a function returns goes through two bitwise NOTs, so that
// torch-mlir's backend conversion does not fold it into a literal it cannot type;
// a uint8 value computed from an argument is returned as it is.
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch %s | FileCheck %s
// RUN: gqa-torch-mlir-opt --convert-onnx-gqa-to-torch --torch-onnx-to-torch-backend-pipeline --torch-backend-to-linalg-on-tensors-backend-pipeline %s | FileCheck %s --check-prefix=LINALG

// CHECK-LABEL: func.func @packed_weights
// CHECK:         %[[W:.+]] = torch.vtensor.literal(dense<{{.+}}> : tensor<2x3xui8>) : !torch.vtensor<[2,3],ui8>
// CHECK:         %[[SUM:.+]] = torch.operator "onnx.Add"(%arg0, %[[W]])
// CHECK:         %[[NOT:.+]] = torch.aten.bitwise_not %[[W]] : !torch.vtensor<[2,3],ui8> -> !torch.vtensor<[2,3],ui8>
// CHECK:         %[[SAME:.+]] = torch.aten.bitwise_not %[[NOT]] : !torch.vtensor<[2,3],ui8> -> !torch.vtensor<[2,3],ui8>
// CHECK:         return %[[SUM]], %[[SAME]] : !torch.vtensor<[2,3],ui8>, !torch.vtensor<[2,3],ui8>
// LINALG-LABEL: func.func @packed_weights
// LINALG:         return %{{.+}}, %{{.+}} : tensor<2x3xi8>, tensor<2x3xi8>
func.func @packed_weights(%arg0: !torch.vtensor<[2,3],ui8>) -> (!torch.vtensor<[2,3],ui8>, !torch.vtensor<[2,3],ui8>) attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %0 = torch.vtensor.literal(dense<[[1, 200, 3], [4, 5, 255]]> : tensor<2x3xui8>) : !torch.vtensor<[2,3],ui8>
  %1 = torch.operator "onnx.Add"(%arg0, %0) : (!torch.vtensor<[2,3],ui8>, !torch.vtensor<[2,3],ui8>) -> !torch.vtensor<[2,3],ui8>
  return %1, %0 : !torch.vtensor<[2,3],ui8>, !torch.vtensor<[2,3],ui8>
}
