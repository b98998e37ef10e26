"""Decode steps beyond decode_step.py's: Gemma 2's softcap, gpt-oss's head sinks, a short chunk.

Each in onnxruntime-genai's shared-buffer mode (capacity P+1, past and present one buffer), on
iree-cpu in its default form (``fused``: the kernel applies the softcap and the sinks) and in
the decomposed one, against onnxruntime's GroupQueryAttention kernel, measured alternately in
one process (decode_step.py's runners and medians).

    .venv/bin/python benchmarks/decode_variants.py [--past 1023 4095] [--threads 1 2] [--repeats 30]

Shapes (fp32, B=1): gemma2 H=8, Hkv=4, Dh=256, softcap 50 (Gemma 2 2B's attention);
gpt-oss H=64, Hkv=8, Dh=64 with head_sink (gpt-oss 20B's); chunk4 decode_step.py's Llama
shape (H=32, Hkv=8, Dh=128) checking 4 draft tokens at once (speculative decoding, a static
S = 4: 16 grouped rows a KV head).  The buffer holds P valid rows and room for the step's.  Not a test: numbers depend on the
machine and its load.
"""

from __future__ import annotations

import argparse
import os
import platform
from typing import Dict

from decode_step import Runner, cpu_model, measure, ort_shared
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

VARIANTS = {  # name: (GQAConfig fields, extra node attributes)
    "gemma2": (dict(num_heads=8, kv_num_heads=4, head_size=256), {"softcap": 50.0}),
    "gpt-oss": (dict(num_heads=64, kv_num_heads=8, head_size=64, head_sink=True), {}),
    "chunk4": (dict(seq=4, num_heads=32, kv_num_heads=8, head_size=128), {}),
}


def ours(model, feeds, threads: int, attention: str) -> Runner:
    """The step with its caches fed back (share_buffers: the new row written in place)."""
    sess = InferenceSession(model, backend="iree-cpu", threads=threads, share_buffers=True, attention=attention)
    out, key, value = sess.run(None, feeds)
    step = dict(feeds, past_key=key, past_value=value)
    return Runner(lambda: sess.run(None, step), sess.run(None, step)[0])


def runners(past: int, threads: int) -> Dict[str, Runner]:
    built: Dict[str, Runner] = {}
    for name, (fields, attrs) in VARIANTS.items():
        seq = fields.get("seq", 1)
        cfg = GQAConfig(**{"batch": 1, "seq": 1, "past": past + seq, "past_lens": (past,), "fixed_capacity": True, **fields})
        model, feeds = make_model(cfg, attrs), make_inputs(cfg)
        built[f"{name}/onnxruntime"] = ort_shared(model, feeds, threads)
        for attention in ("fused", "decomposed"):
            built[f"{name}/ours {attention}"] = ours(model, feeds, threads, attention)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", type=int, nargs="*", default=[1023, 4095])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}")
    for threads in args.threads:
        for past in args.past:
            built = runners(past, threads)
            medians = measure(built, args.repeats)
            print(f"\npast={past}, {threads} thread(s)")
            for key, runner in built.items():
                base = key.split("/")[0] + "/onnxruntime"
                diff = abs(runner.output.astype("float64") - built[base].output).max()
                print(f"  {key:26s} {medians[key] * 1e3:7.3f} ms  {medians[key] / medians[base]:5.2f}x onnxruntime"
                      f"  max|diff| {diff:.1e}")


if __name__ == "__main__":
    main()
