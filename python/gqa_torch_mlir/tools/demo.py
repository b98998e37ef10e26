"""The ``demo`` and ``generate`` commands of ``gqa-torch-mlir``, each next to onnxruntime.

``generate`` (the quick start's main job) compiles a model-builder decoder and
decodes greedily, comparing tokens and logits; ``demo`` runs one GQA layer
built in code step by step (prefill, then decode with the cache fed back).
Both print set-up times apart from run calls timed alike in one process.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List

import numpy as np

from ..session import InferenceSession
from ..testing.gqa_onnx import GQAConfig, compare, make_model, rotary_caches


def demo_config(args) -> GQAConfig:
    """The model's config: dynamic batch/sequence/past so one compile serves every step."""
    total = args.prompt + args.steps
    return GQAConfig(
        batch=args.batch,
        seq=args.prompt,
        past=0,
        num_heads=args.num_heads,
        kv_num_heads=args.kv_num_heads,
        head_size=args.head_size,
        packed=args.packed,
        rotary=not args.no_rotary,
        rotary_cache_len=total + 8,
        dtype=args.dtype,
        dynamic=True,
    )


def step_feeds(cfg: GQAConfig, rng: np.random.Generator, S: int, past_key, past_value) -> Dict[str, np.ndarray]:
    """Feeds for one step of S new tokens on top of a full past of P rows."""
    B, P = cfg.batch, past_key.shape[2]
    def rand(*shape):
        return rng.standard_normal(shape).astype(cfg.np_dtype)

    feeds = {"past_key": past_key, "past_value": past_value}
    if cfg.packed:
        feeds["query"] = rand(B, S, (cfg.num_heads + 2 * cfg.kv_num_heads) * cfg.head_size)
    else:
        feeds["query"] = rand(B, S, cfg.num_heads * cfg.head_size)
        feeds["key"] = rand(B, S, cfg.kv_num_heads * cfg.head_size)
        feeds["value"] = rand(B, S, cfg.kv_num_heads * cfg.head_size)
    feeds["seqlens_k"] = np.full((B,), P + S - 1, dtype=np.int32)
    feeds["total_sequence_length"] = np.array(P + S, dtype=np.int32)
    if cfg.rotary:
        feeds["cos_cache"], feeds["sin_cache"] = rotary_caches(cfg)
    return feeds


class CallTimes:
    """``fn`` wrapped to record the wall time of each call (all in this process)."""

    def __init__(self, fn) -> None:
        self.fn, self.seconds = fn, []

    def __call__(self, *args):
        t = time.perf_counter()
        result = self.fn(*args)
        self.seconds.append(time.perf_counter() - t)
        return result


def timing_lines(ours_name: str, setup: Dict[str, float], ours: CallTimes, theirs: CallTimes, what: str = "token") -> List[str]:
    """Like-for-like figures: set-up apart (compile; onnxruntime session creation), then the
    prompt call and the median decode call, each a run call alone on the same feeds."""
    from ..testing.gqa_onnx import ORACLE_SETTINGS

    ms = lambda seconds: f"{1e3 * seconds:.2f} ms"  # noqa: E731
    lines = ["set-up: " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in setup.items())]
    lines.append(f"prompt call: {ours_name} {ms(ours.seconds[0])}, onnxruntime {ms(theirs.seconds[0])}")
    if len(ours.seconds) > 1:
        lines.append(f"decode, median per {what}: {ours_name} {ms(float(np.median(ours.seconds[1:])))}, "
                     f"onnxruntime {ms(float(np.median(theirs.seconds[1:])))} ({len(ours.seconds) - 1} steps; {ORACLE_SETTINGS})")
    return lines


def run_demo(args, print_fn: Callable[[str], None] = print) -> bool:
    """Run the demo; True when every step matches onnxruntime."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        from ..errors import GqaTorchMlirError

        raise GqaTorchMlirError("the demo compares with onnxruntime: pip install 'gqa-torch-mlir[test]'") from None
    from ..testing.gqa_onnx import OnnxruntimeOracle

    cfg = demo_config(args)
    model = make_model(cfg)
    print_fn(
        f"GroupQueryAttention: batch {cfg.batch}, {cfg.num_heads} query heads, {cfg.kv_num_heads} kv heads, "
        f"head size {cfg.head_size}, {cfg.dtype}, {'packed QKV' if cfg.packed else 'separate Q/K/V'}, "
        f"rotary {'on' if cfg.rotary else 'off'}; dynamic batch/sequence/past"
    )
    rng = np.random.default_rng(args.seed)
    empty = np.zeros((cfg.batch, cfg.kv_num_heads, 0, cfg.head_size), dtype=cfg.np_dtype)
    ours_cache, ort_cache = (empty, empty), (empty, empty)
    prompt_feeds = step_feeds(cfg, rng, args.prompt, *ours_cache)  # before compiling: sizes past memory fail at once
    t0 = time.perf_counter()
    session = InferenceSession(model)
    setup = {"refbackend compile": time.perf_counter() - t0}
    print_fn(f"compiled with convert-onnx-gqa-to-torch -> torch-mlir -> refbackend in {setup['refbackend compile']:.2f} s")
    t0 = time.perf_counter()
    oracle = OnnxruntimeOracle(model)
    setup["onnxruntime session"] = time.perf_counter() - t0
    names = [o.name for o in session.get_outputs()]
    ours, theirs = CallTimes(lambda feeds: dict(zip(names, session.run(None, feeds)))), CallTimes(oracle.run)
    all_ok = True
    print_fn(f"{'step':>4} {'S':>3} {'past':>5}  {'max|out diff|':>13}  {'max|cache diff|':>15}  result")
    for step in range(args.steps + 1):
        S = args.prompt if step == 0 else 1
        feeds = prompt_feeds if step == 0 else step_feeds(cfg, rng, S, *ours_cache)
        ort_feeds = dict(feeds, past_key=ort_cache[0], past_value=ort_cache[1])
        got, want = ours(feeds), theirs(ort_feeds)
        problems = compare(_step_cfg(cfg, S, feeds["past_key"].shape[2]), got, want, ort_feeds)
        all_ok &= not problems
        print_fn(
            f"{step:>4} {S:>3} {feeds['past_key'].shape[2]:>5}  {_maxdiff(got, want, 'output'):>13.2e}  "
            f"{max(_maxdiff(got, want, n) for n in ('present_key', 'present_value')):>15.2e}  "
            f"{'match' if not problems else 'MISMATCH: ' + '; '.join(problems)}"
        )
        ours_cache = (got["present_key"], got["present_value"])
        ort_cache = (want["present_key"], want["present_value"])
    for line in timing_lines("refbackend", setup, ours, theirs, what="step"):
        print_fn(line)
    print_fn("RESULT: " + ("all steps match onnxruntime" if all_ok else "MISMATCH against onnxruntime"))
    return all_ok


def _step_cfg(cfg: GQAConfig, S: int, P: int) -> GQAConfig:
    """The config describing one step (compare() reads dtype and lengths from it)."""
    from dataclasses import replace

    return replace(cfg, seq=S, past=P, past_lens=None, rotary_cache_len=cfg.max_seq)


def _maxdiff(got, want, name) -> float:
    g, w = np.asarray(got[name], np.float32), np.asarray(want[name], np.float32)
    if g.shape != w.shape:
        return float("inf")
    return float(np.max(np.abs(g - w))) if g.size else 0.0


DEFAULT_PROMPT = [5, 17, 42, 99, 150, 7, 8, 9, 10, 11, 12, 13]  # longer than the embedded model's window (8)


def run_generate(args, print_fn: Callable[[str], None] = print) -> bool:
    """Greedy generation with a builder decoder on the refbackend next to onnxruntime; True when the tokens agree."""
    import sys

    from ..backends.refbackend import RefBackend
    from ..errors import GqaTorchMlirError
    from ..pipeline import compile as compile_model
    from ..pipeline import load_model
    from ..session import main_function_name
    from ..testing.decoder import EMBEDDED_DECODER, Decoder
    from ..testing.gqa_onnx import OnnxruntimeOracle

    directory = args.model or EMBEDDED_DECODER
    decoder = Decoder(directory)
    prompt = DEFAULT_PROMPT if args.prompt is None else args.prompt
    decoder.check_tokens(prompt, args.steps)  # before the compile, not after it
    proto = load_model(decoder.path)
    print_fn(f"decoder: {directory} ({decoder.layers} layers, {decoder.kv_heads} kv heads, head size {decoder.head_size}, window {decoder.window})")
    t0 = time.perf_counter()
    stages = []

    def progress(stage):
        stages.append(stage)
        print(f"  compiling: {stage} ...", file=sys.stderr, flush=True)

    module = compile_model(proto, "linalg-on-tensors", progress=progress)
    progress("refbackend (LLVM JIT)")
    compiled, function = RefBackend().compile(module), main_function_name(module)
    setup = {"refbackend compile": time.perf_counter() - t0}
    print_fn(f"compiled with convert-onnx-gqa-to-torch through torch-mlir to the refbackend in {setup['refbackend compile']:.2f} s")
    t0 = time.perf_counter()
    try:
        oracle = OnnxruntimeOracle(proto)
    except Exception as e:  # onnxruntime's own refusal of the model
        raise GqaTorchMlirError(f"onnxruntime cannot load '{decoder.path}': {str(e).strip()}") from None
    setup["onnxruntime session"] = time.perf_counter() - t0
    initializers = {i.name for i in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in initializers]
    outputs = [o.name for o in proto.graph.output]

    def run_oracle(feeds):
        try:
            return oracle.run(feeds)
        except Exception as e:  # onnxruntime's own refusal of a step
            raise GqaTorchMlirError(f"onnxruntime failed on a step of '{decoder.path}': {str(e).strip()}") from None

    ours = CallTimes(lambda feeds: dict(zip(outputs, compiled.invoke(function, *[feeds[n] for n in inputs]))))
    theirs = CallTimes(run_oracle)

    print_fn(f"prompt: {prompt}")
    ort_tokens, ort_logits, _ = decoder.generate(theirs, prompt, args.steps)
    our_tokens, our_logits, _ = decoder.generate(ours, prompt, args.steps, on_step=lambda i, tok, _: print_fn(f"  step {i}: token {tok}"))
    worst = max(float(np.max(np.abs(a.astype(np.float32) - b.astype(np.float32)))) for a, b in zip(our_logits, ort_logits))
    print_fn(f"tokens (refbackend):  {our_tokens}")
    print_fn(f"tokens (onnxruntime): {ort_tokens}")
    print_fn(f"largest logits difference: {worst:.2e}")
    for line in timing_lines("refbackend", setup, ours, theirs):
        print_fn(line)
    same = our_tokens == ort_tokens
    print_fn("RESULT: " + ("identical greedy tokens" if same else "tokens DIFFER from onnxruntime"))
    return same
