"""``gqa-torch-mlir-opt``: torch-mlir-opt plus our passes (``--guard-onnx-indices``, ``--convert-onnx-gqa-to-torch``,
and the refbackend's ``--gqa-refbackend-*``).

Usage mirrors torch-mlir-opt::

    gqa-torch-mlir-opt [input.mlir|-] [-o out.mlir] [--split-input-file] [--verify-diagnostics]
                       [--<pass>[=<options>] ...] | [--pass-pipeline='builtin.module(...)']

Pass flags run in the order given, nested on func.func automatically when the
pass is anchored there (as mlir-opt does).  Our passes (passes.PYTHON_PASSES
and backends/refbackend/passes.py's REFBACKEND_PASSES) may appear as flags or
inside a ``--pass-pipeline`` string.  Errors go to stderr as
``file:line:col: error: ...`` with a non-zero exit; never a traceback.
``--verify-diagnostics`` checks the diagnostics against the input's
``expected-error {{...}}`` comments instead (verify.py).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import List, Optional

from ..backends.refbackend.passes import REFBACKEND_PASSES
from ..errors import GqaTorchMlirError
from ..options import LoweringOptions
from ..passes import PASS_ARGUMENT, PYTHON_PASSES
from .diagnostics import format_mlir_error
from .pipeline_text import TEXT, PipelineSyntaxError, flatten_pipeline
from .textio import read_text, write_text
from .verify import emitted, verify

SPLIT_MARKER = "// -----"
_ANCHOR_RE = re.compile(r"restricted to '([\w.]+)'")

USAGE = __doc__
_OUR_PASSES = {**PYTHON_PASSES, **REFBACKEND_PASSES}  # argument -> add(pm, options)


class UsageError(GqaTorchMlirError):
    pass


@dataclass
class Options:
    input: str = "-"
    output: Optional[str] = None
    split_input_file: bool = False
    pipeline: List = field(default_factory=list)  # (our pass's argument, options) | (TEXT, element)
    pass_pipeline: Optional[str] = None
    print_debuginfo: bool = False
    print_ir_after_all: bool = False
    disable_threading: bool = False
    allow_unregistered: bool = False
    print_local_scope: bool = False
    verify_diagnostics: bool = False


_FLAGS = {
    "split-input-file": "split_input_file",
    "mlir-print-debuginfo": "print_debuginfo",
    "mlir-print-ir-after-all": "print_ir_after_all",
    "mlir-disable-threading": "disable_threading",
    "allow-unregistered-dialect": "allow_unregistered",
    "mlir-print-local-scope": "print_local_scope",
    "verify-diagnostics": "verify_diagnostics",
}


def parse_args(argv: List[str]) -> Options:
    opts, inputs, i = Options(), [], 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "-" or not arg.startswith("-"):
            inputs.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name in ("h", "help"):
            print(USAGE)
            sys.exit(0)
        if name == "o":
            opts.output = value if eq else _next(argv, i, arg)
            i += 0 if eq else 1
        elif name == "pass-pipeline":
            opts.pass_pipeline = value if eq else _next(argv, i, arg)
            i += 0 if eq else 1
        elif name in _FLAGS:
            setattr(opts, _FLAGS[name], True)
        else:  # a pass flag: --name or --name=options
            opts.pipeline.append((name, value) if name in _OUR_PASSES else (TEXT, f"{name}{{{value}}}" if eq else name))
    if len(inputs) > 1:
        raise UsageError(f"expected one input file, got {len(inputs)}: {' '.join(inputs)}")
    if opts.pass_pipeline is not None and opts.pipeline:
        raise UsageError("--pass-pipeline cannot be combined with individual pass flags")
    if opts.pass_pipeline is not None:
        try:
            opts.pipeline = flatten_pipeline(opts.pass_pipeline, _OUR_PASSES)
        except PipelineSyntaxError as e:
            raise UsageError(f"invalid --pass-pipeline: {e}") from None
    opts.input = inputs[0] if inputs else "-"
    return opts


def _next(argv: List[str], i: int, flag: str) -> str:
    if i >= len(argv):
        raise UsageError(f"{flag} expects a value")
    return argv[i]


def build_pass_manager(opts: Options, context):
    """A module-anchored PassManager holding the pipeline in order."""
    from torch_mlir.passmanager import PassManager

    pm = PassManager("builtin.module", context)
    for kind, text in opts.pipeline:
        if kind == TEXT:
            _add_text(pm, text)
        elif kind == PASS_ARGUMENT:
            _OUR_PASSES[kind](pm, LoweringOptions.parse(_our_options(text)))
        elif _our_options(text):
            raise UsageError(f"{kind} takes no options, got '{_our_options(text)}'")
        else:
            _OUR_PASSES[kind](pm, None)
    if opts.print_ir_after_all:
        pm.enable_ir_printing()
    return pm


def _our_options(text: str) -> str:
    """``{a=b}`` or ``a=b`` -> ``a=b``."""
    text = text.strip()
    if text.count("{") != text.count("}"):
        raise UsageError(f"unbalanced '{{' or '}}' in the options of {PASS_ARGUMENT}: '{text}'")
    while text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    return text


def _add_text(pm, text: str) -> None:
    """Add a textual element, nesting it under its anchor op when the pass has one."""
    try:
        pm.add(text)
    except ValueError as e:
        anchor = _ANCHOR_RE.search(str(e))
        if not anchor:
            raise UsageError(f"'{text}' is not a pass or pipeline known to torch-mlir-opt: {_first_line(e)}") from None
        pm.add(f"{anchor.group(1)}({text})")


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def split_chunks(text: str, split: bool) -> List[str]:
    """Chunks padded with blank lines so locations keep the file's line numbers."""
    if not split:
        return [text]
    chunks, line = [], 0
    for part in re.split(r"^// -----.*$\n?", text, flags=re.M):
        chunks.append("\n" * line + part)
        line += part.count("\n") + 1
    return chunks


def process_chunk(asm: str, opts: Options, filename: str):
    """Parse, run the pipeline; return (printed module or None, error text or None).

    With ``--verify-diagnostics`` the error text is the verifier's report of
    mismatches (None when the diagnostics are the expected ones).
    """
    from torch_mlir import ir

    from ..context import make_context

    context = make_context()
    context.allow_unregistered_dialects = opts.allow_unregistered
    if opts.disable_threading:
        context.enable_multithreading(False)
    seen = []
    with context:
        handler = context.attach_diagnostic_handler(lambda d: seen.extend(emitted(d)) or True) if opts.verify_diagnostics else None
        try:
            module = ir.Module.parse(asm, context)
            build_pass_manager(opts, context).run(module.operation)
            printed = module.operation.get_asm(
                enable_debug_info=opts.print_debuginfo, use_local_scope=opts.print_local_scope
            )
        except ir.MLIRError as e:
            if not opts.verify_diagnostics:
                return None, format_mlir_error(e, filename)
            printed = None
            for d in getattr(e, "error_diagnostics", []) or []:
                seen.extend(emitted(d))
        finally:
            if handler is not None:
                handler.detach()
    if opts.verify_diagnostics:
        problems = verify(asm, seen, filename)
        return printed, "\n".join(problems) or None
    return printed, None


def run(argv: List[str]) -> int:
    opts = parse_args(argv)
    filename = "<stdin>" if opts.input == "-" else opts.input
    outputs, failed = [], False
    for chunk in split_chunks(read_text(opts.input), opts.split_input_file):
        printed, error = process_chunk(chunk, opts, filename)
        if error:
            print(error, file=sys.stderr)
            failed = True
        if printed is not None and not error:
            outputs.append(printed)
    text = f"\n{SPLIT_MARKER}\n".join(outputs)
    write_text(opts.output or "-", text)
    return 1 if failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except GqaTorchMlirError as e:
        print(f"gqa-torch-mlir-opt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug of ours: one line, not a traceback
        print(f"gqa-torch-mlir-opt: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
