"""Options of the ``convert-onnx-gqa-to-torch`` pass, as lowerings see them.

On the command line they are the pass's options,
``--convert-onnx-gqa-to-torch=attention=decomposed`` or
``convert-onnx-gqa-to-torch{attention=decomposed}`` in a pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import GqaTorchMlirError

ATTENTION_FORMS = ("decomposed", "sdpa", "fused")
DEVICES = ("cpu", "gpu")
SWITCH = ("off", "on")
MATMUL_NBITS_FORMS = ("dequantize", "kernel", "vnni")


@dataclass(frozen=True)
class LoweringOptions:
    # How GroupQueryAttention's attention is written:
    #   decomposed  grouped-query math: queries regrouped by KV head, scores,
    #               mask, softmax, P.V (K/V never repeated to num_heads)
    #   sdpa        aten.scaled_dot_product_attention with enable_gqa where it
    #               can express the op (torch-mlir's lowering repeats K/V)
    #   fused       decomposed, with the attention of a decode step or a short chunk
    #               (up to 16 grouped query rows, f32, none of bias, output_qk,
    #               quantized caches) as one hand-scheduled IREE CPU dispatch
    #               (kernels/decode_attention.py); inside IREE's compiler only
    attention: str = "decomposed"
    # What the code is shaped for:
    #   cpu  the new cache rows scattered; a fixed-capacity buffer read on its
    #        rows [0, max(seqlens_k) + 1) only (a length read back mid-step,
    #        or read by the fused kernel on the device where sizes are declared)
    #   gpu  the cache written by a select over its rows (IREE's GPU scatter
    #        runs on one thread); every row read, masked: no host readback
    device: str = "cpu"
    # A causal prefill (GroupQueryAttention, Attention) whose query length is known only
    # at run time (the exporters' dynamic axes), attended in blocks of 64 query rows in a
    # loop when it has 128 rows or more (on), or whole (off).  On by default since a
    # decode step no longer passes its branch (it takes the one-row branch first:
    # benchmarks/README.md, "CPU, round 7"); off saves compile time (a third more per node).
    prefill_loop: str = "on"
    # How MatMulNBits multiplies by a 4-bit weight in blocks of 32, 64, ... values:
    #   dequantize  the weight dequantized to f32, then a matmul
    #   kernel      one hand-scheduled IREE CPU dispatch that reads the packed bytes
    #               (kernels/nbits_matmul.py); inside IREE's compiler and on the cpu device only
    #   vnni        kernel, with accuracy_level 4's int8 products (A quantized per block, as
    #               onnxruntime's int8 path) by AVX-512 VNNI instructions
    #               (kernels/nbits_matmul_vnni.py).  iree-cpu's default where this host has
    #               avx512vnni; an IreeBackend whose compile target (this host, or the CPU
    #               its extra_flags choose) lacks it compiles kernel instead.  Through the
    #               pass alone the compile target must have it (LLVM cannot select vpdpbusd
    #               otherwise)
    matmul_nbits: str = "dequantize"

    def __post_init__(self):
        if self.attention not in ATTENTION_FORMS:
            raise GqaTorchMlirError(f"option attention={self.attention!r} is not one of {', '.join(ATTENTION_FORMS)}")
        if self.device not in DEVICES:
            raise GqaTorchMlirError(f"option device={self.device!r} is not one of {', '.join(DEVICES)}")
        if self.prefill_loop not in SWITCH:
            raise GqaTorchMlirError(f"option prefill_loop={self.prefill_loop!r} is not one of {', '.join(SWITCH)}")
        if self.matmul_nbits not in MATMUL_NBITS_FORMS:
            raise GqaTorchMlirError(f"option matmul_nbits={self.matmul_nbits!r} is not one of {', '.join(MATMUL_NBITS_FORMS)}")
        if self.matmul_nbits != "dequantize" and self.device != "cpu":
            raise GqaTorchMlirError(f"option matmul_nbits={self.matmul_nbits} is a CPU kernel; it needs device=cpu")

    @staticmethod
    def for_backend(backend: str, attention: "str | None" = None, prefill_loop: "str | None" = None) -> "LoweringOptions":
        """The form each backend runs fastest (BACKEND_DEFAULTS), with ``attention`` and ``prefill_loop`` if given.
        iree-cpu compiles for this host: ``matmul_nbits=vnni`` where it has AVX-512 VNNI."""
        default = BACKEND_DEFAULTS[backend]
        nbits = "vnni" if default.matmul_nbits == "kernel" and host_has_avx512_vnni() else default.matmul_nbits
        return LoweringOptions(attention=attention or default.attention, device=default.device,
                               prefill_loop=prefill_loop or default.prefill_loop, matmul_nbits=nbits)

    def text(self) -> str:
        """The pass's option string (``attention=sdpa device=gpu``), as ``parse`` reads it."""
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))

    @staticmethod
    def parse(text: str) -> "LoweringOptions":
        """``"attention=sdpa"`` (space-separated key=value pairs, as MLIR pass options)."""
        known = {f.name for f in fields(LoweringOptions)}
        values = {}
        for item in text.split():
            key, eq, value = item.partition("=")
            if not eq or key not in known:
                raise GqaTorchMlirError(f"unknown pass option '{item}'; options: {', '.join(sorted(known))} (e.g. attention=decomposed)")
            values[key] = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value  # MLIR allows quotes
        return LoweringOptions(**values)


#: Per backend, the form measured fastest there (docs/design.md, "Attention forms and performance";
#: on a GPU: benchmarks/README.md, "GPU").
BACKEND_DEFAULTS = {
    "refbackend": LoweringOptions(),
    "iree-cpu": LoweringOptions(attention="fused", matmul_nbits="kernel"),
    "iree-cuda": LoweringOptions(attention="sdpa", device="gpu"),
}


def host_has_avx512_vnni() -> bool:
    """Whether this host's CPU has AVX-512 VNNI (``avx512_vnni`` among /proc/cpuinfo's flags; False
    where there is no such file)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "avx512_vnni" in line.split() for line in f)
    except OSError:
        return False
