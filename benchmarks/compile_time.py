"""Compile time of the ONNX -> torch pipeline on N-layer builder decoders, and the
share of it spent in our ``convert-onnx-gqa-to-torch`` pass.

    .venv/bin/python benchmarks/compile_time.py [--layers 1 2 4 8 16 32] [--model tiny-mistral|llama-int4|...]
        [--repeats 3] [--breakdown] [--profile] [--timing] [--no-backend]

The N-layer decoders are made in memory from a 2-layer onnxruntime-genai
builder model (``tiny-mistral``: the package's embedded fp32 Mistral; or a
fixture of test/fixtures/decoders, e.g. ``llama-int4`` with MatMulNBits) by
cloning layer 1 as layers 1..N-1 (tensors, initializers, past/present caches
renamed) and moving the final norm behind the last one.  Each is checked with
onnx.checker and run once on onnxruntime before it is timed.

Stages, timed one after the other in one process on a fresh context, as
``compile(model, output_type="torch")`` runs them (see pipeline.STAGES):

  import   pipeline.import_onnx: contrib-aware shape inference + torch-mlir's importer
  plugin   our convert-onnx-gqa-to-torch pass (``lowered``: the nodes it lowers)
  onnx2t   the torch-mlir passes of the "torch" stage
           (func.func(convert-torch-onnx-to-torch),canonicalize)
  asm      the repro snapshots compile() prints before each of those two
           stages (pipeline.run_stage); not a pass, but paid by compile()

``plugin%`` is plugin / (plugin + onnx2t); ``plugin%all`` is plugin / (import +
plugin + onnx2t); ``plugin%bk`` is plugin / (import + plugin + onnx2t +
backend), its share of torch-mlir's whole ONNX -> torch pipeline
(``torch-onnx-to-torch-backend-pipeline``, the ``backend`` column), to which
the issue's target (<= 10% at 32 layers) is applied.  Medians
of ``--repeats`` runs after a warm-up.  At the largest N, ``--breakdown``
prints the plugin's time per lowering, ``--profile`` a cProfile of it,
``--timing`` MLIR's per-pass timing report (stderr); ``--no-backend`` drops
the column of torch-mlir's torch-backend stage (~10 s at 32 layers).  Not a
test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import onnx
from onnx import helper

from gqa_torch_mlir.context import make_context
from gqa_torch_mlir.passes import PASS_ARGUMENT, add_pass, apply_lowerings
from gqa_torch_mlir.pipeline import STAGES, import_onnx, load_model
from gqa_torch_mlir.registry import REGISTRY, Lowering, Registry
from gqa_torch_mlir.testing.decoder import EMBEDDED_DECODER, Decoder
from gqa_torch_mlir.testing.layers import with_layers

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "test" / "fixtures" / "decoders"
TORCH_PASSES = next(pipeline for _, pipeline, completes in STAGES if completes == "torch")
BACKEND_PASSES = next(pipeline for _, pipeline, completes in STAGES if completes == "torch-backend")
REFUSED = {"qwen3-fp16"}  # q/k norms fused into GroupQueryAttention: onnxruntime's CPU provider and the plugin refuse it
TARGET_SHARE = 0.10  # issue 5: the plugin pass costs <= 10% of the ONNX -> torch pipeline at 32 layers

# ---------------------------------------------------------------------------
# N-layer decoders by graph surgery
# ---------------------------------------------------------------------------

def model_path(name: str) -> Path:
    return EMBEDDED_DECODER / "model.onnx" if name == "tiny-mistral" else FIXTURES / name / "model.onnx"


def model_names() -> List[str]:
    fixtures = sorted(p.name for p in FIXTURES.iterdir() if (p / "model.onnx").is_file()) if FIXTURES.is_dir() else []
    return ["tiny-mistral"] + [name for name in fixtures if name not in REFUSED]


# ---------------------------------------------------------------------------
# validity: onnx.checker and one onnxruntime run
# ---------------------------------------------------------------------------


def cache_capacity(model: onnx.ModelProto) -> Dict[str, int]:
    """past input -> rows of a zero cache onnxruntime accepts (window-sized for
    sliding_window_cache layers, else empty)."""
    rows = {}
    for node in model.graph.node:
        if node.op_type == "GroupQueryAttention":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            window = attrs.get("local_window_size", -1) if attrs.get("sliding_window_cache", 0) else 0
            rows[node.input[3]] = rows[node.input[4]] = max(window, 0)
    return rows


def zero_feeds(model: onnx.ModelProto, head_size: int, prompt: int = 5) -> Dict[str, np.ndarray]:
    rows = cache_capacity(model)
    feeds = {"input_ids": np.arange(1, prompt + 1, dtype=np.int64)[None], "attention_mask": np.ones((1, prompt), np.int64)}
    for vi in model.graph.input:
        if vi.name.startswith("past_key_values."):
            heads = vi.type.tensor_type.shape.dim[1].dim_value
            dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            feeds[vi.name] = np.zeros((1, heads, rows[vi.name], head_size), dtype)
    return feeds


def checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy onnx.checker accepts: onnxruntime registers SimplifiedLayerNormalization
    in the default domain, where onnx knows no such op (the builder's own model
    fails the checker so); here it is moved to com.microsoft, which the checker skips,
    and shapes are inferred afresh."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.value_info[:]  # the builder types its [1] constant as a scalar: strict inference fails on it
    for node in copy.graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type):
            node.domain = "com.microsoft"
    return copy


def check_model(model: onnx.ModelProto, head_size: int) -> None:
    """onnx.checker (full check), then one onnxruntime run that must not error."""
    import onnxruntime as ort

    onnx.checker.check_model(checkable(model), full_check=True)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = sess.run(None, zero_feeds(model, head_size))
    if not np.isfinite(outputs[0]).all():
        raise RuntimeError("onnxruntime returned non-finite logits")


# ---------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------


def run_passes(module, add) -> float:
    """Seconds of one PassManager run of the passes ``add(pm)`` appends."""
    from torch_mlir.passmanager import PassManager

    with module.context:
        pm = PassManager("builtin.module")
        add(pm)
        start = time.perf_counter()
        pm.run(module.operation)
        return time.perf_counter() - start


def snapshot_seconds(module) -> float:
    """Seconds of the input snapshot pipeline.run_stage takes before a stage."""
    start = time.perf_counter()
    module.operation.get_asm(enable_debug_info=True, large_elements_limit=16)
    return time.perf_counter() - start


def time_once(model: onnx.ModelProto, backend: bool = False) -> Dict[str, float]:
    """One import + plugin + torch-mlir ONNX->torch run (+ the torch-backend stage), seconds per stage."""
    start = time.perf_counter()
    module = import_onnx(model, make_context())
    t = {"import": time.perf_counter() - start, "asm": snapshot_seconds(module)}
    t["plugin"] = run_passes(module, add_pass)
    t["asm"] += snapshot_seconds(module)
    t["onnx2t"] = run_passes(module, lambda pm: pm.add(TORCH_PASSES))
    if backend:
        t["backend"] = run_passes(module, lambda pm: pm.add(BACKEND_PASSES))
    return t


def time_median(model: onnx.ModelProto, repeats: int, backend: bool = False) -> Dict[str, float]:
    runs = [time_once(model, backend) for _ in range(repeats)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def count_lowered(model: onnx.ModelProto) -> int:
    """Nodes of ``model`` that our pass lowers (registered op types)."""
    names = set(REGISTRY.names())
    return sum(1 for n in model.graph.node if "onnx." + n.op_type in names)


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------


def header(backend: bool) -> str:
    extra = f" {'backend':>9} {'plugin%bk':>9}" if backend else ""
    return f"{'layers':>6} {'lowered':>7} {'import':>9} {'plugin':>9} {'onnx2t':>9} {'asm':>9} {'plugin%':>8} {'plugin%all':>10}{extra}"


def row(layers: int, lowered: int, t: Dict[str, float]) -> str:
    ms = {k: 1e3 * v for k, v in t.items()}
    share = t["plugin"] / (t["plugin"] + t["onnx2t"])
    share_all = t["plugin"] / (t["import"] + t["plugin"] + t["onnx2t"])
    text = (
        f"{layers:>6} {lowered:>7} {ms['import']:>9.1f} {ms['plugin']:>9.1f} {ms['onnx2t']:>9.1f} {ms['asm']:>9.1f}"
        f" {100 * share:>7.1f}% {100 * share_all:>9.1f}%"
    )
    if "backend" in t:
        share_backend = t["plugin"] / (t["import"] + t["plugin"] + t["onnx2t"] + t["backend"])
        text += f" {ms['backend']:>9.1f} {100 * share_backend:>8.1f}%"
    return text


def slope(xs: List[int], ys: List[float]) -> float:
    """Least-squares ms per layer."""
    return float(np.polyfit(xs, ys, 1)[0]) if len(xs) > 1 else float("nan")


def growth_line(results: Dict[int, Dict[str, float]]) -> str:
    xs = sorted(results)
    per = lambda f: 1e3 * slope(xs, [f(results[n]) for n in xs])  # noqa: E731
    return (
        f"growth per layer (least squares over {xs}): plugin {per(lambda t: t['plugin']):.2f} ms/layer,"
        f" onnx2t {per(lambda t: t['onnx2t']):.2f} ms/layer, import {per(lambda t: t['import']):.2f} ms/layer,"
        f" total (import+plugin+onnx2t) {per(lambda t: t['import'] + t['plugin'] + t['onnx2t']):.2f} ms/layer"
    )


def verdict(layers: int, t: Dict[str, float]) -> str:
    """Both readings of "the ONNX -> torch pipeline", the issue's target applied to the whole one."""
    share = t["plugin"] / (t["plugin"] + t["onnx2t"])
    text = f"plugin share at {layers} layers of the conversion passes alone (plugin + onnx2t): {100 * share:.1f}%"
    if "backend" in t:
        whole = t["plugin"] / (t["import"] + t["plugin"] + t["onnx2t"] + t["backend"])
        ok = "meets" if whole <= TARGET_SHARE else "MISSES"
        text += (
            f"\nplugin share at {layers} layers of torch-mlir's whole ONNX -> torch pipeline (import +"
            f" torch-onnx-to-torch-backend-pipeline): {100 * whole:.1f}% ({ok} the <= {100 * TARGET_SHARE:.0f}% target)"
        )
    return text


def mlir_timing(model: onnx.ModelProto) -> None:
    """MLIR's own per-pass timing of both stages (printed on stderr)."""
    from torch_mlir.passmanager import PassManager

    module = import_onnx(model, make_context())
    with module.context:
        pm = PassManager("builtin.module")
        add_pass(pm)
        pm.add(TORCH_PASSES)
        pm.enable_timing()
        pm.run(module.operation)


def op_count(module) -> int:
    """Operations nested in ``module`` (the module itself excluded)."""
    count = 0
    for region in module.operation.regions:
        for block in region.blocks:
            for op in block.operations:
                count += 1 + op_count(op)
    return count


def timed_registry(seconds: Dict[str, List[float]]) -> Registry:
    """REGISTRY with each lowering timed into ``seconds[label]``."""
    timed = Registry()
    for name in REGISTRY.names():
        for e in REGISTRY.candidates(name):
            timed.register(e.op_type, domain=e.domain, since=e.since)(timed_lowering(e, seconds))
    return timed


def timed_lowering(e: Lowering, seconds: Dict[str, List[float]]) -> Callable:
    def fn(binder, builder):
        start = time.perf_counter()
        try:
            return e.fn(binder, builder)
        finally:
            seconds.setdefault(e.label, []).append(time.perf_counter() - start)

    return fn


def breakdown(model: onnx.ModelProto) -> None:
    """The plugin pass's time per lowering and the op counts it leaves."""
    module = import_onnx(model, make_context())
    before, seconds = op_count(module), {}
    with module.context:
        start = time.perf_counter()
        apply_lowerings(module.operation, timed_registry(seconds))
        total = time.perf_counter() - start
    after = op_count(module)
    run_passes(module, lambda pm: pm.add(TORCH_PASSES))
    print(f"\n{PASS_ARGUMENT} by lowering ({total * 1e3:.1f} ms in all):")
    for label, ts in sorted(seconds.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {label:48s} x{len(ts):<4d} {1e3 * sum(ts):8.1f} ms  {1e3 * sum(ts) / len(ts):6.2f} ms/op")
    print(f"  {'walk driver, dispatch, replace_op':48s}       {1e3 * (total - sum(map(sum, seconds.values()))):8.1f} ms")
    print(f"ops in the module: {before} imported, {after} after {PASS_ARGUMENT}, {op_count(module)} after the torch stage")


def profile_plugin(model: onnx.ModelProto, top: int) -> None:
    """cProfile of apply_lowerings (the plugin pass body) on one imported module."""
    module = import_onnx(model, make_context())
    profiler = cProfile.Profile()
    with module.context:
        profiler.runcall(apply_lowerings, module.operation)
    stats = pstats.Stats(profiler).strip_dirs()
    print(f"\ncProfile of {PASS_ARGUMENT} (apply_lowerings), by total time:")
    stats.sort_stats("tottime").print_stats(top)
    print("by cumulative time:")
    stats.sort_stats("cumulative").print_stats(top)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--model", default="tiny-mistral", choices=model_names(), help="2-layer source decoder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-backend", dest="backend", action="store_false",
                        help="skip torch-mlir's torch-backend stage (~10 s at 32 layers)")
    parser.add_argument("--timing", action="store_true", help="MLIR per-pass timing at the largest N")
    parser.add_argument("--breakdown", action="store_true", help="plugin time per lowering at the largest N")
    parser.add_argument("--profile", action="store_true", help="cProfile the plugin pass at the largest N")
    parser.add_argument("--top", type=int, default=25, help="rows of the cProfile report")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # torch-mlir's importer warns of the builder's unnamed optional outputs (untyped): the same for every N
    warnings.filterwarnings("ignore", message="Found a node without a valid type proto")
    source = load_model(model_path(args.model))
    head_size = Decoder(model_path(args.model).parent).head_size
    time_once(with_layers(source, 1), args.backend)  # warm-up: first import, pass registration, dialect loading
    results: Dict[int, Dict[str, float]] = {}
    print(f"{args.model}: ONNX -> torch, ms, median of {args.repeats}")
    print(header(args.backend))
    for layers in sorted(set(args.layers)):
        model = with_layers(source, layers)
        check_model(model, head_size)
        results[layers] = time_median(model, args.repeats, args.backend)
        print(row(layers, count_lowered(model), results[layers]), flush=True)
    print(growth_line(results))
    largest = max(results)
    print(verdict(largest, results[largest]))
    if args.timing:
        mlir_timing(with_layers(source, largest))
    if args.breakdown:
        breakdown(with_layers(source, largest))
    if args.profile:
        profile_plugin(with_layers(source, largest), args.top)


if __name__ == "__main__":
    main()
