"""Where one GroupQueryAttention step's time goes on iree-cpu, dispatch by dispatch.

    .venv/bin/python benchmarks/dispatch_profile.py [--case shared4095 growing1023 prefill256 ...] [--threads 1 2]
    python3 dispatch_profile.py --from DIR/CPU --case shared1023   # the steps decode_step.py --prepare compiled
    .venv/bin/python benchmarks/dispatch_profile.py --decoder DIR [--threads 1]   # a builder decoder's decode step
    .venv/bin/python benchmarks/dispatch_profile.py --decoder DIR --prompt 128     # ... or its prompt of 128 tokens

Compiles the step as ``InferenceSession(backend="iree-cpu")`` does, runs it
under ``iree-benchmark-module`` with IREE's caching allocator (as
``InferenceSession`` runs: without it a growing step's fresh present is new
memory every call, and its copy of the past took 3x as long in page faults) and HAL profiling
(``--device_profiling_mode=host-execution``: every dispatch's start and end,
and its workgroups' summed run time) and prints, per dispatch of a step:

  wall      its median-free mean duration (start of its first workgroup to end of its last)
  share     of the summed dispatch walls
  wgs       workgroups (IREE's unit of work: local-task spreads them over its workers)
  cpu       the workgroups' summed run time; cpu / (wall x threads) is how busy the workers were

and the step's wall time as iree-benchmark-module measures it without
profiling, beside the summed dispatch walls (the rest is the runtime's:
submissions, waits, the mid-step length read back). Cases: ``growingP`` and
``sharedP`` (decode, B=1, S=1, past P, as benchmarks/decode_step.py) and
``prefillS`` (S tokens, no past); a ``dyn`` suffix (``shared1023dyn``) compiles the model
with every length dynamic and seqlens_k and total_sequence_length computed from an attention
mask, as onnxruntime-genai's builder declares and computes them (decode_step.py's ``dyn.``
modes).  ``--decoder DIR`` (a builder decoder, make_decoder.py) profiles its decode step after a
prompt of model_step.py's length instead, compiled with ``specialize`` for it as model_step.py's
"specialized" run; with ``--prompt N``, its first call on a prompt of N tokens (the general
function, model_step.py's ``--prompt``).  Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

import numpy as np

from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

HEADS = dict(batch=1, num_heads=32, kv_num_heads=8, head_size=128)


def _tools() -> str:
    """IREE's tools: beside this Python (a venv's scripts), else in the runtime package (a wheel
    installed with --target, as on a host without the compiler)."""
    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "iree-benchmark-module")):
        return here
    import iree.runtime

    return os.path.join(os.path.dirname(iree.runtime.__file__), "..", "_runtime_libs")


TOOLS = _tools()


def config(case: str) -> GQAConfig:
    kind, n, dyn = re.fullmatch(r"(growing|shared|prefill)(\d+)(dyn)?", case).groups()
    n, dynamic = int(n), dyn is not None
    if kind == "growing":
        return GQAConfig(seq=1, past=n, dynamic=dynamic, mask=dynamic, **HEADS)
    if kind == "shared":
        return GQAConfig(seq=1, past=n + 1, past_lens=(n,), fixed_capacity=True, dynamic=dynamic, mask=dynamic, **HEADS)
    return GQAConfig(seq=n, past=0, dynamic=dynamic, mask=dynamic, **HEADS)


def write_step(case: str, threads: int, tmp: str, source: Optional[str] = None) -> Tuple[str, str, List[str]]:
    """The compiled step (vmfb), its function and ``--input=@file.npy`` flags; ``source``: a
    directory of steps ``decode_step.py --prepare`` compiled (decode cases, no compiler needed)."""
    cfg = config(case)
    model, feeds = make_model(cfg), make_inputs(cfg)
    if source:
        vmfb, function = prepared_step(case, source)
    else:
        from gqa_torch_mlir.backends.iree import IreeCpuBackend

        compiled = IreeCpuBackend(threads=threads).compile(model)
        vmfb, function = os.path.join(tmp, f"{case}.vmfb"), compiled.function
        with open(vmfb, "wb") as f:
            f.write(compiled.vmfb)
    inputs = []
    for i in model.graph.input:
        if feeds.get(i.name) is not None:
            path = os.path.join(tmp, f"{case}_{i.name}.npy")
            np.save(path, feeds[i.name])
            inputs.append(f"--input=@{path}")
    return vmfb, function, inputs


def write_decoder_step(directory: str, threads: int, tmp: str, prompt: int = 0) -> Tuple[str, str, List[str]]:
    """A builder decoder's decode step, specialized (model_step.py's feeds), or with ``prompt`` its
    first call on that many tokens (the general function): vmfb, function, inputs."""
    from pathlib import Path

    import onnx
    import onnxruntime as ort
    from gqa_torch_mlir.backends.iree import IreeCpuBackend
    from compile_time import zero_feeds
    from model_step import DECODE, step_feeds

    path = Path(directory) / "model.onnx"
    head_size = json.loads((Path(directory) / "genai_config.json").read_text())["model"]["decoder"]["head_size"]
    proto = onnx.load(str(path), load_external_data=False)
    if prompt:
        feeds = zero_feeds(proto, head_size, prompt)
    else:
        feeds = step_feeds(path, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), head_size)
    compiled = IreeCpuBackend(threads=threads).compile(str(path), [] if prompt else [DECODE])
    vmfb = os.path.join(tmp, "decoder.vmfb")
    with open(vmfb, "wb") as f:
        f.write(compiled.vmfb)
    inputs = []
    for i in proto.graph.input:  # in the function's argument order
        np.save(os.path.join(tmp, f"{i.name}.npy"), feeds[i.name])
        inputs.append(f"--input=@{os.path.join(tmp, i.name + '.npy')}")
    return vmfb, compiled.function if prompt else compiled.specialized[0], inputs


def prepared_step(case: str, source: str) -> Tuple[str, str]:
    """(the vmfb of ``case`` in ``source``, its function), as decode_step.py names them."""
    import iree.runtime as ireert
    from decode_step import vmfb_name

    kind, n, dyn = re.fullmatch(r"(growing|shared)(\d+)(dyn)?", case).groups()
    vmfb = os.path.join(source, vmfb_name(f"{kind} dyn." if dyn else kind, int(n)))
    module = ireert.VmModule.copy_buffer(ireert.VmInstance(), open(vmfb, "rb").read())
    return vmfb, next(f for f in module.function_names if "$" not in f and not f.startswith("__"))


def benchmark(vmfb: str, function: str, inputs: List[str], threads: int, extra: List[str]) -> str:
    device = ["--device=local-sync"] if threads == 1 else ["--device=local-task", f"--task_topology_group_count={threads}"]
    cmd = [os.path.join(TOOLS, "iree-benchmark-module"), f"--module={vmfb}", f"--function={function}", *inputs, *device,
           "--benchmark_min_time=1s", "--device_allocator=caching", *extra]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def step_ms(stdout: str) -> float:
    m = re.search(r"real_time\s+([\d.]+) (ms|us)", stdout)
    return float(m.group(1)) * (1e-3 if m.group(2) == "us" else 1.0)


def dispatches(profile: str) -> List[Dict]:
    out = subprocess.run([os.path.join(TOOLS, "iree-profile"), "dispatch", "--format=jsonl", profile],
                         check=True, capture_output=True, text=True).stdout
    return [d for d in map(json.loads, out.splitlines()) if d.get("type") == "host_dispatch_group"]


def report(case: str, threads: int, wall_ms: float, groups: List[Dict]) -> None:
    steps = min(g["count"] for g in groups)  # every dispatch runs at least once a step
    per_step = [(g, g["count"] / steps, g["avg_ns"] / 1e3, g["total_tile_duration_sum_ns"] / g["count"] / 1e3) for g in groups]
    total_us = sum(n * wall for _, n, wall, _ in per_step)
    print(f"\n{case}, {threads} thread(s): step {wall_ms:.3f} ms (iree-benchmark-module, no profiling); "
          f"dispatches {total_us / 1e3:.3f} ms summed over {sum(n for _, n, _, _ in per_step):.0f} a step")
    print(f"  {'dispatch':58s} {'x':>3s} {'wall us':>9s} {'share':>6s} {'wgs':>5s} {'cpu us':>9s} {'busy':>5s}")
    for g, n, wall, cpu in sorted(per_step, key=lambda r: -r[1] * r[2]):
        if n * wall < 0.005 * total_us:
            continue
        name = g["key"].split("_dispatch_", 1)[-1]
        busy = cpu / (wall * threads) if wall else 0.0
        print(f"  {name[:58]:58s} {n:3.0f} {wall:9.1f} {100 * n * wall / total_us:5.1f}% "
              f"{g['total_tile_count'] / g['count']:5.0f} {cpu:9.1f} {busy:5.2f}")
    small = [(n, wall) for _, n, wall, _ in per_step if n * wall < 0.005 * total_us]
    if small:
        print(f"  {len(small)} more dispatches, {sum(n * w for n, w in small):.1f} us together")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="*", default=["shared4095", "growing1023", "prefill256"])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--decoder", metavar="DIR", help="a builder decoder's decode step instead (make_decoder.py)")
    parser.add_argument("--prompt", type=int, default=0, help="with --decoder: its first call on a prompt of this many tokens")
    parser.add_argument("--from", dest="source", metavar="DIR",
                        help="profile the decode steps decode_step.py --prepare compiled into DIR (a host without the compiler)")
    args = parser.parse_args()
    if args.source and any(case.startswith("prefill") for case in args.case):
        parser.error("--from takes decode cases only (decode_step.py --prepare compiles no prefill)")
    with tempfile.TemporaryDirectory() as tmp:
        if args.decoder:
            for threads in args.threads:
                vmfb, function, inputs = write_decoder_step(args.decoder, threads, tmp, args.prompt)
                name = os.path.basename(args.decoder.rstrip("/")) + (f", prompt of {args.prompt}" if args.prompt else "")
                profile_step(name, vmfb, function, inputs, threads, tmp)
            return
        for case in args.case:
            for threads in args.threads:
                vmfb, function, inputs = write_step(case, threads, tmp, args.source)
                profile_step(case, vmfb, function, inputs, threads, tmp)


def profile_step(case: str, vmfb: str, function: str, inputs: List[str], threads: int, tmp: str) -> None:
    wall = step_ms(benchmark(vmfb, function, inputs, threads, []))
    profile = os.path.join(tmp, "step.ireeprof")
    benchmark(vmfb, function, inputs, threads, ["--device_profiling_mode=host-execution,executable-metadata",
                                               f"--device_profiling_output={profile}"])
    report(case, threads, wall, dispatches(profile))


if __name__ == "__main__":
    main()
