"""The IREE backends: iree-cpu and iree-cuda.

  targets.py    the targets: iree-compile flags and runtime driver per backend name
  compiler.py   IreeBackend: import, our passes inside IREE's bindings, iree-compile (needs iree-base-compiler)
  tuning.py     iree-cpu's tuning spec: the tile sizes of a decode step's Q.K^T
  runtime.py    IreeCompiledModule: a VM flatbuffer on an IREE device (needs only iree-base-runtime)
  host_import.py  large numpy feeds read in place on the CPU, unaligned ones from a staging copy (aligned_empty)
  fast_call.py  the lean path of a CPU call once a function has run (a decode step's fixed cost)
  vm_results.py  what the VM hands back to both paths: a failed call's message, a result's element type

The compiler's names are loaded on first use, so that a host with only the
runtime (a GPU machine running a vmfb compiled elsewhere) imports runtime.py
without iree.compiler.
"""

from __future__ import annotations

import importlib

from .targets import COMPILE_FLAGS, TARGETS, IreeTarget

_FROM_COMPILER = ("IreeBackend", "IreeCpuBackend", "LoweredModule")
_FROM_RUNTIME = ("DeviceValue", "IreeCompiledModule", "available_cpus", "device_for", "local_task_workers")
_FROM_HOST_IMPORT = ("aligned_empty",)

__all__ = ["COMPILE_FLAGS", "TARGETS", "IreeTarget", *_FROM_COMPILER, *_FROM_RUNTIME, *_FROM_HOST_IMPORT]


def __getattr__(name: str):
    if name in _FROM_COMPILER:
        return getattr(importlib.import_module(f"{__name__}.compiler"), name)
    if name in _FROM_RUNTIME:
        return getattr(importlib.import_module(f"{__name__}.runtime"), name)
    if name in _FROM_HOST_IMPORT:
        return getattr(importlib.import_module(f"{__name__}.host_import"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
