"""One GroupQueryAttention decode step on an NVIDIA GPU: ours on iree-cuda next to PyTorch's fused
attention (eager and CUDA graph) and the HBM reading bound, measured in one process.

    # 1. compile on any host with iree-base-compiler (no GPU needed)
    .venv/bin/python benchmarks/gpu_decode.py prepare DIR
    # 2. run where torch sees a CUDA GPU and iree-base-runtime is installed (feeds are made there)
    PYTHONPATH=python python3 benchmarks/gpu_decode.py run DIR [--repeats 50]
    # where the time goes, per dispatch (Nsight Compute; each kernel timed alone)
    PYTHONPATH=python ncu --clock-control none --csv --metrics gpu__time_duration.sum \
        python3 benchmarks/gpu_decode.py profile DIR b1-p4095-shared

The step: S=1, 32 query heads, 8 KV heads, head size 128, f16, rotary, B = 1
and 16, past 1023 and 4095, in two cache modes:

``shared``   onnxruntime-genai's fixed buffers: 4096 rows holding ``past`` valid
             ones; ours feeds present back as past, kept on the device
             (``InferenceSession.run_with_device_values``), written in place.
``growing``  past has ``past`` rows, present ``past + 1`` (a new buffer each step).
Every input is already on the device (``InferenceSession.device_value``), as
torch's tensors are: the step's Q/K/V come from the layer's projections there.

Columns (medians over ``--repeats`` steps, after warm-up):
  ours           ``InferenceSession.from_vmfb(..., "iree-cuda")``, one step per call, from Python
  torch eager    ``F.scaled_dot_product_attention(enable_gqa=True)`` over the valid rows, the new
                 K/V row written with ``index_copy_``, rotary included
  torch graph    the same captured in a CUDA graph and replayed
  bound          K/V bytes the step must read / the device-to-device copy bandwidth measured here
The first step of each case is checked against onnxruntime's CPU kernel (f16 within 2e-2).

Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


HEADS = dict(seq=1, num_heads=32, kv_num_heads=8, head_size=128, rotary=True, dtype="float16")
CAPACITY = 4096


def configs():
    from gqa_torch_mlir.testing.gqa_onnx import GQAConfig

    out = {}
    for batch in (1, 16):
        for past in (1023, 4095):
            out[f"b{batch}-p{past}-shared"] = GQAConfig(batch=batch, past=CAPACITY, past_lens=(past,) * batch, fixed_capacity=True, **HEADS)
            out[f"b{batch}-p{past}-growing"] = GQAConfig(batch=batch, past=past, **HEADS)
    return out


def prepare(directory: Path) -> None:
    import onnx

    from gqa_torch_mlir.backends.iree import IreeBackend
    from gqa_torch_mlir.testing.gqa_onnx import make_model

    directory.mkdir(parents=True, exist_ok=True)
    for name, cfg in configs().items():
        model = make_model(cfg)
        onnx.save(model, str(directory / f"{name}.onnx"))
        backend = IreeBackend(target="iree-cuda")
        (directory / f"{name}.vmfb").write_bytes(backend.compile_lowered(backend.lower(model)))
        print(f"compiled {name}", flush=True)


# -- run (GPU host) ------------------------------------------------------------------------


def median_ms(fn, repeats: int, sync=None) -> float:
    for _ in range(3):
        fn()
    if sync:
        sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def ours(directory: Path, name: str, cfg, feeds, repeats: int):
    from gqa_torch_mlir import InferenceSession

    sess = InferenceSession.from_vmfb(str(directory / f"{name}.onnx"), (directory / f"{name}.vmfb").read_bytes(), "iree-cuda",
                                      share_buffers=True)
    first = sess.run(None, feeds)
    step = {name: sess.device_value(value) for name, value in feeds.items()}  # on the device, as torch's tensors
    if cfg.fixed_capacity:
        def run():
            out = sess.run_with_device_values(None, step)
            step["past_key"], step["past_value"] = out[1], out[2]  # present fed back: the same buffer
    else:
        def run():
            sess.run_with_device_values(None, step)  # the same past each step
    return first, median_ms(run, repeats)


def torch_step(cfg, feeds, repeats: int):
    """(eager ms, graph ms): rotary, the new row written in place, SDPA over the valid rows."""
    import torch
    import torch.nn.functional as F

    dev, B, H, Hkv, D = "cuda", cfg.batch, cfg.num_heads, cfg.kv_num_heads, cfg.head_size
    P = (cfg.past_lens or (cfg.past,))[0]
    T = P + 1
    rows = CAPACITY if cfg.fixed_capacity else T
    k_cache = torch.zeros(B, Hkv, rows, D, dtype=torch.float16, device=dev)
    v_cache = torch.zeros_like(k_cache)
    k_cache[:, :, :P] = torch.from_numpy(feeds["past_key"][:, :, :P]).to(dev)
    v_cache[:, :, :P] = torch.from_numpy(feeds["past_value"][:, :, :P]).to(dev)
    q = torch.randn(B, H, 1, D, dtype=torch.float16, device=dev)
    k = torch.randn(B, Hkv, 1, D, dtype=torch.float16, device=dev)
    v = torch.randn(B, Hkv, 1, D, dtype=torch.float16, device=dev)
    cos = torch.randn(1, 1, 1, D // 2, dtype=torch.float16, device=dev)
    sin = torch.randn_like(cos)
    pos = torch.tensor([P], device=dev)

    def rotate(x):
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)

    def step():
        k_cache.index_copy_(2, pos, rotate(k))
        v_cache.index_copy_(2, pos, v)
        return F.scaled_dot_product_attention(rotate(q), k_cache[:, :, :T], v_cache[:, :, :T], enable_gqa=True)

    eager = median_ms(step, repeats, torch.cuda.synchronize)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    replay = median_ms(graph.replay, repeats, torch.cuda.synchronize)
    return eager, replay


def copy_bandwidth() -> float:
    """Bytes read + written per second by a 2 GiB device-to-device copy."""
    import torch

    a = torch.empty(1 << 30, dtype=torch.float16, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), 10, torch.cuda.synchronize)
    return 2 * a.numel() * 2 / (ms / 1e3)


def run(directory: Path, repeats: int) -> list:
    import onnx
    import torch

    from gqa_torch_mlir.testing.gqa_onnx import compare, make_inputs, run_onnxruntime

    bandwidth = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
          f"copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    print("| case | ours (iree-cuda) | torch eager | torch CUDA graph | bound | ours / eager | ours / bound | matches onnxruntime |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for name, cfg in configs().items():
        feeds = make_inputs(cfg, seed=7)
        first, ms = ours(directory, name, cfg, feeds, repeats)
        want = run_onnxruntime(onnx.load(str(directory / f"{name}.onnx")), feeds)
        problems = compare(cfg, dict(zip(("output", "present_key", "present_value"), first)), want, feeds)
        eager, graph = torch_step(cfg, feeds, repeats)
        P = (cfg.past_lens or (cfg.past,))[0]
        bound = 2 * cfg.batch * cfg.kv_num_heads * (P + 1) * cfg.head_size * 2 / bandwidth * 1e3
        row = dict(case=name, ours_ms=ms, eager_ms=eager, graph_ms=graph, bound_ms=bound, matches=not problems, problems=problems[:2])
        rows.append(row)
        print(f"| {name} | {ms:.3f} ms | {eager:.3f} ms | {graph:.3f} ms | {bound * 1e3:.1f} µs | {ms / eager:.2f}x | "
              f"{ms / bound:.0f}x | {'yes' if not problems else 'NO: ' + problems[0]} |", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare").add_argument("directory", type=Path)
    r = sub.add_parser("run")
    r.add_argument("directory", type=Path)
    r.add_argument("--repeats", type=int, default=50)
    r.add_argument("--json", type=Path)
    f = sub.add_parser("profile", help="a few steps of one case, e.g. under ncu for the per-dispatch times")
    f.add_argument("directory", type=Path)
    f.add_argument("case", choices=list(configs()))
    f.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.directory)
        return 0
    if args.command == "profile":
        from gqa_torch_mlir.testing.gqa_onnx import make_inputs

        cfg = configs()[args.case]
        ours(args.directory, args.case, cfg, make_inputs(cfg, seed=7), args.steps)
        return 0
    rows = run(args.directory, args.repeats)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["matches"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
