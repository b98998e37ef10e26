// The gqa-refbackend-report-checks pass (backends/refbackend/passes.py), the
// refbackend's first step, on linalg-on-tensors: every cf.assert gets an id
// (its message kept in the module's gqa_refbackend.checks); torch-mlir's
// are marked with their id, ours ("gqa-torch-mlir:") are gathered into runs
// (runs.py) that report each check and end in one "gqa-refbackend-stop".
// RUN: gqa-torch-mlir-opt --split-input-file --gqa-refbackend-report-checks %s | FileCheck %s

// Two of ours with only pure ops between them are one run, evaluated where
// the first stood: the second condition moves up, each check reports
// (ok, id), one assert of both stops.  torch-mlir's assert ends the run.
// CHECK-LABEL: module attributes {gqa_refbackend.checks = ["gqa-torch-mlir: n must be at most the length", "gqa-torch-mlir: n must be negative", "length must be >= 0"]}
// CHECK-LABEL: func.func @run
// CHECK:         %[[FITS:.+]] = arith.cmpi sle
// CHECK-NEXT:    %[[TWICE:.+]] = arith.addi
// CHECK-NEXT:    %[[NEG:.+]] = arith.cmpi slt, %[[TWICE]]
// CHECK-NEXT:    %[[ID0:.+]] = arith.constant 0 : i64
// CHECK-NEXT:    %[[OK0:.+]] = arith.extui %[[FITS]] : i1 to i64
// CHECK-NEXT:    call @refbackend_runtime_check(%[[OK0]], %[[ID0]]) : (i64, i64) -> ()
// CHECK-NEXT:    %[[ID1:.+]] = arith.constant 1 : i64
// CHECK-NEXT:    %[[OK1:.+]] = arith.extui %[[NEG]] : i1 to i64
// CHECK-NEXT:    call @refbackend_runtime_check(%[[OK1]], %[[ID1]]) : (i64, i64) -> ()
// CHECK-NEXT:    %[[BOTH:.+]] = arith.andi %[[FITS]], %[[NEG]] : i1
// CHECK-NEXT:    cf.assert %[[BOTH]], "gqa-refbackend-stop"
// CHECK-NEXT:    %[[LEN_OK:.+]] = arith.cmpi sge
// CHECK-NEXT:    cf.assert %[[LEN_OK]], "gqa-refbackend-check:2"
// CHECK-NEXT:    return
// CHECK:       func.func private @refbackend_runtime_check(i64, i64) attributes {llvm.emit_c_interface}
func.func @run(%a: tensor<?xf32>, %nt: tensor<i64>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %e = tensor.extract %nt[] : tensor<i64>
  %n = arith.index_cast %e : i64 to index
  %len = tensor.dim %a, %c0 : tensor<?xf32>
  %fits = arith.cmpi sle, %n, %len : index
  cf.assert %fits, "gqa-torch-mlir: n must be at most the length"
  %twice = arith.addi %n, %n : index
  %negative = arith.cmpi slt, %twice, %c0 : index
  cf.assert %negative, "gqa-torch-mlir: n must be negative"
  %ok = arith.cmpi sge, %len, %c0 : index
  cf.assert %ok, "length must be >= 0"
  return %a : tensor<?xf32>
}

// -----

// A condition read through a tensor.cast that an earlier check guards is not
// evaluated ahead of that check: two runs, the cast left after the first stop.
// CHECK-LABEL: module attributes {gqa_refbackend.checks = ["gqa-torch-mlir: a must hold 2 elements", "gqa-torch-mlir: a[1] must be positive"]}
// CHECK-LABEL: func.func @guarded_cast
// CHECK:         call @refbackend_runtime_check(%{{.+}}, %{{.+}})
// CHECK-NEXT:    cf.assert %{{.+}}, "gqa-refbackend-stop"
// CHECK-NEXT:    %[[PAIR:.+]] = tensor.cast %arg0 : tensor<?xf32> to tensor<2xf32>
// CHECK-NEXT:    tensor.extract %[[PAIR]]
// CHECK-NEXT:    %[[POS:.+]] = arith.cmpf ogt
// CHECK-NEXT:    %[[ID1:.+]] = arith.constant 1 : i64
// CHECK-NEXT:    %[[OK1:.+]] = arith.extui %[[POS]] : i1 to i64
// CHECK-NEXT:    call @refbackend_runtime_check(%[[OK1]], %[[ID1]])
// CHECK-NEXT:    cf.assert %[[POS]], "gqa-refbackend-stop"
func.func @guarded_cast(%a: tensor<?xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %len = tensor.dim %a, %c0 : tensor<?xf32>
  %two = arith.cmpi eq, %len, %c2 : index
  cf.assert %two, "gqa-torch-mlir: a must hold 2 elements"
  %pair = tensor.cast %a : tensor<?xf32> to tensor<2xf32>
  %second = tensor.extract %pair[%c1] : tensor<2xf32>
  %positive = arith.cmpf ogt, %second, %zero : f32
  cf.assert %positive, "gqa-torch-mlir: a[1] must be positive"
  return %a : tensor<?xf32>
}

// -----

// A condition a linalg reduction computes moves up with the ops it reads
// (the payload's captured %c4_i64 too); an op that is not pure (here a
// call) ends a run.
// CHECK-LABEL: func.func @not_pure
// CHECK:         %[[ROWS:.+]] = arith.cmpi eq
// CHECK-NEXT:    %[[FOUR:.+]] = arith.constant 4 : i64
// CHECK-NEXT:    %[[TRUE:.+]] = arith.constant true
// CHECK-NEXT:    tensor.empty
// CHECK-NEXT:    linalg.fill ins(%[[TRUE]] : i1)
// CHECK-NEXT:    %[[ALL:.+]] = linalg.generic
// CHECK:           arith.cmpi slt, %{{.+}}, %[[FOUR]] : i64
// CHECK:         %[[IN_RANGE:.+]] = tensor.extract %[[ALL]][] : tensor<i1>
// CHECK-NEXT:    %[[ID0:.+]] = arith.constant 0 : i64
// CHECK-NEXT:    %[[OK0:.+]] = arith.extui %[[ROWS]] : i1 to i64
// CHECK-NEXT:    call @refbackend_runtime_check(%[[OK0]], %[[ID0]])
// CHECK-NEXT:    %[[ID1:.+]] = arith.constant 1 : i64
// CHECK-NEXT:    %[[OK1:.+]] = arith.extui %[[IN_RANGE]] : i1 to i64
// CHECK-NEXT:    call @refbackend_runtime_check(%[[OK1]], %[[ID1]])
// CHECK-NEXT:    %[[BOTH:.+]] = arith.andi %[[ROWS]], %[[IN_RANGE]] : i1
// CHECK-NEXT:    cf.assert %[[BOTH]], "gqa-refbackend-stop"
// CHECK-NEXT:    %[[SCATTERED:.+]] = call @scatter
// CHECK:         %[[ID2:.+]] = arith.constant 2 : i64
// CHECK-NEXT:    %[[OK2:.+]] = arith.extui %{{.+}} : i1 to i64
// CHECK-NEXT:    call @refbackend_runtime_check(%[[OK2]], %[[ID2]])
// CHECK-NEXT:    cf.assert %{{.+}}, "gqa-refbackend-stop"
// CHECK-NEXT:    return %[[SCATTERED]]
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> ()>
func.func private @scatter(tensor<4x2xf32>, tensor<?x2xi64>, tensor<2xf32>) -> tensor<4x2xf32>
func.func @not_pure(%arg0: tensor<4x2xf32>, %arg1: tensor<?x2xi64>, %arg2: tensor<2xf32>) -> tensor<4x2xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %rows = tensor.dim %arg1, %c0 : tensor<?x2xi64>
  %two = arith.cmpi eq, %rows, %c2 : index
  cf.assert %two, "gqa-torch-mlir: indices must hold 2 rows"
  %c4_i64 = arith.constant 4 : i64
  %true = arith.constant true
  %0 = tensor.empty() : tensor<i1>
  %1 = linalg.fill ins(%true : i1) outs(%0 : tensor<i1>) -> tensor<i1>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "reduction"]} ins(%arg1 : tensor<?x2xi64>) outs(%1 : tensor<i1>) {
  ^bb0(%in: i64, %out: i1):
    %lt = arith.cmpi slt, %in, %c4_i64 : i64
    %and = arith.andi %lt, %out : i1
    linalg.yield %and : i1
  } -> tensor<i1>
  %ok = tensor.extract %2[] : tensor<i1>
  cf.assert %ok, "gqa-torch-mlir: index must be < 4"
  %3 = call @scatter(%arg0, %arg1, %arg2) : (tensor<4x2xf32>, tensor<?x2xi64>, tensor<2xf32>) -> tensor<4x2xf32>
  %first = tensor.extract %3[%c0, %c0] : tensor<4x2xf32>
  %finite = arith.cmpf ord, %first, %first : f32
  cf.assert %finite, "gqa-torch-mlir: the first element must not be NaN"
  return %3 : tensor<4x2xf32>
}

// -----

// A module without asserts is left as it is: no table, no callback.
// CHECK-NOT:   gqa_refbackend.checks
// CHECK-LABEL: func.func @no_checks
// CHECK-NOT:   refbackend_runtime_check
func.func @no_checks(%a: tensor<2xf32>) -> tensor<2xf32> {
  return %a : tensor<2xf32>
}
