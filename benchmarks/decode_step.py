"""One GroupQueryAttention decode step (B=1, S=1, H=32, Hkv=8, Dh=128, fp32):
ours on iree-cpu against onnxruntime's kernel, torch-mlir's own lowering and
the KV-cache reading bound, measured alternately (each round in a new random order) in one process.

    .venv/bin/python benchmarks/decode_step.py [--past 1023 4095] [--threads 1 2] [--repeats 30]

On another x86 host (no compiler there: iree-base-runtime, onnx and onnxruntime only),
compile here for its CPU (an LLVM CPU name, e.g. sapphirerapids, znver4), then run there:

    .venv/bin/python benchmarks/decode_step.py --prepare DIR --target-cpu sapphirerapids
    PYTHONPATH=python python3 benchmarks/decode_step.py --from DIR/sapphirerapids

Two cache modes, each against onnxruntime in the same mode:

``growing``  past has P rows, present P+1 (a new present buffer every step).
``shared``   onnxruntime-genai's fixed buffers: capacity P+1, past and present
             the same buffer (onnxruntime: IO binding of one OrtValue to both;
             ours: ``share_buffers=True`` with the outputs fed back, every
             input bound once with ``io_binding`` as onnxruntime's are).
``shared@4096`` the same with a 4096-row buffer holding P valid rows (a
             buffer of max_length rows early in a generation).
``shared dyn.`` ``shared`` from a model whose batch, sequence and cache lengths
             are dynamic and whose seqlens_k and total_sequence_length come
             from an attention mask, as onnxruntime-genai's builder declares
             and computes them.
``growing dyn.`` ``growing`` from the same form of model, the past on the device
             (``ours resident``), as a generation loop has it.

Rows:
  ours / onnxruntime   median step time ratio (lower is faster; <= 1.0 beats it)
  ours                 numpy feeds where numpy usually allocates them (16 bytes
                       past a 64-byte boundary; placed there, since one on a
                       boundary by chance is read in place): the past is
                       copied to the device every call
  ours aligned         the same numpy past on a 64-byte boundary (as this
                       package's outputs fed back, or ``aligned_empty``
                       arrays): read in place, as onnxruntime reads numpy
                       memory (backends/iree/host_import.py)
  ours run()           shared mode through ``run`` with a dict of feeds instead
                       of IO binding (what a step paid before round 25)
  ours resident        growing mode with the past already on the device
                       (``InferenceSession.resident``), as a generation loop
                       with ``share_buffers`` has it
  upstream             torch-mlir's C++ lowering compiled the same way (growing
                       mode only: it cannot express the shared one), or why not
  bound                K/V bytes read by the step / the read bandwidth numpy
                       measures on the same threads
  written              bytes the step writes, from IREE's stream-level schedule
                       (fresh result buffers, copies and fills) plus the host
                       bytes uploaded per call

Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np
import onnx

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree.host_import import aligned_empty
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

HEADS = dict(batch=1, seq=1, num_heads=32, kv_num_heads=8, head_size=128)


@dataclass
class Runner:
    run: Callable[[], object]
    output: np.ndarray  # its first result, for the correctness line
    uploaded: Optional[int] = None  # host bytes uploaded per call
    written: Optional[str] = None  # stream-level write summary


CAPACITY = 4096  # a shared buffer of max_length rows holding fewer valid ones


def configs(past: int) -> Dict[str, GQAConfig]:
    modes = {
        "growing": GQAConfig(past=past, **HEADS),
        "shared": GQAConfig(past=past + 1, past_lens=(past,), fixed_capacity=True, **HEADS),
    }
    if past + 1 < CAPACITY:
        modes[f"shared@{CAPACITY}"] = GQAConfig(past=CAPACITY, past_lens=(past,), fixed_capacity=True, **HEADS)
    modes["shared dyn."] = GQAConfig(past=past + 1, past_lens=(past,), fixed_capacity=True, dynamic=True, mask=True, **HEADS)
    modes["growing dyn."] = GQAConfig(past=past, dynamic=True, mask=True, **HEADS)
    return modes


# -- onnxruntime -------------------------------------------------------------------


def ort_session(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # Its pool's threads spin after each run by default: measured alternately on
    # few cores, they would steal the cores of whichever runner goes next.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_growing(model, feeds, threads) -> Runner:
    sess = ort_session(model, threads)
    return Runner(lambda: sess.run(None, feeds), sess.run(None, feeds)[0])


def ort_shared(model, feeds, threads) -> Runner:
    """past_key/present_key (and value) bound to one OrtValue: the kernel writes the new row in place."""
    import onnxruntime as ort

    sess = ort_session(model, threads)
    binding = sess.io_binding()
    binding.bind_output("output")  # first: get_outputs() lists outputs in binding order
    for name, value in feeds.items():
        if name in ("past_key", "past_value"):
            buffer = ort.OrtValue.ortvalue_from_numpy(value.copy())
            binding.bind_ortvalue_input(name, buffer)
            binding.bind_ortvalue_output(name.replace("past", "present"), buffer)
        else:
            binding.bind_cpu_input(name, value)

    def run():
        sess.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()

    return Runner(run, run())


# -- ours / upstream on iree-cpu ---------------------------------------------------


def ours(model, feeds, threads, shared: bool, resident_past: bool = False, aligned: bool = False,
         vmfb: Optional[bytes] = None, bind: bool = False) -> Runner:
    """``shared``: the outputs fed back (one buffer); ``resident_past``: a growing step whose past is
    already on the device, as a generation loop feeding present back has it; else numpy feeds,
    ``aligned`` on a 64-byte boundary.  ``vmfb``: the step compiled elsewhere (``--prepare``).
    ``bind``: the step's inputs bound once (``io_binding``, as ort_shared binds them), the output
    asked of each run."""
    share = shared or resident_past
    if vmfb is None:
        sess = InferenceSession(model, backend="iree-cpu", threads=threads, share_buffers=share)
    else:
        sess = InferenceSession.from_vmfb(model, vmfb, "iree-cpu", threads=threads, share_buffers=share)
    out, key, value = sess.run(None, feeds)
    if shared:
        step = dict(feeds, past_key=key, past_value=value)  # caches stay on the device
    elif resident_past:
        step = dict(feeds, past_key=sess.resident(feeds["past_key"]), past_value=sess.resident(feeds["past_value"]))
    elif aligned:
        step = dict(feeds, past_key=aligned_copy(feeds["past_key"]), past_value=aligned_copy(feeds["past_value"]))
    else:  # where numpy usually puts a large array: one not 64-byte aligned by chance uploads less
        step = dict(feeds, past_key=aligned_copy(feeds["past_key"], 16), past_value=aligned_copy(feeds["past_value"], 16))

    def run():
        return sess.run(None, step)

    if bind:
        run = bound_run(sess, step)

    first = run()[0]
    return Runner(run, first, uploaded=sess.uploaded_bytes, written=None if vmfb else stream_writes(model, threads))


def bound_run(sess, step: Dict[str, np.ndarray]):
    """A run of ``sess`` on ``step``'s arrays bound once (``io_binding``), asking the output only
    (as ort_shared binds onnxruntime's); returns the bound outputs."""
    binding = sess.io_binding()
    for name, value in step.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("output")

    def run():
        sess.run_with_iobinding(binding)
        return binding.get_outputs()

    return run


def aligned_copy(a: np.ndarray, offset: int = 0) -> np.ndarray:
    """A copy of ``a`` starting ``offset`` bytes past a 64-byte boundary."""
    raw = aligned_empty((a.nbytes + offset,), np.uint8)
    copy = raw[offset:].view(a.dtype).reshape(a.shape)
    copy[...] = a
    return copy


def trimmed(model: onnx.ModelProto) -> onnx.ModelProto:
    """The node without trailing empty optional inputs: torch-mlir's lowering counts operands."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        while node.input and not node.input[-1]:
            node.input.pop()
    return copy


_PROBE = """
import sys, onnx, numpy as np
from gqa_torch_mlir.backends.iree.compiler import IreeCpuBackend
model = onnx.load(sys.argv[1])
compiled = IreeCpuBackend(threads=1, plugin=False).compile(model)
print("compiled", flush=True)
"""


def upstream(model, feeds, threads) -> Runner:
    """torch-mlir's own lowering (our pass off), probed in a child first: it may crash the process."""
    model = trimmed(model)
    with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
        f.write(model.SerializeToString())
    probe = subprocess.run([sys.executable, "-c", _PROBE, f.name], capture_output=True, text=True)
    os.unlink(f.name)
    if probe.returncode != 0 or "compiled" not in probe.stdout:
        lines = [l for l in (probe.stderr or "").splitlines() if "error" in l] or [f"exit code {probe.returncode}"]
        raise RuntimeError(lines[0][:160])
    from gqa_torch_mlir.backends.iree.compiler import IreeCpuBackend

    compiled = IreeCpuBackend(threads=threads, plugin=False).compile(model)
    args = [feeds[i.name] for i in model.graph.input]
    return Runner(lambda: compiled.invoke(compiled.function, *args), compiled.invoke(compiled.function, *args)[0])


# -- bytes written, from IREE's stream-level schedule -----------------------------


def stream_writes(model, threads) -> str:
    """Fresh result buffers, copies and fills of the step (bytes), read off ``--compile-to=stream``."""
    from gqa_torch_mlir.backends.iree import COMPILE_FLAGS, IreeCpuBackend

    lowered = IreeCpuBackend(threads=threads).lower(model)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "step.mlir"), os.path.join(tmp, "step.stream.mlir")
        with open(src, "w") as f:
            f.write(lowered.asm())
        tool = os.path.join(os.path.dirname(sys.executable), "iree-compile")
        subprocess.run([tool, *COMPILE_FLAGS, "--compile-to=stream", src, "-o", out], check=True)
        text = open(out).read()
    consts = {m[0]: int(m[1]) for m in re.findall(r"(%c[\w]*) = arith.constant (\d+) : index", text)}
    size = lambda name: consts.get(name, 0)  # noqa: E731
    results = sum(size(s) for s in re.findall(r"stream.resource.alloca[^\n]*!stream.resource<external>\{(%\w+)\}", text))
    copies = sum(size(s) for s in re.findall(r"stream.cmd.copy [^\n]*, (%\w+) :", text))
    fills = sum(size(s) for s in re.findall(r"stream.cmd.fill [^\n]* for (%\w+)\]", text))
    return f"results {_mib(results)}, copies {_mib(copies)}, fills {_mib(fills)}"


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**16 else f"{n / 2**10:.1f} KiB"


# -- the reading bound --------------------------------------------------------------


def read_bandwidth(threads: int, mib: int = 512) -> float:
    """Bytes/s numpy reads (summing a large array) on ``threads`` threads."""
    data = np.ones(mib * 2**18, np.float32)
    parts = np.array_split(data, threads)
    best = float("inf")
    for _ in range(5):
        workers = [threading.Thread(target=np.add.reduce, args=(p,)) for p in parts]
        t = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - t)
    return data.nbytes / best


# -- main ---------------------------------------------------------------------------


def vmfb_name(mode: str, past: int) -> str:
    return f"{mode.replace('@', '-at-').replace(' ', '-').rstrip('.')}-p{past}.vmfb"


def compile_for_cpus(directory: str, models: Dict[str, onnx.ModelProto], cpus, prefill_loop: Optional[Dict[str, str]] = None) -> None:
    """``models`` (file name: model) compiled for each LLVM CPU name into ``directory/CPU/``, as
    ``InferenceSession`` compiles them, for a host without the compiler (``from_vmfb``);
    ``prefill_loop``: that lowering option of the file names given (else the default)."""
    from gqa_torch_mlir.backends.iree.compiler import IreeCpuBackend
    from gqa_torch_mlir.options import LoweringOptions

    for cpu in cpus:
        os.makedirs(os.path.join(directory, cpu), exist_ok=True)
        flags = [f"--iree-llvmcpu-target-cpu={cpu}"]  # the last such flag wins
        for name, model in models.items():
            options = LoweringOptions.for_backend("iree-cpu", prefill_loop=(prefill_loop or {}).get(name))
            backend = IreeCpuBackend(extra_flags=flags, options=options)
            with open(os.path.join(directory, cpu, name), "wb") as f:
                f.write(backend.compile_lowered(backend.lower(model)))
        print(f"compiled for {cpu}", flush=True)


def prepare(directory: str, pasts, cpus) -> None:
    """Each step compiled for each CPU (run with ``--from directory/CPU``)."""
    models = {vmfb_name(mode, past): make_model(cfg) for past in pasts for mode, cfg in configs(past).items()}
    compile_for_cpus(directory, models, cpus)


def build_runners(past: int, threads: int, source: Optional[str] = None) -> Dict[str, Runner]:
    """``source``: a ``--prepare``d directory of compiled steps (no compiler here: no upstream row)."""
    runners: Dict[str, Runner] = {}
    for mode, cfg in configs(past).items():
        model, feeds = make_model(cfg), make_inputs(cfg)
        vmfb = open(os.path.join(source, vmfb_name(mode, past)), "rb").read() if source else None
        shared = mode.startswith("shared")
        runners[f"{mode}/onnxruntime"] = (ort_shared if shared else ort_growing)(model, feeds, threads)
        if mode == "growing dyn.":
            runners[f"{mode}/ours resident"] = ours(model, feeds, threads, shared=False, resident_past=True, vmfb=vmfb)
            continue
        runners[f"{mode}/ours"] = ours(model, feeds, threads, shared=shared, vmfb=vmfb, bind=shared)
        if mode == "shared":
            runners[f"{mode}/ours run()"] = ours(model, feeds, threads, shared=True, vmfb=vmfb)
        if mode == "growing":
            runners[f"{mode}/ours aligned"] = ours(model, feeds, threads, shared=False, aligned=True, vmfb=vmfb)
            runners[f"{mode}/ours resident"] = ours(model, feeds, threads, shared=False, resident_past=True, vmfb=vmfb)
            if source is None:
                try:
                    runners[f"{mode}/upstream"] = upstream(model, feeds, threads)
                except Exception as e:  # noqa: BLE001  (reported, not fatal)
                    print(f"  upstream torch-mlir lowering: not runnable: {e}")
    return runners


def measure(runners: Dict[str, Runner], repeats: int) -> Dict[str, float]:
    """Medians of ``repeats`` rounds, each running every runner once, in a new random order (a fresh
    sequence each run, so that two runs are two samples of it):
    alternated, load changes hit every runner alike; shuffled, each follows onnxruntime as often,
    whose runs evict the caches of the one after it (in a fixed order the runner after onnxruntime
    came out 40-300 us slower on the AMD guest, whichever it was: README.md, "CPU, round 22")."""
    times = {k: [] for k in runners}
    order, shuffle = list(runners), random.Random().shuffle
    for _ in range(repeats):
        shuffle(order)
        for key in order:
            t = time.perf_counter()
            runners[key].run()
            times[key].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def report(past: int, threads: int, runners: Dict[str, Runner], medians: Dict[str, float], bandwidth: float) -> None:
    kv_bytes = 2 * HEADS["kv_num_heads"] * (past + 1) * HEADS["head_size"] * 4
    bound = kv_bytes / bandwidth
    print(f"\npast={past}, {threads} thread(s): reading bound {1e3 * bound:.3f} ms "
          f"({kv_bytes / 2**20:.1f} MiB of K/V at {bandwidth / 1e9:.1f} GB/s)")
    for key, r in runners.items():
        mode = key.split("/")[0]
        base = medians[f"{mode}/onnxruntime"]
        diff = float(np.max(np.abs(np.asarray(r.output, np.float32) - np.asarray(runners[f"{mode}/onnxruntime"].output))))
        line = (f"  {key:24s} {1e3 * medians[key]:8.3f} ms  {medians[key] / base:5.2f}x onnxruntime  "
                f"{medians[key] / bound:5.1f}x bound  max|diff| {diff:.1e}")
        if r.uploaded is not None:  # written: None where the step was compiled elsewhere (--from)
            line += f"\n  {'':24s} writes per step: {r.written or 'not read (no compiler here)'}; uploads {_mib(r.uploaded)}"
        print(line)


VECTOR_EXTENSIONS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "amx_tile")


def add_host_options(parser: argparse.ArgumentParser) -> None:
    """--prepare / --target-cpu / --from (compile here, run on another host) and --worker-spin-us,
    shared by decode_step.py and prefill_step.py."""
    parser.add_argument("--prepare", metavar="DIR", help="only compile the steps into DIR/CPU/ for each --target-cpu")
    parser.add_argument("--target-cpu", nargs="*", default=["host"], help="LLVM CPU names for --prepare")
    parser.add_argument("--from", dest="source", metavar="DIR", help="run the steps --prepare compiled into DIR")
    parser.add_argument("--worker-spin-us", type=int, default=0, help="local-task workers poll this long before sleeping")


def parse_host_options(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    if args.target_cpu != ["host"] and not args.prepare:
        parser.error("--target-cpu names the CPUs --prepare compiles for; give --prepare DIR")
    return args


def spin_workers(us: int) -> None:
    """IREE's local-task workers (threads > 1) poll ``us`` microseconds for more work before they
    sleep (``--task_worker_spin_us``, process-wide, read when the pool is made): each dispatch then
    finds its workers awake.  0, IREE's default: they sleep at once."""
    if us:
        import iree.runtime as ireert

        ireert.flags.parse_flags(f"--task_worker_spin_us={us}")
        print(f"local-task workers spin {us} us before sleeping")


def cpu_model() -> str:
    """The CPU's model name and the vector extensions it reports (Linux), e.g. 'AMD EPYC (avx2 fma avx512f ...)'."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return platform.processor() or platform.machine()
    name = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    have = set(flags.group(1).split()) if flags else set()
    extensions = " ".join(x for x in VECTOR_EXTENSIONS if x in have) or "no AVX2"
    return f"{name.group(1).strip() if name else platform.machine()} ({extensions})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", type=int, nargs="*", default=[1023, 4095])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=30)
    add_host_options(parser)
    args = parse_host_options(parser)
    if args.prepare:
        return prepare(args.prepare, args.past, args.target_cpu)
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}")
    spin_workers(args.worker_spin_us)
    for threads in args.threads:
        bandwidth = read_bandwidth(threads)
        for past in args.past:
            runners = build_runners(past, threads, args.source)
            report(past, threads, runners, measure(runners, args.repeats), bandwidth)


if __name__ == "__main__":
    main()
