"""Guards: run-time checks that ops torch-mlir lowers on trust get before its conversion.

  indices.py   Gather, GatherElements, GatherND, ScatterElements, ScatterND: one
               table; constant indices checked before import, the rest checked
               and clamped at run time by the ``guard-onnx-indices`` pass
               (passes/guard_onnx_indices.py)
"""
