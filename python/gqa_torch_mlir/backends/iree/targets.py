"""The IREE targets a model compiles for, by backend name: iree-compile flags and the runtime driver.

  iree-cpu    IREE's llvm-cpu code generation for this host's CPU; run on ``local-sync``
              (one thread) or ``local-task`` (a worker pool)
  iree-cuda   IREE's CUDA code generation (PTX for ``--iree-cuda-target``, sm_80 by
              default: IREE 3.13 lists no plain sm_90, and the driver JIT-compiles the
              PTX for newer GPUs such as Hopper); compiles on any host, runs where
              iree-base-runtime finds a CUDA driver

iree-cpu also compiles with tuning.py's spec (IREE's CPU tile sizes for a decode step's Q.K^T),
and with its weight matmuls data-tiled (weight_tiling.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Tuple

# IREE narrows f64 to f32 by default: a float64 model's buffers would then be read at half their size.
_KEEP_F64 = "--iree-input-demote-f64-to-f32=false"

#: The CUDA architecture the iree-cuda target compiles for (GQA_TORCH_MLIR_CUDA_TARGET overrides it).
CUDA_TARGET = os.environ.get("GQA_TORCH_MLIR_CUDA_TARGET", "sm_80")


@dataclass(frozen=True)
class IreeTarget:
    backend: str  # the InferenceSession / CLI backend name
    flags: Tuple[str, ...]  # iree-compile flags (the same on the repro command line)
    driver: str  # "local" (local-sync / local-task by thread count) or an IREE HAL driver name
    tuned: bool = False  # compiled with tuning.py's spec (its flags follow ``flags``; without it, flags undoing it)
    weight_tiling: bool = False  # the matmuls against constant weights data-tiled (weight_tiling.py)


TARGETS: Dict[str, IreeTarget] = {
    "iree-cpu": IreeTarget(
        "iree-cpu",
        ("--iree-input-type=onnx", "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
         "--iree-llvmcpu-target-cpu=host", _KEEP_F64),
        "local",
        tuned=True,
        weight_tiling=True,
    ),
    "iree-cuda": IreeTarget(
        "iree-cuda",
        ("--iree-input-type=onnx", "--iree-hal-target-device=cuda", f"--iree-cuda-target={CUDA_TARGET}", _KEEP_F64),
        "cuda",
    ),
}

COMPILE_FLAGS: Tuple[str, ...] = TARGETS["iree-cpu"].flags
"""iree-compile flags of the iree-cpu backend."""
