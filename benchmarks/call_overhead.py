"""A decode step's fixed cost: a shared step over a past of 15 rows, where the attention is nothing.

    .venv/bin/python benchmarks/call_overhead.py [--threads 1 2] [--repeats 200] [--past 15]

On another x86 host (iree-base-runtime only), compile here for its CPU, run there:

    .venv/bin/python benchmarks/call_overhead.py --prepare DIR --target-cpu sapphirerapids
    PYTHONPATH=python python3 benchmarks/call_overhead.py --from DIR/sapphirerapids

Times, alternately in one process, onnxruntime's step (IO binding, as
decode_step.py's shared mode), ours with IO binding (``run_with_iobinding``:
backends/iree/bound_call.py), ours through ``InferenceSession.run`` on its
lean path (backends/iree/fast_call.py), ours on the general path (the lean
one switched off), and our VM call alone (its arguments packed once: the
dispatches and IREE's runtime, no Python of ours).  Warm: the calls back to
back; cold: a 64 MiB read before each call, which leaves the interpreter's
and the runtime's data out of the caches, as a model's other layers do.
Prints medians and ratios to onnxruntime's.  Not a test: numbers depend on
the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, Dict, Optional

import numpy as np

from decode_step import add_host_options, bound_run, compile_for_cpus, configs, cpu_model, ort_shared, parse_host_options, vmfb_name
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import make_inputs, make_model


def shared_step(model, feeds, threads: int, vmfb: Optional[bytes]):
    """(session, the step's feeds): the shared mode of decode_step.py, the caches fed back."""
    if vmfb is None:
        sess = InferenceSession(model, backend="iree-cpu", threads=threads, share_buffers=True)
    else:
        sess = InferenceSession.from_vmfb(model, vmfb, "iree-cpu", threads=threads, share_buffers=True)
    _, key, value = sess.run(None, feeds)
    step = dict(feeds, past_key=key, past_value=value)
    sess.run(None, step)  # the lean path's plan is learnt on the general path's first call
    return sess, step


def general_path(sess) -> None:
    """Switch ``sess`` to the general path (no quick feed check, no lean call)."""
    sess._plain._specs = None
    sess._compiled._fast = None


def vm_call(sess, step) -> Callable[[], None]:
    """The session's VM call alone, its arguments packed once by the lean path."""
    from iree import runtime as ireert

    compiled, fast = sess._compiled, sess._compiled._fast
    arg_list, _, _, _ = fast._arguments(sess._function, [step[a.name] for a in sess.get_inputs()])
    plan = fast._plan(sess._function)
    return lambda: compiled._context.invoke(plan.vm_function, arg_list, ireert.VmVariantList(plan.results))


def measure(calls: Dict[str, Callable[[], object]], repeats: int, cold: bool) -> Dict[str, float]:
    junk = np.ones(16 << 20, np.float32)  # 64 MiB
    times = {k: [] for k in calls}
    for _ in range(repeats):
        for k, call in calls.items():
            if cold:
                junk.sum()
            t = time.perf_counter()
            call()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--past", type=int, default=15)
    add_host_options(parser)
    args = parse_host_options(parser)
    cfg = configs(args.past)["shared"]
    model, feeds = make_model(cfg), make_inputs(cfg)
    name = vmfb_name("shared", args.past)
    if args.prepare:
        compile_for_cpus(args.prepare, {name: model}, args.target_cpu)
        return
    vmfb = open(os.path.join(args.source, name), "rb").read() if args.source else None
    print(f"machine: {cpu_model()}")
    for threads in args.threads:
        (lean, lean_step), (general, general_step) = (shared_step(model, feeds, threads, vmfb) for _ in range(2))
        general_path(general)
        calls = {"onnxruntime": ort_shared(model, feeds, threads).run,
                 "ours, IO binding": bound_run(lean, lean_step),
                 "ours, lean path": lambda: lean.run(None, lean_step),
                 "ours, general path": lambda: general.run(None, general_step),
                 "ours, VM call alone": vm_call(lean, lean_step)}
        for cold in (False, True):
            medians = measure(calls, args.repeats, cold)
            print(f"\npast={args.past}, {threads} thread(s), {'cold (64 MiB read before each call)' if cold else 'warm'}:")
            for k, t in medians.items():
                print(f"  {k:22s} {t * 1e6:8.1f} us   {t / medians['onnxruntime']:5.2f}x onnxruntime")


if __name__ == "__main__":
    main()
