"""One decode step (or prefill) written as the standard Attention (opset 23) against the same step
written as com.microsoft.GroupQueryAttention, both ours on iree-cpu, and onnxruntime's kernels for
each, measured alternately in one process (B=1, H=32, Hkv=8, Dh=128, fp32, a growing cache).

    .venv/bin/python benchmarks/standard_attention_step.py [--past 1023 4095] [--prefill 256 1024] [--threads 1 2] [--repeats 30]

On a host without the compiler, as decode_step.py: ``--prepare DIR --target-cpu NAME...`` (with
the same --past and --prefill) here, ``--from DIR/NAME`` there.

Standard: Q [1,32,S,128], K/V [1,8,S,128], past_key/past_value [1,8,P,128] -> Y, present_key/value
[1,8,P+S,128] (is_causal=1, as a decoder with its cache inside Attention).  GroupQueryAttention:
query [1,S,4096], key/value [1,S,1024], the same past, seqlens_k = P+S-1, total_sequence_length =
P+S.  A decode step is S=1 after P = each --past; a prefill is S = each --prefill tokens after none.
Both are fed the same numbers; their outputs are checked against each other and onnxruntime.
``--dynamic`` (give it to ``--prepare`` and ``--from`` alike): both models with their lengths
dynamic, as the exporters declare them (a prefill then runs in a loop of query blocks, each
block's keys in chunks: docs/design.md).

Rows: the median step time of each; "std / gqa" is the ratio of ours (lower is faster).
Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time

import numpy as np

from decode_step import add_host_options, compile_for_cpus, cpu_model, parse_host_options
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing import gqa_onnx, standard_attention

H, HKV, DH = 32, 8, 128


def standard_step(past: int, S: int, dynamic: bool = False):
    cfg = standard_attention.AttentionConfig(B=1, S=S, L=S, P=past, H=H, Hkv=HKV, Dh=DH, is_causal=True, present=True)
    model, feeds = standard_attention.make_model(cfg), standard_attention.make_inputs(cfg, 0)
    if dynamic:  # the query, past and total lengths symbolic, named on a probe whose sizes are no other dim's
        probe = dataclasses.replace(cfg, S=3, L=3, P=10 if past else 0)
        model = standard_attention.with_symbolic_dims(standard_attention.make_model(probe), {3: "seq", 10: "past", 13: "total"})
    return model, feeds


def gqa_step(past: int, S: int, std_feeds, dynamic: bool = False):
    """The same step as GroupQueryAttention: [B,H,S,Dh] -> [B,S,H*Dh], the same past."""
    cfg = gqa_onnx.GQAConfig(batch=1, seq=S, num_heads=H, kv_num_heads=HKV, head_size=DH, past=past, dynamic=dynamic)
    model = gqa_onnx.make_model(cfg)
    feeds = gqa_onnx.make_inputs(cfg, np.random.default_rng(0))
    feeds["query"] = std_feeds["Q"].transpose(0, 2, 1, 3).reshape(1, S, H * DH)
    feeds["key"] = std_feeds["K"].transpose(0, 2, 1, 3).reshape(1, S, HKV * DH)
    feeds["value"] = std_feeds["V"].transpose(0, 2, 1, 3).reshape(1, S, HKV * DH)
    if past:
        feeds["past_key"], feeds["past_value"] = std_feeds["past_key"], std_feeds["past_value"]
    feeds["seqlens_k"] = np.array([past + S - 1], np.int32)
    feeds["total_sequence_length"] = np.array(past + S, np.int32).reshape(feeds["total_sequence_length"].shape)
    return model, feeds


def timed(runners, repeats: int):
    """Median seconds of each runner, called alternately, the order rotated each round."""
    times = {name: [] for name in runners}
    for name, run in runners.items():  # warm up
        run()
    names = list(runners)
    for i in range(repeats):
        for name in names[i % len(names):] + names[: i % len(names)]:  # each runner follows each other in turn
            run = runners[name]
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def step_name(past: int, S: int, dynamic: bool = False) -> str:
    return (f"decode-p{past}" if S == 1 else f"prefill-s{S}") + ("-dyn" if dynamic else "")


def ours(model, threads: int, source, name: str) -> InferenceSession:
    """Compiled here, or read from a ``--prepare``d directory."""
    if source:
        vmfb = open(os.path.join(source, f"{name}.vmfb"), "rb").read()
        return InferenceSession.from_vmfb(model, vmfb, "iree-cpu", threads=threads)
    return InferenceSession(model, backend="iree-cpu", threads=threads)


def measure_step(past: int, S: int, threads: int, repeats: int, source, dynamic: bool = False) -> str:
    """One table row: both ops, ours and onnxruntime's, alternately."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no spinning into the next runner's time
    std_model, std_feeds = standard_step(past, S, dynamic)
    gqa_model, gqa_feeds = gqa_step(past, S, std_feeds, dynamic)
    ours_std = ours(std_model, threads, source, f"std-{step_name(past, S, dynamic)}")
    ours_gqa = ours(gqa_model, threads, source, f"gqa-{step_name(past, S, dynamic)}")
    ort_std = onnxruntime.InferenceSession(std_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ort_gqa = onnxruntime.InferenceSession(gqa_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    gqa_inputs = {i.name for i in ort_gqa.get_inputs()}
    gqa_feeds = {k: v for k, v in gqa_feeds.items() if k in gqa_inputs}
    y_std = ours_std.run(None, std_feeds)[0].transpose(0, 2, 1, 3).reshape(1, S, H * DH)
    y_gqa = ours_gqa.run(None, gqa_feeds)[0]
    y_ort = ort_std.run(None, std_feeds)[0].transpose(0, 2, 1, 3).reshape(1, S, H * DH)
    diff = max(float(np.abs(y_std - y_gqa).max()), float(np.abs(y_std - y_ort).max()))
    t = timed({
        "ours std": lambda: ours_std.run(None, std_feeds),
        "ours gqa": lambda: ours_gqa.run(None, gqa_feeds),
        "ort std": lambda: ort_std.run(None, std_feeds),
        "ort gqa": lambda: ort_gqa.run(None, gqa_feeds),
    }, repeats)
    ms = {k: v * 1e3 for k, v in t.items()}
    step = (f"decode, past {past}" if S == 1 else f"prefill {S}") + (", dynamic" if dynamic else "")
    return (f"| {step}, {threads}t | {ms['ours std']:.2f} ms | {ms['ours gqa']:.2f} ms | {t['ours std'] / t['ours gqa']:.2f}x | "
            f"{ms['ort std']:.2f} ms | {ms['ort gqa']:.2f} ms | {t['ours std'] / t['ort std']:.2f}x | {diff:.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--past", type=int, nargs="*", default=[1023, 4095], help="decode steps after this many past rows")
    parser.add_argument("--prefill", type=int, nargs="*", default=[], help="prefills of this many tokens")
    parser.add_argument("--threads", type=int, nargs="*", default=[1])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--dynamic", action="store_true", help="the models' lengths dynamic (see above)")
    add_host_options(parser)
    args = parse_host_options(parser)
    steps = [(p, 1) for p in args.past] + [(0, s) for s in args.prefill]
    if args.prepare:
        models = {}
        for past, S in steps:
            std_model, std_feeds = standard_step(past, S, args.dynamic)
            models[f"std-{step_name(past, S, args.dynamic)}.vmfb"] = std_model
            models[f"gqa-{step_name(past, S, args.dynamic)}.vmfb"] = gqa_step(past, S, std_feeds, args.dynamic)[0]
        return compile_for_cpus(args.prepare, models, args.target_cpu)
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}")
    print("| step | ours standard | ours GQA | std / gqa | onnxruntime standard | onnxruntime GQA | ours std / ort std | max diff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for threads in args.threads:
        for past, S in steps:
            print(measure_step(past, S, threads, args.repeats, args.source, args.dynamic), flush=True)


if __name__ == "__main__":
    main()
