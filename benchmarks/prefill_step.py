"""One GroupQueryAttention prefill (B=1, S tokens, no past, H=32, Hkv=8, Dh=128, fp32): ours on
iree-cpu against onnxruntime's kernel, measured alternately in one process.

    .venv/bin/python benchmarks/prefill_step.py [--seq 256 1024] [--threads 1 2] [--repeats 10]

On a host without the compiler, as decode_step.py: ``--prepare DIR --target-cpu NAME...`` here,
``--from DIR/NAME`` there.

``--dynamic`` adds two rows: the same step from a model whose lengths are dynamic (as the
builder's and exporters' models declare them), lowered as by default, its query blocks in a
loop ("ours dyn. loop"), and with the pass option prefill_loop=off, the query rows attended
whole ("ours dyn. whole"); give it to ``--prepare`` and ``--from`` alike.

Prints median milliseconds, the ratio to onnxruntime (lower is faster;
<= 1.0 beats it), the largest output difference, and the CPU it ran on.
benchmarks/dispatch_profile.py --case prefill256 shows where the time goes.
Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Dict

import numpy as np
import onnx

from decode_step import add_host_options, compile_for_cpus, cpu_model, ort_session, parse_host_options, spin_workers
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

HEADS = dict(batch=1, past=0, num_heads=32, kv_num_heads=8, head_size=128)


DYNAMIC_ROWS = {"ours dyn. loop": "on", "ours dyn. whole": "off"}  # row: prefill_loop


def vmfb_name(seq: int, row: str = "ours") -> str:
    return f"prefill-s{seq}.vmfb" if row == "ours" else f"prefill-s{seq}-{row.split()[-1]}.vmfb"


def compiled(models: Dict[str, onnx.ModelProto], seq: int, threads: int, source, row: str = "ours"):
    """The session of ``row``: compiled here, or read from a ``--prepare``d directory."""
    model = models[vmfb_name(seq, row)]
    if source:
        vmfb = open(os.path.join(source, vmfb_name(seq, row)), "rb").read()
        return InferenceSession.from_vmfb(model, vmfb, "iree-cpu", threads=threads)
    return InferenceSession(model, backend="iree-cpu", threads=threads, prefill_loop=DYNAMIC_ROWS.get(row))


def step_models(seqs, dynamic: bool) -> Dict[str, onnx.ModelProto]:
    """File name: model, for each row run (compiled here or by --prepare)."""
    models = {vmfb_name(seq): make_model(GQAConfig(seq=seq, **HEADS)) for seq in seqs}
    for seq in seqs if dynamic else ():
        for row in DYNAMIC_ROWS:
            models[vmfb_name(seq, row)] = make_model(GQAConfig(seq=seq, dynamic=True, **HEADS))
    return models


def runners(seq: int, threads: int, source=None, dynamic: bool = False):
    """``source``: a ``--prepare``d directory of compiled steps; ``dynamic``: the --dynamic rows."""
    models = step_models([seq], dynamic)
    feeds = make_inputs(GQAConfig(seq=seq, **HEADS))
    theirs = ort_session(models[vmfb_name(seq)], threads)
    run = {"onnxruntime": lambda: theirs.run(None, feeds)[0]}
    for row in ["ours"] + (list(DYNAMIC_ROWS) if dynamic else []):
        session = compiled(models, seq, threads, source, row)
        run[row] = lambda session=session: session.run(None, feeds)[0]
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="*", default=[256, 1024])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--dynamic", action="store_true", help="also the step with dynamic lengths (see above)")
    add_host_options(parser)
    args = parse_host_options(parser)
    if args.prepare:
        loop = {vmfb_name(seq, row): on for seq in args.seq for row, on in DYNAMIC_ROWS.items()}
        return compile_for_cpus(args.prepare, step_models(args.seq, args.dynamic), args.target_cpu, loop)
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}")
    spin_workers(args.worker_spin_us)
    for threads in args.threads:
        for seq in args.seq:
            run = runners(seq, threads, args.source, args.dynamic)
            outputs = {k: np.asarray(r()) for k, r in run.items()}
            times = {k: [] for k in run}
            for _ in range(args.repeats):  # alternate so load changes hit every runner alike
                for key, r in run.items():
                    t = time.perf_counter()
                    r()
                    times[key].append(time.perf_counter() - t)
            base = statistics.median(times["onnxruntime"])
            diffs = {k: float(np.max(np.abs(o - outputs["onnxruntime"]))) for k, o in outputs.items()}
            print(f"\nprefill S={seq}, {threads} thread(s), median of {args.repeats}")
            for key, ts in times.items():
                med = statistics.median(ts)
                print(f"  {key:14s} {1e3 * med:9.2f} ms  {med / base:5.2f}x onnxruntime" + (f"  max|diff| {diffs[key]:.1e}" if key != "onnxruntime" else ""))


if __name__ == "__main__":
    main()
