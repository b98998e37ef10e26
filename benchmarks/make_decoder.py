"""A random-weight decoder of a size you choose, built by onnxruntime-genai's model builder,
for benchmarks/model_step.py (the test fixtures are 64 wide and 2 layers deep).

Runs in the fixtures' generation venv (test/fixtures/generate_decoders.py says how to make it):

    /work/genvenv/bin/python benchmarks/make_decoder.py OUT [--arch llama] [--hidden 1024] [--layers 8]
        [--heads 16] [--kv-heads 4] [--intermediate 2816] [--vocab 32000] [--precision fp32]

It sets generate_decoders.py's sizes, builds the Hugging Face checkpoint in
code as that script does (nothing downloaded) and runs the builder for the
CPU; OUT then holds model.onnx, its external data and genai_config.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test" / "fixtures"))
import generate_decoders as g  # noqa: E402


def config(arch: str):
    """generate_decoders.configs()'s config of ``arch`` at the sizes set (that function builds every
    architecture's, and gemma2's names two layers)."""
    t, full = g.transformers, ["full_attention"] * g.LAYERS
    if arch == "llama":
        return t.LlamaConfig(**g.common(head_dim=g.HEAD_SIZE))
    if arch == "qwen2":
        return t.Qwen2Config(**g.common(use_sliding_window=False, layer_types=full))
    if arch == "qwen3":
        return t.Qwen3Config(**g.common(head_dim=g.HEAD_SIZE, use_sliding_window=False, layer_types=full))
    return t.Phi3Config(**g.common(sliding_window=None, original_max_position_embeddings=g.POSITIONS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--arch", default="llama", choices=("llama", "qwen2", "qwen3", "phi3"))
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--positions", type=int, default=4096)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "int4"))
    args = parser.parse_args()
    g.HIDDEN, g.LAYERS, g.HEADS, g.KV_HEADS = args.hidden, args.layers, args.heads, args.kv_heads
    g.HEAD_SIZE, g.INTERMEDIATE, g.VOCAB, g.POSITIONS = args.hidden // args.heads, args.intermediate, args.vocab, args.positions
    g.INIT_RANGE = 0.02  # the default range: 0.2 (the fixtures') saturates a wide model's softmax
    with tempfile.TemporaryDirectory(prefix="make_decoder_") as tmp:
        checkpoint, out = Path(tmp) / "hf", Path(tmp) / "out"
        g.make_checkpoint(args.arch, config(args.arch), checkpoint)
        ok, log = g.run_builder(checkpoint, out, args.precision, "cpu", Path(tmp) / "cache")
        if not ok:
            print(log.strip().splitlines()[-15:], file=sys.stderr)
            return 1
        g.copy_fixture(out, args.out)
    print(f"wrote {args.out}: {args.arch} {args.precision}, hidden {args.hidden}, {args.layers} layers, "
          f"{args.heads}/{args.kv_heads} heads, intermediate {args.intermediate}, vocab {args.vocab}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
