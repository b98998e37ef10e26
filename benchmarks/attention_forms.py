"""Decode and prefill steps of one GroupQueryAttention: our two attention forms on
each backend against onnxruntime's kernel, measured alternately in one process.

    .venv/bin/python benchmarks/attention_forms.py [--repeats 20] [--threads 1]

Prints median milliseconds per step and ratios to onnxruntime (lower is
faster).  Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

CASES = {
    "decode past=1023": GQAConfig(batch=1, seq=1, past=1023, num_heads=32, kv_num_heads=8, head_size=128),
    "decode past=4095": GQAConfig(batch=1, seq=1, past=4095, num_heads=32, kv_num_heads=8, head_size=128),
    "prefill S=256": GQAConfig(batch=1, seq=256, past=0, num_heads=32, kv_num_heads=8, head_size=128),
}


def onnxruntime_session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def ours(model, backend: str, attention: str, threads: int):
    sess = InferenceSession(model, backend=backend, attention=attention, threads=threads)
    return lambda feeds: sess.run(None, feeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    for name in args.cases:
        cfg = CASES[name]
        model, feeds = make_model(cfg), make_inputs(cfg)
        runners = {"onnxruntime": onnxruntime_session(model, args.threads)}
        for backend in ("refbackend", "iree-cpu"):
            for attention in ("decomposed", "sdpa"):
                if (backend, attention) != ("refbackend", "sdpa"):  # refused: see session.SDPA_ON_REFBACKEND
                    runners[f"{backend}/{attention}"] = ours(model, backend, attention, args.threads)
        times = {k: [] for k in runners}
        for _ in range(args.repeats):  # alternate so load changes hit every runner alike
            for key, run in runners.items():
                t = time.perf_counter()
                run(feeds)
                times[key].append(time.perf_counter() - t)
        base = statistics.median(times["onnxruntime"])
        print(f"\n{name} (B=1, H=32, Hkv=8, Dh=128, fp32, {args.threads} thread(s), median of {args.repeats})")
        for key, ts in times.items():
            med = statistics.median(ts)
            print(f"  {key:24s} {1e3 * med:9.2f} ms   {med / base:7.2f}x onnxruntime")


if __name__ == "__main__":
    main()
