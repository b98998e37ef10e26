"""CPU target flags given in ``extra_flags``, tried in a child process before the compile they would end.

An LLVM CPU name LLVM does not know (``--iree-llvmcpu-target-cpu=bogus``) ends
IREE's compile with ``LLVM ERROR`` and ``exit(1)``: inside this process, with
stderr captured for IREE's diagnostics, the Python process ended with no
message.  A backend whose ``extra_flags`` set the CPU target first compiles a
one-op module with its target flags through the ``iree-compile`` tool (a child
process: iree.compiler's ``compile_str``); if that fails, the compile is refused
with the tool's last lines.  Each set of flags is tried once a process; flags
without a CPU target setting are not tried.

:func:`takes_vnni` says whether the compile target can take ``matmul_nbits=vnni``
(AVX-512 VNNI's ``vpdpbusd``, kernels/nbits_matmul_vnni.py's instruction): this
host's /proc/cpuinfo where the flags name no CPU, else :func:`has_vnni`, a
dispatch that calls it compiled the same way as the one-op module.
"""

from __future__ import annotations

from typing import Dict, Sequence, Set, Tuple

from ...errors import GqaTorchMlirError
from ...options import host_has_avx512_vnni

TARGET_FLAGS = ("--iree-llvmcpu-target-cpu=", "--iree-llvmcpu-target-cpu-features=", "--iree-llvmcpu-target-triple=")
_ONE_OP = """
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, %a : tensor<4xf32>
  return %b : tensor<4xf32>
}
"""
_VNNI = """
stream.executable private @ex {
  stream.executable.export public @k workgroups() -> (index, index, index) {
    %c1 = arith.constant 1 : index
    stream.return %c1, %c1, %c1 : index, index, index
  }
  builtin.module {
    func.func @k(%ab: !stream.binding, %yb: !stream.binding) {
      %c0 = arith.constant 0 : index
      %A = stream.binding.subspan %ab[%c0] : !stream.binding -> memref<64xi8>
      %Y = stream.binding.subspan %yb[%c0] : !stream.binding -> memref<16xi32>
      %a = vector.load %A[%c0] : memref<64xi8>, vector<64xi8>
      %z = arith.constant dense<0> : vector<16xi32>
      %y = llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"(%z, %a, %a) : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
      vector.store %y, %Y[%c0] : memref<16xi32>, vector<16xi32>
      return
    }
  }
}
func.func @f(%a: tensor<64xi8>) -> tensor<16xi32> {
  %y = flow.dispatch @ex::@k(%a) : (tensor<64xi8>) -> tensor<16xi32>
  return %y : tensor<16xi32>
}
"""
_VNNI_TRIED: Dict[Tuple[str, ...], bool] = {}
_TARGET_PREFIXES = ("--iree-hal-", "--iree-llvmcpu-")  # the device and CPU flags (not the ONNX input type, not the tuning spec)
_TRIED: Set[Tuple[str, ...]] = set()


def check(flags: Sequence[str], extra_flags: Sequence[str]) -> None:
    """Compile a one-op module with the target flags of ``flags`` in the ``iree-compile`` tool when
    ``extra_flags`` set the CPU target; raise GqaTorchMlirError naming those flags if it fails."""
    from iree.compiler import CompilerToolError, compile_str

    chosen = [f for f in extra_flags if f.startswith(TARGET_FLAGS)]
    target = tuple(f for f in flags if f.startswith(_TARGET_PREFIXES))
    if not chosen or target in _TRIED:
        return
    try:
        compile_str(_ONE_OP, extra_args=list(target))
    except CompilerToolError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        said = [line for line in lines if "LLVM ERROR" in line or "not a recognized" in line or "error:" in line]
        raise GqaTorchMlirError(f"iree-cpu: IREE's compiler fails with {' '.join(chosen)} (tried on a one-op module in the "
                                f"iree-compile tool): " + " | ".join(dict.fromkeys(said or lines[-2:]))) from None
    _TRIED.add(target)


def takes_vnni(flags: Sequence[str], extra_flags: Sequence[str]) -> bool:
    """Whether the compile target takes ``vpdpbusd``: this host's where ``extra_flags`` choose no CPU
    (iree-cpu compiles for the host), else the target's (:func:`has_vnni`)."""
    if any(f.startswith(TARGET_FLAGS) for f in extra_flags):
        return has_vnni(flags)
    return host_has_avx512_vnni()


def has_vnni(flags: Sequence[str]) -> bool:
    """Whether the CPU target of ``flags`` takes AVX-512 VNNI's ``vpdpbusd`` (a one-dispatch module
    compiled in the ``iree-compile`` tool: LLVM cannot select it otherwise and aborts there)."""
    from iree.compiler import CompilerToolError, compile_str

    target = tuple(f for f in flags if f.startswith(_TARGET_PREFIXES))
    if target not in _VNNI_TRIED:
        try:
            compile_str(_VNNI, extra_args=list(target))
            _VNNI_TRIED[target] = True
        except CompilerToolError:
            _VNNI_TRIED[target] = False
    return _VNNI_TRIED[target]
