// The gqa-refbackend-check-allocations pass (backends/refbackend/passes.py),
// on the loops after munge: each memref.alloc of a public function is
// followed by a check that malloc returned memory and, with dynamic sizes,
// that the byte size stayed below 2^62 (a wrapped size is a small malloc
// that succeeds); the check is marked with its id, its message appended to
// the module's gqa_refbackend.checks.
// RUN: gqa-torch-mlir-opt --split-input-file --gqa-refbackend-check-allocations %s | FileCheck %s

// A dynamic size: 4 x 4 bytes (static dims x f32) times each dynamic size, in f64.
// CHECK-LABEL: module attributes {gqa_refbackend.checks = ["gqa-torch-mlir: out of memory: the feeds' sizes need a buffer memref<?x4xf32> larger than this machine can allocate"]}
// CHECK-LABEL: func.func @ones
// CHECK:         %[[N:.+]] = arith.index_cast
// CHECK-NEXT:    %[[ALLOC:.+]] = memref.alloc(%[[N]]) {alignment = 64 : i64} : memref<?x4xf32>
// CHECK-NEXT:    %[[PTR:.+]] = memref.extract_aligned_pointer_as_index %[[ALLOC]] : memref<?x4xf32> -> index
// CHECK-NEXT:    %[[ZERO:.+]] = arith.constant 0 : index
// CHECK-NEXT:    %[[NOT_NULL:.+]] = arith.cmpi ne, %[[PTR]], %[[ZERO]] : index
// CHECK-NEXT:    %[[BYTES:.+]] = arith.constant 1.600000e+01 : f64
// CHECK-NEXT:    %[[N_I64:.+]] = arith.index_castui %[[N]] : index to i64
// CHECK-NEXT:    %[[N_F64:.+]] = arith.uitofp %[[N_I64]] : i64 to f64
// CHECK-NEXT:    %[[TOTAL:.+]] = arith.mulf %[[BYTES]], %[[N_F64]] : f64
// CHECK-NEXT:    %[[LIMIT:.+]] = arith.constant 4.6116860184273879E+18 : f64
// CHECK-NEXT:    %[[FITS:.+]] = arith.cmpf olt, %[[TOTAL]], %[[LIMIT]] : f64
// CHECK-NEXT:    %[[OK:.+]] = arith.andi %[[NOT_NULL]], %[[FITS]] : i1
// CHECK-NEXT:    cf.assert %[[OK]], "gqa-refbackend-check:0"
// CHECK-NEXT:    scf.for
// CHECK:       func.func private @refbackend_runtime_check(i64, i64) attributes {llvm.emit_c_interface}
func.func private @refbackend_consume_func_return_mrf32(memref<*xf32>) attributes {llvm.emit_c_interface}
func.func @ones(%arg0: memref<*xi64>) attributes {llvm.emit_c_interface} {
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %cst = arith.constant 1.000000e+00 : f32
  %cast = memref.cast %arg0 : memref<*xi64> to memref<i64>
  %0 = memref.load %cast[] : memref<i64>
  %1 = arith.index_cast %0 : i64 to index
  %alloc = memref.alloc(%1) {alignment = 64 : i64} : memref<?x4xf32>
  scf.for %arg1 = %c0 to %1 step %c1 {
    scf.for %arg2 = %c0 to %c4 step %c1 {
      memref.store %cst, %alloc[%arg1, %arg2] : memref<?x4xf32>
    }
  }
  %cast_0 = memref.cast %alloc : memref<?x4xf32> to memref<*xf32>
  call @refbackend_consume_func_return_mrf32(%cast_0) : (memref<*xf32>) -> ()
  return
}

// -----

// After gqa-refbackend-report-checks: the ids go on from its table, the
// callback it declared is not declared again.  A static size only needs the
// pointer checked; a private function's allocations are not checked.
// CHECK-LABEL: module attributes {gqa_refbackend.checks = ["gqa-torch-mlir: index must be < 4", "gqa-torch-mlir: out of memory: the feeds' sizes need a buffer memref<2x2xi64> larger than this machine can allocate"]}
// CHECK-LABEL: func.func private @helper
// CHECK-NEXT:    memref.alloc() : memref<8xf32>
// CHECK-NOT:     cf.assert
// CHECK:       func.func @static
// CHECK:         %[[ALLOC:.+]] = memref.alloc() {alignment = 64 : i64} : memref<2x2xi64>
// CHECK-NEXT:    %[[PTR:.+]] = memref.extract_aligned_pointer_as_index %[[ALLOC]]
// CHECK-NEXT:    %[[ZERO:.+]] = arith.constant 0 : index
// CHECK-NEXT:    %[[NOT_NULL:.+]] = arith.cmpi ne, %[[PTR]], %[[ZERO]] : index
// CHECK-NEXT:    cf.assert %[[NOT_NULL]], "gqa-refbackend-check:1"
// CHECK-NEXT:    memref.store
// CHECK:         func.func private @refbackend_runtime_check
// CHECK-NOT:     func.func private @refbackend_runtime_check
module attributes {gqa_refbackend.checks = ["gqa-torch-mlir: index must be < 4"]} {
  func.func private @helper() {
    %alloc = memref.alloc() : memref<8xf32>
    return
  }
  func.func @static(%arg0: memref<*xi64>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c0_i64 = arith.constant 0 : i64
    %alloc = memref.alloc() {alignment = 64 : i64} : memref<2x2xi64>
    memref.store %c0_i64, %alloc[%c0, %c0] : memref<2x2xi64>
    memref.dealloc %alloc : memref<2x2xi64>
    return
  }
  func.func private @refbackend_runtime_check(i64, i64) attributes {llvm.emit_c_interface}
}

// -----

// No allocation: nothing to check, no table, no callback.
// CHECK-NOT:   gqa_refbackend.checks
// CHECK-LABEL: func.func @no_allocation
// CHECK-NOT:   refbackend_runtime_check
func.func @no_allocation(%arg0: memref<*xf32>) attributes {llvm.emit_c_interface} {
  return
}
