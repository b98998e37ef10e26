"""``gqa-torch-mlir``: the user-facing command.

  gqa-torch-mlir generate [options] greedy generation with an embedded tiny decoder
                                    (onnxruntime-genai builder graph) on the refbackend,
                                    next to onnxruntime
  gqa-torch-mlir demo [options]     build a small GQA model in code, compile it with
                                    the plugin, run prefill + decode steps on the
                                    refbackend next to onnxruntime, print the comparison
  gqa-torch-mlir compile MODEL.onnx [--output-type T] [-o OUT.mlir]
                                    import and lower with the plugin, print the MLIR
  gqa-torch-mlir compile MODEL.onnx --backend iree-cpu|iree-cuda -o OUT.vmfb
                                    compile for IREE (no GPU needed for iree-cuda); the
                                    .vmfb runs with iree-base-runtime alone

User errors print one line and exit non-zero; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ..errors import GqaTorchMlirError
from ..backends.iree.targets import TARGETS as IREE_TARGETS
from ..options import ATTENTION_FORMS


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="compile a small GQA model and compare it with onnxruntime")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=5, help="prefill length")
    p.add_argument("--steps", type=_non_negative, default=3, help="decode steps after the prefill")
    p.add_argument("--num-heads", type=int, default=8)
    p.add_argument("--kv-num-heads", type=int, default=2)
    p.add_argument("--head-size", type=int, default=32)
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--packed", action="store_true", help="packed QKV input (key/value slots empty)")
    p.add_argument("--no-rotary", action="store_true")
    p.add_argument("--seed", type=int, default=0)


def _generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="greedy generation with a tiny decoder, next to onnxruntime")
    p.add_argument("--model", help="an onnxruntime-genai builder output directory, or a decoder .onnx with the same I/O names "
                   "(PyTorch's exporter; the cache geometry is read from the graph) (default: the embedded tiny Mistral, sliding window 8)")
    p.add_argument("--steps", type=_non_negative, default=8, help="decode steps after the prefill")
    p.add_argument("--prompt", type=int, nargs="+", help="prompt token ids (at least one)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gqa-torch-mlir", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _generate_parser(sub)
    _demo_parser(sub)
    c = sub.add_parser("compile", help="import an ONNX model and lower it with the plugin (or compile it for IREE)")
    c.add_argument("model")
    c.add_argument("--output-type", choices=("torch", "torch-backend", "linalg-on-tensors"),
                   help="the MLIR to print (default: torch); not with --backend")
    c.add_argument("--backend", choices=tuple(IREE_TARGETS), help="compile for IREE to a VM flatbuffer (.vmfb) instead")
    c.add_argument("--attention", choices=ATTENTION_FORMS, help="the attention form (default: the backend's)")
    c.add_argument("--prefill-loop", choices=("off", "on"),
                   help="a causal prefill of run-time length in blocks of query rows, in a loop (default: on)")
    c.add_argument("--specialize", action="append", default=[], metavar="NAME=SIZE[,NAME=SIZE]",
                   help="with --backend: also compile the model with these symbolic input dims fixed, as a second entry "
                        "point (repeatable; e.g. batch_size=1,sequence_length=1 for decode steps)")
    c.add_argument("--weight-tiling", choices=("on", "off"),
                   help="with --backend iree-cpu: data-tile the matmuls against constant weights (default: on; "
                        "their packed copy is made when the module loads)")
    c.add_argument("-o", "--output", default="-")
    return parser


def cmd_compile(args) -> int:
    from ..options import LoweringOptions
    from ..pipeline import compile

    from .textio import write_text

    if args.backend is not None:
        return _compile_for_iree(args)
    if args.specialize:
        raise GqaTorchMlirError("--specialize is for an IREE module: add --backend iree-cpu or iree-cuda")
    if args.weight_tiling:
        raise GqaTorchMlirError("--weight-tiling is for an iree-cpu module: add --backend iree-cpu")
    options = LoweringOptions.for_backend("refbackend", args.attention, args.prefill_loop) if args.attention or args.prefill_loop else None
    module = compile(args.model, output_type=args.output_type or "torch", options=options)
    write_text(args.output, str(module))
    return 0


def _compile_for_iree(args) -> int:
    if args.output_type is not None:
        raise GqaTorchMlirError(f"--output-type is for the MLIR output; --backend {args.backend} writes a .vmfb")
    if args.output == "-":
        raise GqaTorchMlirError(f"--backend {args.backend} writes a binary .vmfb: name the file with -o")
    try:
        from ..backends.iree import IreeBackend
    except ImportError as e:
        raise GqaTorchMlirError(f"--backend {args.backend} needs IREE's compiler ({e}): pip install 'gqa-torch-mlir[iree]'") from None
    from ..options import LoweringOptions
    from ..pipeline import load_model
    from ..specialize import checked, parse

    model = load_model(args.model)
    specs = checked(model, [parse(text) for text in args.specialize])
    tiling = None if args.weight_tiling is None else args.weight_tiling == "on"
    backend = IreeBackend(target=args.backend, options=LoweringOptions.for_backend(args.backend, args.attention, args.prefill_loop),
                          weight_tiling=tiling)
    lowered = backend.lower(model, specs)
    entries = ", ".join([f"@{lowered.function}"] + [f"@{name} ({', '.join(f'{k}={v}' for k, v in sizes.items())})"
                                                     for name, sizes in lowered.specialized])
    vmfb = backend.compile_lowered(lowered)
    try:
        with open(args.output, "wb") as f:
            f.write(vmfb)
    except OSError as e:
        raise GqaTorchMlirError(f"cannot write '{args.output}': {e.strerror}") from None
    print(f"wrote {args.output} ({len(vmfb)} bytes) for {args.backend}; entry point{'s' if lowered.specialized else ''} {entries}", file=sys.stderr)
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return 0 if run_demo(args, print_fn=print) else 1


def cmd_generate(args) -> int:
    from .demo import run_generate

    return 0 if run_generate(args, print_fn=print) else 1


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"compile": cmd_compile, "demo": cmd_demo, "generate": cmd_generate}[args.command](args)
    except GqaTorchMlirError as e:
        print(f"gqa-torch-mlir: error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # bad option combinations reported by the config checks
        print(f"gqa-torch-mlir: error: {e}", file=sys.stderr)
        return 2
    except MemoryError as e:  # a demo or prompt sized past this machine's memory (numpy's message says how much)
        print(f"gqa-torch-mlir: error: out of memory: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
