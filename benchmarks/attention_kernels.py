"""The decode step's two attention matmuls alone, as IREE compiles them, against
numpy reading the same bytes: how fast IREE's CPU code reads a KV cache that is
not in the caches, measured alternately in one process.

    .venv/bin/python benchmarks/attention_kernels.py [--rows 1024 4096] [--rounds 9] [--threads 1 2]

On another x86 host (iree-base-runtime only), compile here for its CPU, run there:

    .venv/bin/python benchmarks/attention_kernels.py --prepare DIR --target-cpu sapphirerapids
    PYTHONPATH=python python3 benchmarks/attention_kernels.py --from DIR/sapphirerapids

Kernels (one decode step's shapes: 8 KV heads, 4 query rows per KV head, head 128, fp32,
R key rows, R dynamic as the step reads it):

  q.k^T    [8,4,128] x [8,R,128]^T -> [8,4,R]: the step's Q.K^T, as IREE fuses
           our matmul with K's transpose (one contraction, K read row-major)
  p.v      [8,4,R] x [8,R,128] -> [8,4,128]: the step's P.V
  row sum  the sum of each K row [8,R,128] -> [8,R], compiled with
           --iree-llvmcpu-reassociate-fp-reductions: a kernel that only
           reads the same rows, IREE's own streaming reference

Each call reads another copy of the cache from a pool of 256 MiB (so every
read comes from memory, as in a generation loop over many layers); numpy's
time is np.add.reduce over the same arrays, split by KV head over as many
threads as the kernels get (1: IREE's local-sync device; more: local-task
with that many workers, one such count per process).  Printed per kernel: the median
time per call, the rate it reads K (or V) at, and its ratio to numpy's read
of the same bytes (1.0x: reads as fast as numpy; the matmuls' arithmetic is
2 x 4 flops per element read), after each kernel's largest difference from
numpy's result.  Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_step import cpu_model  # noqa: E402

HKV, G, DH = 8, 4, 128
POOL_BYTES = 256 * 2**20

_CONTRACTION = """
func.func @f(%a: {a}, %b: {b}) -> {out} {{
  %c1 = arith.constant 1 : index
  %r = tensor.dim %b, %c1 : {b}
  %z = arith.constant 0.0 : f32
  %e = tensor.empty({empty}) : {out}
  %f = linalg.fill ins(%z : f32) outs(%e : {out}) -> {out}
  %s = linalg.generic {{indexing_maps = [{maps}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}}
      ins(%a, %b : {a}, {b}) outs(%f : {out}) {{
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %n = arith.addf %acc, %m : f32
    linalg.yield %n : f32
  }} -> {out}
  return %s : {out}
}}
"""

_ROW_SUM = """
func.func @f(%k: tensor<8x?x128xf32>) -> tensor<8x?xf32> {
  %c1 = arith.constant 1 : index
  %r = tensor.dim %k, %c1 : tensor<8x?x128xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty(%r) : tensor<8x?xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x?xf32>) -> tensor<8x?xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(h, r, d) -> (h, r, d)>, affine_map<(h, r, d) -> (h, r)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%k : tensor<8x?x128xf32>) outs(%f : tensor<8x?xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %n = arith.addf %acc, %x : f32
    linalg.yield %n : f32
  } -> tensor<8x?xf32>
  return %s : tensor<8x?xf32>
}
"""

QK = _CONTRACTION.format(  # scores[h,g,r] = sum_d q[h,g,d] k[h,r,d]
    a="tensor<8x4x128xf32>", b="tensor<8x?x128xf32>", out="tensor<8x4x?xf32>", empty="%r",
    maps="affine_map<(h, g, r, d) -> (h, g, d)>, affine_map<(h, g, r, d) -> (h, r, d)>, affine_map<(h, g, r, d) -> (h, g, r)>")
PV = _CONTRACTION.format(  # out[h,g,d] = sum_r p[h,g,r] v[h,r,d]
    a="tensor<8x4x?xf32>", b="tensor<8x?x128xf32>", out="tensor<8x4x128xf32>", empty="",
    maps="affine_map<(h, g, d, r) -> (h, g, r)>, affine_map<(h, g, d, r) -> (h, r, d)>, affine_map<(h, g, d, r) -> (h, g, d)>")
KERNELS = {"q.k^T": (QK, ()), "p.v": (PV, ()), "row sum": (_ROW_SUM, ("--iree-llvmcpu-reassociate-fp-reductions=true",))}


def file_name(kernel: str) -> str:
    return kernel.replace(".", "").replace("^", "").replace(" ", "_") + ".vmfb"


@functools.lru_cache(maxsize=None)
def compile_kernel(kernel: str, cpu: str) -> bytes:
    from iree.compiler.tools import compile_str

    source, flags = KERNELS[kernel]
    return compile_str(source, target_backends=["llvm-cpu"], extra_args=[f"--iree-llvmcpu-target-cpu={cpu}", *flags])


def prepare(directory: str, cpus: List[str]) -> None:
    for cpu in cpus:
        os.makedirs(os.path.join(directory, cpu), exist_ok=True)
        for kernel in KERNELS:
            with open(os.path.join(directory, cpu, file_name(kernel)), "wb") as f:
                f.write(compile_kernel(kernel, cpu))
        print(f"compiled for {cpu}", flush=True)


def numpy_read(caches: List[np.ndarray], threads: int) -> Callable[[int], None]:
    """read(i): np.add.reduce over the i-th copy, its KV heads split over ``threads`` threads."""
    if threads == 1:
        return lambda i: np.add.reduce(caches[i % len(caches)], axis=None)
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(threads)  # lives as long as the process
    parts = [np.array_split(c, threads, axis=0) for c in caches]
    return lambda i: list(pool.map(lambda p: np.add.reduce(p, axis=None), parts[i % len(parts)]))


def runners(rows: int, source, threads: int) -> Tuple[int, Dict[str, Callable[[int], None]]]:
    """(the pool's copies, kernel name -> run(i): one call on the i-th copy; numpy's read of it too)."""
    from gqa_torch_mlir.backends.iree.runtime import IreeCompiledModule

    rng = np.random.default_rng(0)
    copies = max(2, POOL_BYTES // (HKV * rows * DH * 4))
    caches = [rng.standard_normal((HKV, rows, DH), dtype=np.float32) for _ in range(copies)]
    small = {"q.k^T": rng.standard_normal((HKV, G, DH), dtype=np.float32),
             "p.v": rng.random((HKV, G, rows), dtype=np.float32)}
    expected = {"q.k^T": np.einsum("hgd,hrd->hgr", small["q.k^T"], caches[0]),
                "p.v": np.einsum("hgr,hrd->hgd", small["p.v"], caches[0]), "row sum": caches[0].sum(axis=2)}
    out: Dict[str, Callable[[int], None]] = {"numpy read": numpy_read(caches, threads)}
    on_device = None  # the caches' device copies, made once: the modules share the process's device
    for kernel in KERNELS:
        vmfb = open(os.path.join(source, file_name(kernel)), "rb").read() if source else compile_kernel(kernel, "host")
        module = IreeCompiledModule(vmfb, "f", [np.float32], threads=threads)
        on_device = on_device or [module.to_device(c) for c in caches]
        args = [module.to_device(small[kernel])] if kernel in small else []
        out[kernel] = lambda i, m=module, d=on_device, a=args: m.invoke_device("f", *a, d[i % len(d)])
        diff = np.abs(out[kernel](0)[0].numpy() - expected[kernel]).max()
        print(f"  {kernel}: max|diff| {diff:.1e} against numpy (R={rows})")
    return copies, out


def measure(rows: int, rounds: int, source, threads: int) -> None:
    copies, run = runners(rows, source, threads)
    times: Dict[str, List[float]] = {name: [] for name in run}
    for r in range(rounds):
        order = list(run) if r % 2 == 0 else list(reversed(run))
        for name in order:
            t = time.perf_counter()
            for i in range(copies):
                run[name](i)
            times[name].append((time.perf_counter() - t) / copies)
    nbytes = HKV * rows * DH * 4
    numpy_s = statistics.median(times["numpy read"])
    print(f"\nR={rows} rows ({nbytes / 2**20:.0f} MiB of K or V a call, a pool of {copies} copies), {threads} thread(s):")
    for name, ts in times.items():
        s = statistics.median(ts)
        print(f"  {name:12s} {s * 1e3:8.3f} ms  {nbytes / s / 1e9:6.1f} GB/s  {s / numpy_s:5.2f}x numpy's read")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[1024, 4096])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, nargs="*", default=[1], help="1, and at most one other count")
    parser.add_argument("--prepare", metavar="DIR", help="only compile the kernels into DIR/CPU/ for each --target-cpu")
    parser.add_argument("--target-cpu", nargs="*", default=["host"], help="LLVM CPU names for --prepare")
    parser.add_argument("--from", dest="source", metavar="DIR", help="run the kernels --prepare compiled into DIR")
    args = parser.parse_args()
    if args.prepare:
        return prepare(args.prepare, args.target_cpu)
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs")
    if len([t for t in args.threads if t != 1]) > 1 or min(args.threads) < 1:
        parser.error("--threads: 1 and at most one other count (IREE's local-task worker count is one per process)")
    for threads in args.threads:
        for rows in args.rows:
            measure(rows, args.rounds, args.source, threads)


if __name__ == "__main__":
    main()
