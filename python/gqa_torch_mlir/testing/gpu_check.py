"""The iree-cuda backend on a real GPU, against onnxruntime's CPU results: a run in two steps, on two hosts.

    # 1. a host with iree-base-compiler (no GPU needed): compile every case for CUDA,
    #    with its feeds and onnxruntime's outputs (the oracle, run here)
    python -m gqa_torch_mlir.testing.gpu_check prepare DIR [--quick]

    # 2. a host with a CUDA driver and iree-base-runtime (no compiler, no torch-mlir):
    #    the repository's python/ on PYTHONPATH, numpy and onnx installed
    python -m gqa_torch_mlir.testing.gpu_check run DIR [--json RESULTS.json]

(``prepare --backend iree-cpu`` makes the same run on this host's CPU: how the
test suite checks this script without a GPU.)

The cases: the GroupQueryAttention matrix's all-pairs subset and the held-out
draw (testing/gqa_matrix.py), in the sdpa form (iree-cuda refuses the
decomposed one; on iree-cpu both forms run), and the model
builder's decoders (test/fixtures/decoders: a prompt and decode steps with the
cache fed back, growing and in 128-row shared buffers; on iree-cuda shared
buffers only, and a case whose feeds hold an empty tensor must be refused by
name: IREE 3.13's CUDA runtime fails on zero-size buffers).  ``run`` compares as
the CPU tests do (gqa_onnx.compare: f16 within 2e-2, f32 within 1e-4; decoder
logits within the precision's tolerance, greedy tokens identical) and exits
non-zero when any case differs or fails.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

FIXTURES = Path(__file__).resolve().parents[3] / "test" / "fixtures" / "decoders"
DECODER_TOLERANCE = {"fp32": 2e-4, "int4": 2e-2, "fp16": 6e-2}  # as test_decoders.py
SHORT_PROMPT, LONG_PROMPT = [5, 17, 42, 99, 150], [5, 17, 42, 99, 150, 7, 8, 9, 10, 11, 12, 13]
SHARED_CAPACITY = 128
FORMS = {"iree-cuda": ("sdpa",), "iree-cpu": ("sdpa", "decomposed")}
# IREE 3.13's CUDA runtime fails on zero-size buffers: InferenceSession names the input instead (docs/gpu.md).
EMPTY_ON_CUDA = "has no elements"
# Decoder cache modes: growing (0: an empty past at the prompt) and 128-row shared buffers.
CACHE_MODES = {"iree-cuda": (SHARED_CAPACITY,), "iree-cpu": (0, SHARED_CAPACITY)}


@dataclass
class Case:
    id: str
    kind: str  # "gqa" | "decoder"
    model: str  # the ONNX file the vmfb was compiled from (its I/O names the arguments)
    vmfb: str
    data: str  # pickled feeds and onnxruntime's outputs (a decoder's: tokens and logits per step)
    detail: str = ""
    backend: str = "iree-cuda"
    refused: str = ""  # a known limit: the run must fail with this in its message (EMPTY_ON_CUDA)


# -- prepare (compiler host) ---------------------------------------------------------------


def prepare(directory: Path, quick: bool = False, backend: str = "iree-cuda", limit: Optional[int] = None) -> List[Case]:
    from .gqa_matrix import held_out_configs, matrix_configs, pairwise_subset

    directory.mkdir(parents=True, exist_ok=True)
    configs = (pairwise_subset(matrix_configs()) + ([] if quick else held_out_configs()))[:limit]
    cases = [_prepare_gqa(directory, cfg, form, seed, backend) for seed, cfg in enumerate(configs) for form in FORMS[backend]]
    names = sorted(p.name for p in FIXTURES.iterdir() if (p / "model.onnx").is_file()) if FIXTURES.is_dir() else []
    names = [n for n in names if n != "qwen3-fp16"]  # onnxruntime's CPU provider refuses it too (test_decoders.py)
    for name in (names[:3] if quick else names)[:limit]:
        cases.append(_prepare_decoder(directory, name, backend))
    (directory / "cases.json").write_text(json.dumps([c.__dict__ for c in cases], indent=1))
    return cases


def _compile(model, path: Path, form: str, target: str) -> None:
    from ..backends.iree import IreeBackend
    from ..options import LoweringOptions

    backend = IreeBackend(target=target, options=LoweringOptions(attention=form, device="gpu" if target == "iree-cuda" else "cpu"))
    path.write_bytes(backend.compile_lowered(backend.lower(model)))


def _prepare_gqa(directory: Path, cfg, form: str, seed: int, backend: str) -> Case:
    import onnx

    from .gqa_onnx import make_inputs, make_model, run_onnxruntime

    id = f"{cfg.name}-{form}"
    model = make_model(cfg)
    feeds = make_inputs(cfg, seed=seed)
    want = run_onnxruntime(model, feeds)
    onnx.save(model, str(directory / f"{id}.onnx"))
    _compile(model, directory / f"{id}.vmfb", form, backend)
    with open(directory / f"{id}.pkl", "wb") as f:
        pickle.dump({"cfg": cfg, "feeds": feeds, "want": want}, f)
    empty = backend == "iree-cuda" and any(0 in np.shape(v) for v in feeds.values())
    return Case(id, "gqa", f"{id}.onnx", f"{id}.vmfb", f"{id}.pkl", cfg.name, backend, EMPTY_ON_CUDA if empty else "")


def _prepare_decoder(directory: Path, name: str, backend: str) -> Case:
    from .decoder import Decoder

    decoder = Decoder(FIXTURES / name)
    runs = {}
    for capacity in CACHE_MODES[backend]:
        tokens, logits, _ = decoder.generate(_onnxruntime_runner(decoder.path), *_plan(decoder), shared_capacity=capacity)
        runs[capacity] = (tokens, logits)
    _compile(str(decoder.path), directory / f"{name}.vmfb", "sdpa", backend)
    with open(directory / f"{name}.pkl", "wb") as f:
        pickle.dump(runs, f)
    model = str(decoder.path.relative_to(FIXTURES.parents[2]))
    return Case(name, "decoder", model, f"{name}.vmfb", f"{name}.pkl", name.rsplit("-", 1)[1], backend)


def _plan(decoder):
    """(prompt, steps) as test_decoders.py: a prompt longer than the window where there is one."""
    return (LONG_PROMPT, 8) if decoder.window > 0 else (SHORT_PROMPT, 3)


def _onnxruntime_runner(path) -> Callable:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names, inputs = [o.name for o in sess.get_outputs()], {i.name for i in sess.get_inputs()}
    return lambda feeds: dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in inputs})))


# -- run (GPU host) ----------------------------------------------------------------------------


def run(directory: Path, repo: Path) -> List[dict]:
    """Every case, each in a process of its own: a GPU error (sticky in a CUDA context) or a crash
    fails that case only."""
    results = []
    for case in json.loads((directory / "cases.json").read_text()):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "gqa_torch_mlir.testing.gpu_check", "one", str(directory), case["id"], "--repo", str(repo)],
                              capture_output=True, text=True, timeout=600)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode == 0 and lines:
            problems = json.loads(lines[-1])["problems"]
        else:
            problems = [f"the case's process ended with status {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"]
        results.append({"id": case["id"], "kind": case["kind"], "ok": not problems, "problems": problems[:3],
                        "seconds": round(time.perf_counter() - start, 2)})
        print(f"{'ok  ' if not problems else 'FAIL'} {case['id']}" + (f": {problems[0]}" if problems else ""), flush=True)
    return results


def run_one(directory: Path, id: str, repo: Path) -> List[str]:
    case = next(Case(**c) for c in json.loads((directory / "cases.json").read_text()) if c["id"] == id)
    try:
        return (_run_gqa if case.kind == "gqa" else _run_decoder)(case, directory, repo)
    except Exception as e:  # a failing case is a result
        text = str(e).strip()
        return [f"{type(e).__name__}: {' '.join(text.splitlines()[:2])[:400]}"]


def _session(case: Case, directory: Path, model_root: Path):
    from ..session import InferenceSession

    return InferenceSession.from_vmfb(str(model_root / case.model), (directory / case.vmfb).read_bytes(), backend=case.backend)


def _run_gqa(case: Case, directory: Path, repo: Path) -> List[str]:
    from .gqa_onnx import compare

    from ..errors import RuntimeInvocationError

    with open(directory / case.data, "rb") as f:
        data = pickle.load(f)
    sess = _session(case, directory, directory)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    try:
        got = dict(zip(names, sess.run(names, {k: v for k, v in data["feeds"].items() if k in wanted})))
    except RuntimeInvocationError as e:
        if case.refused and case.refused in str(e):
            return []  # the known limit, named
        raise
    if case.refused:
        return [f"expected the refusal '{case.refused}', but the run succeeded"]
    return compare(data["cfg"], got, data["want"], data["feeds"])


def _run_decoder(case: Case, directory: Path, repo: Path) -> List[str]:
    from .decoder import Decoder

    with open(directory / case.data, "rb") as f:
        runs = pickle.load(f)
    decoder = Decoder(repo / Path(case.model).parent)
    sess = _session(case, directory, repo)
    names = [o.name for o in sess.get_outputs()]
    problems = []
    for capacity, (tokens, want_logits) in runs.items():
        _, logits, _ = decoder.generate(lambda feeds: dict(zip(names, sess.run(names, feeds))), *_plan(decoder), tokens=tokens,
                                        shared_capacity=capacity)
        for step, (ours, ref) in enumerate(zip(logits, want_logits)):
            diff = float(np.abs(ours.astype(np.float32) - ref.astype(np.float32)).max())
            if diff > DECODER_TOLERANCE[case.detail]:
                problems.append(f"cache {capacity or 'growing'} step {step}: logits differ by {diff:.3g}")
            elif int(np.argmax(ours[0, -1])) != tokens[step]:
                problems.append(f"cache {capacity or 'growing'} step {step}: greedy token differs")
    return problems


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gqa_torch_mlir.testing.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="compile the cases for iree-cuda, with feeds and onnxruntime's outputs")
    p.add_argument("directory", type=Path)
    p.add_argument("--quick", action="store_true", help="the all-pairs matrix and three decoders only")
    p.add_argument("--backend", default="iree-cuda", choices=("iree-cuda", "iree-cpu"), help="iree-cpu: the same run on this CPU")
    p.add_argument("--limit", type=int, help="at most this many GQA configurations and decoders")
    r = sub.add_parser("run", help="run the prepared cases on the CUDA driver's GPU and compare")
    r.add_argument("directory", type=Path)
    r.add_argument("--json", type=Path, help="write the results here")
    o = sub.add_parser("one", help="one prepared case (run starts one process per case)")
    o.add_argument("directory", type=Path)
    o.add_argument("id")
    o.add_argument("--repo", type=Path, default=FIXTURES.parents[2])
    args = parser.parse_args(argv)
    if args.command == "one":
        print(json.dumps({"id": args.id, "problems": run_one(args.directory, args.id, args.repo)}))
        return 0
    if args.command == "prepare":
        cases = prepare(args.directory, args.quick, args.backend, args.limit)
        print(f"prepared {len(cases)} cases in {args.directory}")
        return 0
    results = run(args.directory, FIXTURES.parents[2])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    failed = [r["id"] for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)}/{len(results)} cases match onnxruntime" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
