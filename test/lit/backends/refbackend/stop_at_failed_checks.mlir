// The gqa-refbackend-stop-at-failed-checks pass (backends/refbackend/passes.py),
// on the flat CFG after convert-scf-to-cf: in a public function (which munge
// made return nothing) each marked cf.assert splits its block, a failure
// reporting its id (none for a "gqa-refbackend-stop": its run reported) and
// returning.  Elsewhere a stop is dropped (the checks reported, the call goes
// on) and a foreign assert gets its message back from gqa_refbackend.checks.
// RUN: gqa-torch-mlir-opt --split-input-file --gqa-refbackend-stop-at-failed-checks %s | FileCheck %s
// RUN: gqa-torch-mlir-opt --split-input-file --pass-pipeline='builtin.module(gqa-refbackend-stop-at-failed-checks)' %s | FileCheck %s

// CHECK-LABEL: func.func @f
// CHECK:         call @refbackend_runtime_check(%{{.+}}, %{{.+}}) : (i64, i64) -> ()
// CHECK-NEXT:    cf.cond_br %[[FITS:.+]], ^[[AFTER_STOP:.+]], ^[[STOPPED:.+]]
// CHECK-NEXT:  ^[[AFTER_STOP]]:
// CHECK-NEXT:    %[[LEN_OK:.+]] = arith.cmpi sge
// CHECK-NEXT:    cf.cond_br %[[LEN_OK]], ^[[REST:.+]], ^[[FAILED:.+]]
// CHECK-NEXT:  ^[[REST]]:
// CHECK-NEXT:    memref.cast
// CHECK-NEXT:    call @refbackend_consume_func_return_mrf32
// CHECK-NEXT:    return
// CHECK-NEXT:  ^[[FAILED]]:
// CHECK-NEXT:    %[[FALSE:.+]] = arith.constant false
// CHECK-NEXT:    %[[ID:.+]] = arith.constant 1 : i64
// CHECK-NEXT:    %[[NOT_OK:.+]] = arith.extui %[[FALSE]] : i1 to i64
// CHECK-NEXT:    call @refbackend_runtime_check(%[[NOT_OK]], %[[ID]]) : (i64, i64) -> ()
// CHECK-NEXT:    return
// CHECK-NEXT:  ^[[STOPPED]]:
// CHECK-NEXT:    return
// CHECK-NEXT:  }
// CHECK-NOT:   cf.assert
module attributes {gqa_refbackend.checks = ["gqa-torch-mlir: n must be at most the length", "length must be >= 0"]} {
  func.func private @refbackend_consume_func_return_mrf32(memref<*xf32>) attributes {llvm.emit_c_interface}
  func.func @f(%arg0: memref<*xf32>, %arg1: memref<*xi64>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c0_i64 = arith.constant 0 : i64
    %cast = memref.cast %arg0 : memref<*xf32> to memref<?xf32>
    %cast_0 = memref.cast %arg1 : memref<*xi64> to memref<i64>
    %0 = memref.load %cast_0[] : memref<i64>
    %1 = arith.index_cast %0 : i64 to index
    %dim = memref.dim %cast, %c0 : memref<?xf32>
    %2 = arith.cmpi sle, %1, %dim : index
    %3 = arith.extui %2 : i1 to i64
    call @refbackend_runtime_check(%3, %c0_i64) : (i64, i64) -> ()
    cf.assert %2, "gqa-refbackend-stop"
    %4 = arith.cmpi sge, %dim, %c0 : index
    cf.assert %4, "gqa-refbackend-check:1"
    %cast_1 = memref.cast %cast : memref<?xf32> to memref<*xf32>
    call @refbackend_consume_func_return_mrf32(%cast_1) : (memref<*xf32>) -> ()
    return
  }
  func.func private @refbackend_runtime_check(i64, i64) attributes {llvm.emit_c_interface}
}

// -----

// A function that returns values (a private callee keeps its results): a
// return there would not end the call.  The run's report stays, its stop
// goes; torch-mlir's assert aborts with its own message, as before.
// CHECK-LABEL: func.func private @checks
// CHECK:         call @refbackend_runtime_check(%{{.+}}, %{{.+}}) : (i64, i64) -> ()
// CHECK-NEXT:    %[[LEN_OK:.+]] = arith.cmpi sge
// CHECK-NEXT:    cf.assert %[[LEN_OK]], "length must be >= 0"
// CHECK-NEXT:    bufferization.clone
// CHECK-NOT:     cf.cond_br
// CHECK-NOT:     gqa-refbackend-stop
module attributes {gqa_refbackend.checks = ["gqa-torch-mlir: n must be at most the length", "length must be >= 0"]} {
  func.func private @checks(%arg0: memref<?xf32>, %arg1: memref<i64>) -> memref<?xf32> {
    %c0_i64 = arith.constant 0 : i64
    %c0 = arith.constant 0 : index
    %0 = memref.load %arg1[] : memref<i64>
    %1 = arith.index_cast %0 : i64 to index
    %dim = memref.dim %arg0, %c0 : memref<?xf32>
    %2 = arith.cmpi sle, %1, %dim : index
    %3 = arith.extui %2 : i1 to i64
    call @refbackend_runtime_check(%3, %c0_i64) : (i64, i64) -> ()
    cf.assert %2, "gqa-refbackend-stop"
    %4 = arith.cmpi sge, %dim, %c0 : index
    cf.assert %4, "gqa-refbackend-check:1"
    %5 = bufferization.clone %arg0 : memref<?xf32> to memref<?xf32>
    return %5 : memref<?xf32>
  }
  func.func private @refbackend_runtime_check(i64, i64) attributes {llvm.emit_c_interface}
}

// -----

// An assert without a mark (generate-runtime-verification's, added after
// gqa-refbackend-report-checks) is left to abort.
// CHECK-LABEL: func.func @unmarked
// CHECK:         cf.assert %{{.+}}, "out-of-bounds access"
// CHECK-NOT:     cf.cond_br
func.func @unmarked(%arg0: memref<*xf32>) attributes {llvm.emit_c_interface} {
  %true = arith.constant true
  cf.assert %true, "out-of-bounds access"
  return
}
