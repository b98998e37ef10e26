"""The iree-cpu tuning spec: IREE's CPU tile sizes for a decode step's Q.K^T, set by a transform
library (``--iree-codegen-tuning-spec-path``, IREE's mechanism for choosing a dispatch's lowering
config in place of its heuristics).  Since the fused form (iree-cpu's default) runs a decode
step's and a static short chunk's attention in a kernel of its own (kernels/decode_attention.py),
the spec tiles the decomposed form's (``attention=decomposed``, and a step the kernel does not
take: an attention_bias, qk_output, a quantized cache) and a short chunk's of a run-time S (up
to MAX_ROWS grouped rows).

A decode step's Q.K^T is a ``linalg.batch_matmul`` with K transposed: per KV head,
[M, Dh] x [R, Dh]^T -> [M, R], M = G query rows (S = 1), R the cache rows read.  IREE 3.13
tiles it as a matmul, 16 rows of K by 16 of Dh, each tile transposed in registers, and read
the cache at a quarter of numpy's rate on an AMD EPYC (Zen 4) guest (benchmarks/README.md,
"CPU, round 10").  Tiled as one K row against one query row, the whole head size reduced
in one vector pass (with ``--iree-llvmcpu-reassociate-fp-reductions``, which the pass needs:
without it each row's sum is taken in order, 12x slower), K is read row after row at
1.3x-1.5x numpy's time ("CPU, round 12").  Every other dispatch keeps IREE's choice; so does
a Q.K^T of more than MAX_ROWS query rows (a prefill's blocks), of a head size not in
HEAD_SIZES, of a batch of several rows (IREE transposes K in a dispatch of its own there) or
of an f16 cache (its conversion fused into the matmul).

An integer sum of each row of a [?, ?] tensor (onnxruntime-genai's builder computes seqlens_k
as ReduceSum(attention_mask, 1) - 1, before the batch size is known) is tiled one row a vector
pass.  IREE tiles it 8 rows a pass, and with a batch of one the seven rows it does not have
become masked-off vector loads past the mask's end.  Where that memory is not mapped each is a
fault-suppression assist: under iree-benchmark-module that one dispatch took 100-130 us of a
0.47 ms decode step at past 1023 on the AMD guest, under 1 us tiled by the row.  (An
``InferenceSession`` uploads the mask into IREE's caching allocator, whose memory past it is
mapped: there the step was no faster, benchmarks/README.md, "CPU, round 24".)

The reassociation flag is IREE's for the whole module (a ``fastmath<reassoc>`` on the
reduction itself does not reach its vector code in IREE 3.13): with the spec, every
floating-point reduction is reassociated, so the skip norm no longer rounds as onnxruntime's
(up to 14 ulp; docs/limits.md, test_norm_rounds_as_onnxruntime).

IREE keeps the spec path (and the reassociation flag) from one compile to the next in a
process, so every target sets both: iree-cuda to none (targets.py).  IREE 3.13 can deadlock
loading a spec on a compile's worker threads (the thread that parses it under a lock, while
verifying it in parallel, takes on another executable's configuration, which waits for the
same lock), so a compile with the spec runs on one thread (uses_spec): about 25% longer.
``GQA_IREE_CPU_TUNING=0`` compiles iree-cpu without the spec, multithreaded (the fast test
tier sets it; test_backends_iree_tuning.py compiles with it).
"""

from __future__ import annotations

import hashlib
import os
import tempfile

from ...errors import GqaTorchMlirError

MAX_ROWS = 16  # query rows (M) up to which a Q.K^T is a decode step's: G (S = 1), or G*S for a short chunk
HEAD_SIZES = tuple(range(16, 257, 16))  # Dh of the matchers (GroupQueryAttention's are multiples of 16 with rotary)
# The distribution tile over R: 512 K rows (256 KiB at head 128) a workgroup.  On an AMD Zen 4 guest
# with 2 threads the Q.K^T of a past-4095 step took 590 us at 512 against 990 at 32 (the workers
# idle a fifth of the dispatch between a thousand 1.4-us workgroups), alike on 1 thread; fewer
# than 8 x R/512 workgroups leave a short cache's step few to share (benchmarks/README.md, "CPU, round 13").
KEY_ROWS_PER_WORKGROUP = 512

REASSOCIATE = "--iree-llvmcpu-reassociate-fp-reductions"
SPEC_PATH = "--iree-codegen-tuning-spec-path"
ENABLED_VARIABLE = "GQA_IREE_CPU_TUNING"  # "0": iree-cpu without the spec; "1" or unset: with it


def enabled() -> bool:
    """Whether iree-cpu compiles with the spec (ENABLED_VARIABLE)."""
    value = os.environ.get(ENABLED_VARIABLE, "1")
    if value not in ("0", "1"):
        raise GqaTorchMlirError(f"{ENABLED_VARIABLE}={value!r} is not supported; supported: 0 (no tuning spec) or 1")
    return value == "1"


def uses_spec(flags) -> bool:
    """Whether iree-compile ``flags`` name a spec (the last SPEC_PATH flag wins)."""
    paths = [f.split("=", 1)[1] for f in flags if f.startswith(SPEC_PATH + "=")]
    return bool(paths and paths[-1])


def reduction_tile(head_size: int) -> int:
    """The head-size elements reduced per vector pass: all of them up to 128, else the largest of
    128, 64, 32, 16 dividing the head size."""
    return head_size if head_size <= 128 else next(t for t in (128, 64, 32, 16) if head_size % t == 0)


def _matcher(head_size: int) -> str:
    """A named sequence matching a decode Q.K^T of ``head_size`` and yielding its compilation_info."""
    lhs, rhs, out = f"tensor<?x?x{head_size}xf32>", f"tensor<?x?x{head_size}xf32>", "tensor<?x?x?xf32>"
    maps = ("affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, "
            "affine_map<(b, m, n, k) -> (b, m, n)>")
    config = (f"#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
              f"distribution = [1, {MAX_ROWS}, {KEY_ROWS_PER_WORKGROUP}, 0], vector_common_parallel = [1, 1, 1, 0], "
              f"vector_reduction = [0, 0, 0, {reduction_tile(head_size)}]>, "
              f"translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>")
    return f"""
  transform.named_sequence @match_decode_qk_d{head_size}(%root: !transform.any_op {{transform.readonly}}) -> (!transform.any_op, !transform.any_param) {{
    %ins, %outs = transform.iree.match.cast_compatible_dag_from_root %root {{
    ^bb0(%q: {lhs}, %k: {rhs}, %acc: {out}):
      %qk = linalg.batch_matmul indexing_maps = [{maps}] ins(%q, %k : {lhs}, {rhs}) outs(%acc : {out}) -> {out}
    }} : (!transform.any_op) -> (!transform.any_value, !transform.any_value)
    transform.match.structured failures(propagate) %root : !transform.any_op {{
    ^bb0(%op: !transform.any_op):
      %rows = transform.match.structured.dim %op[1] : (!transform.any_op) -> !transform.param<i64>
      %most = transform.param.constant {MAX_ROWS} : i64 -> !transform.param<i64>
      transform.match.param.cmpi le %rows, %most : !transform.param<i64>
      transform.match.structured.yield
    }}
    %config = transform.param.constant {config} -> !transform.any_param
    transform.yield %root, %config : !transform.any_op, !transform.any_param
  }}"""


ROW_SUM_TYPES = ("i64", "i32")


def _row_sum_matcher(element: str) -> str:
    """A named sequence matching an integer sum of each row of a [?, ?] tensor (the builder's
    attention-mask ReduceSum) and yielding its compilation_info: one row per vector pass."""
    config = ("#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
              "distribution = [32, 0], vector_common_parallel = [1, 0], vector_reduction = [0, 16]>, "
              "translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>")
    rows, sums = f"tensor<?x?x{element}>", f"tensor<?x{element}>"
    return f"""
  transform.named_sequence @match_row_sum_{element}(%root: !transform.any_op {{transform.readonly}}) -> (!transform.any_op, !transform.any_param) {{
    %ins, %outs = transform.iree.match.cast_compatible_dag_from_root %root {{
    ^bb0(%rows: {rows}, %acc: {sums}):
      %sum = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                             iterator_types = ["parallel", "reduction"]}} ins(%rows : {rows}) outs(%acc : {sums}) {{
      ^bb1(%in: {element}, %out: {element}):
        %add = arith.addi %in, %out : {element}
        linalg.yield %add : {element}
      }} -> {sums}
    }} : (!transform.any_op) -> (!transform.any_value, !transform.any_value)
    %config = transform.param.constant {config} -> !transform.any_param
    transform.yield %root, %config : !transform.any_op, !transform.any_param
  }}"""


def spec_text() -> str:
    """The transform library: one matcher per head size, each annotating what it matches."""
    calls = ",\n        ".join([f"@match_decode_qk_d{d} -> @apply_config" for d in HEAD_SIZES] +
                                  [f"@match_row_sum_{t} -> @apply_config" for t in ROW_SUM_TYPES])
    return f"""// gqa-torch-mlir's iree-cpu tuning spec (backends/iree/tuning.py renders it).
module attributes {{iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence}} {{
  transform.named_sequence @apply_config(%op: !transform.any_op {{transform.readonly}}, %config: !transform.any_param {{transform.readonly}}) {{
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }}{"".join(_matcher(d) for d in HEAD_SIZES)}{"".join(_row_sum_matcher(t) for t in ROW_SUM_TYPES)}
  transform.named_sequence @__kernel_config(%variant: !transform.any_op {{transform.consumed}}) -> !transform.any_op attributes {{iree_codegen.tuning_spec_entrypoint}} {{
    %res = transform.foreach_match in %variant
        {calls} : (!transform.any_op) -> !transform.any_op
    transform.yield %res : !transform.any_op
  }}
}}
"""


def spec_path() -> str:
    """The spec written once to the temporary directory, named by its content, so that a new
    process finds it there and a changed spec gets a new name.  A file of that name with other
    content (another user's, say) is not read: ours is written under a name of its own."""
    text = spec_text()
    path = os.path.join(tempfile.gettempdir(), f"gqa-torch-mlir-cpu-tuning-{hashlib.sha256(text.encode()).hexdigest()[:16]}.mlir")
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), prefix="gqa-torch-mlir-cpu-tuning-", suffix=".mlir")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        os.replace(partial, path)  # atomic: processes compiling at once read the whole file or none
    except OSError:  # the name is another user's (a sticky temporary directory)
        return partial
    return path


def cpu_flags() -> tuple:
    """iree-compile flags that apply the spec."""
    return (f"{REASSOCIATE}=true", f"{SPEC_PATH}={spec_path()}")


UNTUNED_FLAGS = (f"{REASSOCIATE}=false", f"{SPEC_PATH}=")
"""Flags of a target without the spec (iree-cuda): they undo an earlier iree-cpu compile's."""
