"""CPU target flags given in ``extra_flags``, tried in a child process before the compile they would end.

An LLVM CPU name LLVM does not know (``--iree-llvmcpu-target-cpu=bogus``) ends
IREE's compile with ``LLVM ERROR`` and ``exit(1)``: inside this process, with
stderr captured for IREE's diagnostics, the Python process ended with no
message.  A backend whose ``extra_flags`` set the CPU target first compiles a
one-op module with its target flags through the ``iree-compile`` tool (a child
process: iree.compiler's ``compile_str``); if that fails, the compile is refused
with the tool's last lines.  Each set of flags is tried once a process; flags
without a CPU target setting are not tried.
"""

from __future__ import annotations

from typing import Sequence, Set, Tuple

from ...errors import GqaTorchMlirError

TARGET_FLAGS = ("--iree-llvmcpu-target-cpu=", "--iree-llvmcpu-target-cpu-features=", "--iree-llvmcpu-target-triple=")
_ONE_OP = """
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, %a : tensor<4xf32>
  return %b : tensor<4xf32>
}
"""
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
