"""A whole decoder's decode step: the builder's tiny Mistral and Llama (or copies with more layers),
ours on iree-cpu as declared and with ``specialize`` (batch and sequence fixed to 1), against onnxruntime.

    .venv/bin/python benchmarks/model_step.py [--models mistral llama] [--layers 2 8] [--threads 1 2] [--repeats 15]
    .venv/bin/python benchmarks/model_step.py --decoder DIR     # a builder decoder of any size (make_decoder.py)
    .venv/bin/python benchmarks/model_step.py --runs specialized untiled   # weight tiling against none
    .venv/bin/python benchmarks/model_step.py --prompt 128 --runs "as declared" untiled   # the prompt instead

mistral is the embedded decoder (every layer a sliding-window layer with an
8-row cache), llama test/fixtures/decoders/llama-fp32 (growing caches); both
hidden size 64, 4/2 heads of 16.  One decode step after a prompt of 12
tokens, fed as numpy arrays through ``run``, the same feeds every call.  The runs (``--runs``,
by default as declared and specialized) measured alternately in one process with onnxruntime,
each round in a new random order:

  onnxruntime    ``InferenceSession.run``, CPU provider, intra-op threads as ours
  as declared    ``InferenceSession(..., backend="iree-cpu")``: batch and sequence
                 dynamic, each layer branching on B == 1 and S == 1 at run time
  specialized    the same with ``specialize={"batch_size": 1, "sequence_length": 1}``
                 (specialize.py): the step runs the copy compiled with both fixed
  untiled        specialized, with ``weight_tiling=False`` (the weight matmuls not
                 data-tiled: backends/iree/weight_tiling.py)
  dequantized    specialized, with the lowering option ``matmul_nbits=dequantize``
                 (an int4 decoder's MatMulNBits by the f32 weight, not kernels/nbits_matmul.py)
  f32 kernel     specialized, with ``matmul_nbits=kernel``: an int4 decoder at accuracy_level 4
                 multiplied in f32 by kernels/nbits_matmul.py, not in int8 by
                 kernels/nbits_matmul_vnni.py (``vnni``, iree-cpu's default on a host with
                 AVX-512 VNNI); ``f32 kernel, declared`` the same as declared (for --prompt)

``--prompt N`` times the first call instead, a prompt of N tokens (empty caches; the
general function: specialize does not apply).

Prints medians (µs) and ratios to onnxruntime, the outputs checked against
onnxruntime's first.  Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from compile_time import zero_feeds
from decode_step import cpu_model
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree.compiler import IreeCpuBackend
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir.testing.decoder import EMBEDDED_DECODER
from gqa_torch_mlir.testing.layers import with_layers

DECODE = {"batch_size": 1, "sequence_length": 1}
RUNS = {"as declared": {}, "specialized": {"specialize": DECODE}, "untiled": {"specialize": DECODE, "weight_tiling": False},
        "dequantized": {"specialize": DECODE, "matmul_nbits": "dequantize"},
        "f32 kernel": {"specialize": DECODE, "matmul_nbits": "kernel"}, "f32 kernel, declared": {"matmul_nbits": "kernel"}}
MODELS = {"mistral": EMBEDDED_DECODER / "model.onnx",
          "llama": Path(__file__).resolve().parents[1] / "test" / "fixtures" / "decoders" / "llama-fp32" / "model.onnx"}
PROMPT = 12
HEAD_SIZE = 16


def model_file(name: str, layers: int, workdir: Path) -> Path:
    """Decoder ``name`` (MODELS, 2 layers) with ``layers`` layers, saved as one ONNX file."""
    source = onnx.load(str(MODELS[name]))
    path = workdir / f"{name}-{layers}.onnx"
    onnx.save(source if layers == 2 else with_layers(source, layers), str(path))
    return path


def session(model, threads: int, matmul_nbits=None, **kwargs) -> InferenceSession:
    """Ours on iree-cpu with ``kwargs`` (``model``: a path or a ModelProto); ``matmul_nbits`` (a
    lowering option the session does not take) compiled through the backend with it, the rest of
    the options iree-cpu's."""
    model = model if isinstance(model, onnx.ModelProto) else str(model)
    if matmul_nbits is None:
        return InferenceSession(model, backend="iree-cpu", threads=threads, **kwargs)
    options = dataclasses.replace(LoweringOptions.for_backend("iree-cpu"), matmul_nbits=matmul_nbits)
    specs = [kwargs["specialize"]] if "specialize" in kwargs else []
    compiled = IreeCpuBackend(threads=threads, options=options).compile(model, specs)
    return InferenceSession.from_vmfb(model, compiled.vmfb, backend="iree-cpu", threads=threads, specialize=specs or None)


def step_feeds(path: Path, ref, head_size: int) -> dict:
    """The feeds of the decode step after a prompt of PROMPT tokens (its caches from onnxruntime)."""
    names = [o.name for o in ref.get_outputs()]
    graph = onnx.load(str(path), load_external_data=False)
    prefill = dict(zip(names, ref.run(None, zero_feeds(graph, head_size, PROMPT))))
    past = {n.replace("present", "past_key_values"): v for n, v in prefill.items() if n.startswith("present.")}
    return {"input_ids": np.array([[7]], np.int64), "attention_mask": np.ones((1, PROMPT + 1), np.int64), **past}


def median_us(run, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats * 1e6


def measure(path: Path, threads: int, rounds: int, inner: int, head_size: int = HEAD_SIZE, labels=("as declared", "specialized"),
            prompt: int = 0, atol: float = 1e-3) -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no spinning into the next runner's time
    ref = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = zero_feeds(onnx.load(str(path), load_external_data=False), head_size, prompt) if prompt else step_feeds(path, ref, head_size)
    expected = ref.run(None, feeds)
    runs = {"onnxruntime": lambda: ref.run(None, feeds)}
    for label in labels:
        sess = session(path, threads, **RUNS[label])
        got = sess.run(None, feeds)
        worst = max(float(np.abs(a - b).max()) for a, b in zip(got, expected))
        if worst > atol:
            raise SystemExit(f"{label}: outputs differ from onnxruntime's by {worst}")
        runs[label] = lambda sess=sess: sess.run(None, feeds)
    print_alternating(runs, rounds, inner)


def print_alternating(runs: dict, rounds: int, inner: int) -> None:
    """Time each of ``runs`` (label: call; one "onnxruntime") ``inner`` calls at a time, ``rounds``
    times in a new random order each; print their medians and ratios to onnxruntime's."""
    times = {k: [] for k in runs}
    for _ in range(rounds):
        order = list(runs)
        random.shuffle(order)
        for k in order:
            times[k].append(median_us(runs[k], inner))
    base = statistics.median(times["onnxruntime"])
    for k, t in times.items():
        m = statistics.median(t)
        print(f"  {k:12s} {m:8.1f} µs  {m / base:5.2f}x onnxruntime")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--layers", type=int, nargs="*", default=[2, 8])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=15, help="rounds; each times 50 calls of every run")
    parser.add_argument("--decoder", type=Path, help="a builder decoder directory instead (genai_config.json, model.onnx)")
    parser.add_argument("--inner", type=int, default=50, help="calls timed together in each round")
    parser.add_argument("--atol", type=float, default=1e-3,
                        help="largest difference from onnxruntime's outputs accepted (an int4 builder decoder's accuracy_level 4 "
                             "differs by ~1e-2: docs/limits.md)")
    parser.add_argument("--prompt", type=int, default=0, help="time a prompt of this many tokens instead of a decode step")
    parser.add_argument("--runs", nargs="+", choices=tuple(RUNS), default=["as declared", "specialized"], help="ours, beside onnxruntime")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}")
    what = f"a prompt of {args.prompt} tokens" if args.prompt else f"decode step after {PROMPT} tokens"
    if args.decoder is not None:
        config = json.loads((args.decoder / "genai_config.json").read_text())["model"]["decoder"]
        for threads in args.threads:
            print(f"{args.decoder.name} ({config['num_hidden_layers']} layers, {config['num_attention_heads']}/"
                  f"{config['num_key_value_heads']} heads of {config['head_size']}), {what}, {threads} thread(s):")
            measure(args.decoder / "model.onnx", threads, args.repeats, args.inner, config["head_size"], args.runs, args.prompt,
                    args.atol)
        return
    with tempfile.TemporaryDirectory() as workdir:
        for name, layers in ((n, k) for n in args.models for k in args.layers):
            path = model_file(name, layers, Path(workdir))
            for threads in args.threads:
                print(f"tiny {name}, {layers} layers, {what}, {threads} thread(s):")
                measure(path, threads, args.repeats, args.inner, labels=args.runs, prompt=args.prompt)


if __name__ == "__main__":
    main()
