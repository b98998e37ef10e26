"""User errors through the CLIs and the Python API: one line of ours, never a traceback.

Each CLI case runs the installed command in a subprocess and checks a non-zero
exit, stderr led by the command's ``error:`` line naming what is wrong, and
no Python traceback.  Each API case checks that the exception is a
:class:`GqaTorchMlirError` (never a TypeError or ValueError from inside)
with the same kind of message.  All of them fail before anything compiles.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import gqa_torch_mlir
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError, RuntimeInvocationError
from gqa_torch_mlir.testing.decoder import EMBEDDED_DECODER
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

BIN = Path(sys.executable).parent
CONFIG = json.loads((EMBEDDED_DECODER / "genai_config.json").read_text())


def run_tool(*args: str, tool: str = "gqa-torch-mlir") -> subprocess.CompletedProcess:
    """The installed command in a subprocess (what a user runs; used once per tool)."""
    return subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, timeout=600)


def run_main(*args: str, tool: str = "gqa-torch-mlir") -> subprocess.CompletedProcess:
    """The command's ``main`` in this process (no interpreter start): an exception escaping
    it would fail the test; argparse's usage errors exit as they do from the shell."""
    import contextlib
    import io

    from gqa_torch_mlir.tools import cli, opt

    main = {"gqa-torch-mlir": cli.main, "gqa-torch-mlir-opt": opt.main}[tool]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse
            code = e.code
    return subprocess.CompletedProcess([tool, *args], code, out.getvalue(), err.getvalue())


def assert_one_line_error(run: subprocess.CompletedProcess, lead: str, *expect: str) -> None:
    out = f"exit {run.returncode}\nstdout:\n{run.stdout[-1500:]}\nstderr:\n{run.stderr[-1500:]}"
    assert run.returncode > 0, out
    assert "Traceback" not in run.stdout + run.stderr, out
    lines = [l for l in run.stderr.splitlines() if not l.startswith("usage:") and not l.startswith(" ")]
    assert lines and lines[-1].startswith(lead), out
    for e in expect:
        assert e in run.stderr, f"{e!r} missing:\n{out}"


# -- gqa-torch-mlir generate --model DIR: directories that are not builder outputs ---------------


def _decoder_dir(tmp_path: Path, edit_config=None, drop=()) -> Path:
    """A copy of the embedded decoder directory, its config edited, some files dropped."""
    d = tmp_path / "decoder"
    shutil.copytree(EMBEDDED_DECODER, d)
    for name in drop:
        (d / name).unlink()
    if edit_config is not None:
        config = json.loads(json.dumps(CONFIG))
        text = edit_config(config)
        (d / "genai_config.json").write_text(text if isinstance(text, str) else json.dumps(config))
    return d


def _set_decoder(key, value):
    def edit(config):
        config["model"]["decoder"][key] = value

    return edit


def _del_decoder(key):
    def edit(config):
        del config["model"]["decoder"][key]

    return edit


BAD_DIRECTORIES = {
    "not_a_directory": (lambda p: p / "nothing", ["is not a directory"]),
    "no_config": (lambda p: _decoder_dir(p, drop=["genai_config.json"]), ["genai_config.json"]),
    "broken_config": (lambda p: _decoder_dir(p, lambda c: '{"model": '), ["cannot read", "genai_config.json"]),
    "config_a_list": (lambda p: _decoder_dir(p, lambda c: "[1, 2]"), ['no "model" object']),
    "config_without_layers": (lambda p: _decoder_dir(p, _del_decoder("num_hidden_layers")), ["decoder.num_hidden_layers"]),
    "model_file_missing": (lambda p: _decoder_dir(p, drop=["model.onnx"]), ["no ONNX model at", "decoder.filename"]),
    "external_data_missing": (lambda p: _decoder_dir(p, drop=["model.onnx.data"]), ["cannot load ONNX model", "model.onnx.data"]),
    "config_names_another_file": (lambda p: _decoder_dir(p, _set_decoder("filename", "decoder.onnx")), ["no ONNX model at", "decoder.onnx"]),
    "config_more_layers": (lambda p: _decoder_dir(p, _set_decoder("num_hidden_layers", 3)), ["decoder of 3 layers", "past_key_values.2.key"]),
    "config_fewer_layers": (lambda p: _decoder_dir(p, _set_decoder("num_hidden_layers", 1)), ["more layers than", "past_key_values.1.key"]),
    "config_kv_heads_wrong": (lambda p: _decoder_dir(p, _set_decoder("num_key_value_heads", 4)), ["decoder.num_key_value_heads is 4"]),
    # a TypeError traceback once
    "config_vocab_size_a_string": (lambda p: _decoder_dir(p, lambda c: c["model"].update(vocab_size="211")), ["model.vocab_size must be a positive integer, got '211'"]),
}


@pytest.mark.parametrize("name", sorted(BAD_DIRECTORIES))
def test_generate_refuses_a_directory_that_is_not_a_decoder(name, tmp_path):
    make, expect = BAD_DIRECTORIES[name]
    assert_one_line_error(run_main("generate", "--model", str(make(tmp_path)), "--steps", "1"), "gqa-torch-mlir: error:", *expect)


@pytest.mark.parametrize(
    "args,lead,expect",
    [
        (["--prompt", "211"], "gqa-torch-mlir: error:", ["token ids [211]", "vocabulary [0, 211)"]),
        (["--prompt", "5", "-212"], "gqa-torch-mlir: error:", ["token ids [-212]"]),
        (["--steps", "130"], "gqa-torch-mlir: error:", ["context_length (128)"]),
        (["--steps", "-1"], "gqa-torch-mlir generate: error:", ["--steps: must be >= 0"]),
        (["--prompt"], "gqa-torch-mlir generate: error:", ["--prompt: expected at least one argument"]),
    ],
    ids=["token_past_vocabulary", "negative_token", "longer_than_context", "negative_steps", "empty_prompt"],
)
def test_generate_refuses_bad_arguments_before_compiling(args, lead, expect):
    assert_one_line_error(run_main("generate", *args), lead, *expect)


def test_the_installed_command_reports_the_same_line():
    """One case through the installed script, as a user runs it."""
    assert_one_line_error(run_tool("generate", "--prompt", "211"), "gqa-torch-mlir: error:", "token ids [211]")


def test_demo_refuses_negative_steps():
    assert_one_line_error(run_main("demo", "--steps", "-3"), "gqa-torch-mlir demo: error:", "--steps: must be >= 0")


def test_demo_larger_than_memory():
    """numpy's MemoryError making the feeds was a traceback."""
    run = run_main("demo", "--batch", "100000000000")
    assert_one_line_error(run, "gqa-torch-mlir: error: out of memory:", "Unable to allocate")


# -- output and input files ---------------------------------------------------------------------


@pytest.mark.parametrize("target", ["missing_dir/out.mlir", "."], ids=["missing_directory", "a_directory"])
def test_compile_output_that_cannot_be_written(target, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(make_model(GQAConfig()).SerializeToString())
    run = run_main("compile", str(model), "--output-type", "torch", "-o", str(tmp_path / target))
    assert_one_line_error(run, "gqa-torch-mlir: error:", "cannot write output file")


def test_opt_output_that_cannot_be_written(tmp_path):
    source = tmp_path / "in.mlir"
    source.write_text("module {}\n")
    run = run_tool(str(source), "-o", str(tmp_path / "missing" / "out.mlir"), tool="gqa-torch-mlir-opt")
    assert_one_line_error(run, "gqa-torch-mlir-opt: error:", "cannot write output file")


def test_opt_input_that_is_not_text(tmp_path):
    source = tmp_path / "in.mlir"
    source.write_bytes(b"\xff\xfe\x00module")
    assert_one_line_error(run_main(str(source), tool="gqa-torch-mlir-opt"), "gqa-torch-mlir-opt: error:", "is not UTF-8 text")


def test_opt_stdin_that_is_not_text():
    """Standard input is decoded as strictly as a file (it was an internal TypeError from the parser)."""
    run = subprocess.run([str(BIN / "gqa-torch-mlir-opt")], input=b"module {}\n\xff\n", capture_output=True, timeout=600)
    text = subprocess.CompletedProcess(run.args, run.returncode, run.stdout.decode(), run.stderr.decode())
    assert_one_line_error(text, "gqa-torch-mlir-opt: error:", "input file '-' is not UTF-8 text")


# -- the Python API --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def session():
    cfg = GQAConfig(batch=1, seq=1, past=2)
    return InferenceSession(make_model(cfg)), make_inputs(cfg)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda s, f: s.run(None, list(f.values())), "input_feed must be a dict"),
        (lambda s, f: s.run(None, None), "input_feed must be a dict"),
        (lambda s, f: s.run("output", f), "output_names must be None or a list"),
        (lambda s, f: s.run([0], f), "output_names must be None or a list"),
        (lambda s, f: s.run(None, {**f, 1: f["query"]}), "unknown input name\\(s\\): 1"),  # was a TypeError
        (lambda s, f: s.run(None, {**f, "seqlens_k": [[0.5]]}), "input 'seqlens_k': expected"),
    ],
    ids=["feed_a_list", "feed_none", "output_names_a_string", "output_names_not_strings", "feed_key_not_a_string", "feed_list_of_wrong_rank"],
)
def test_run_with_malformed_arguments(session, call, message):
    with pytest.raises(RuntimeInvocationError, match=message):
        call(*session)


def test_serialized_model_and_list_feeds_as_onnxruntime_takes_them(session):
    """onnxruntime takes a model's bytes and feeds given as nested lists (converted to the input's type)."""
    sess, feeds = session
    want = sess.run(None, feeds)
    from_bytes = InferenceSession(make_model(GQAConfig(batch=1, seq=1, past=2)).SerializeToString())
    got = from_bytes.run(None, {**feeds, "seqlens_k": feeds["seqlens_k"].tolist(), "query": feeds["query"].tolist()})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and (g == w).all()


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: gqa_torch_mlir.compile(42), "model must be a path, serialized bytes or an onnx.ModelProto, got int"),
        (lambda: gqa_torch_mlir.compile(None), "model must be a path, serialized bytes or an onnx.ModelProto, got NoneType"),
        (lambda: InferenceSession(b"model.onnx"), "cannot load ONNX model from 10 bytes: .*"),  # bytes: a serialized model
        (lambda: InferenceSession(b""), "the model has no graph"),
        (lambda: gqa_torch_mlir.compile(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []), opset_imports=[])), "imports no opset"),
        (lambda: gqa_torch_mlir.compile(make_model(GQAConfig()), "torch", options={"attention": "sdpa"}), "options must be a LoweringOptions"),
        (lambda: InferenceSession(make_model(GQAConfig()), threads="x"), "threads must be a positive integer or None"),
        (lambda: InferenceSession(make_model(GQAConfig()), threads=-3), "threads must be a positive integer or None"),
        (lambda: InferenceSession("m" * 300 + ".onnx"), "no ONNX model at 'm+.onnx': .*File name too long"),
        (lambda: gqa_torch_mlir.compile("model\0.onnx"), "no ONNX model at"),
    ],
    ids=["compile_an_int", "compile_none", "session_garbage_bytes", "session_empty_bytes", "no_opset", "options_a_dict", "threads_a_string", "threads_negative",
         "path_too_long", "path_with_nul"],
)
def test_api_refuses_what_is_not_a_model_or_option(call, message):
    with pytest.raises(GqaTorchMlirError, match=message):
        call()


def test_pass_option_value_may_be_quoted():
    """MLIR pass options may quote their values: attention="sdpa" is attention=sdpa."""
    from gqa_torch_mlir.options import LoweringOptions

    assert LoweringOptions.parse('attention="sdpa"') == LoweringOptions.parse("attention='sdpa'") == LoweringOptions(attention="sdpa")


@pytest.mark.parametrize("flag", ["--convert-onnx-gqa-to-torch={attention=sdpa", "--convert-onnx-gqa-to-torch=attention=sdpa}"])
def test_opt_pass_options_with_unbalanced_braces(flag, tmp_path):
    """Stray braces were stripped and the option applied; --pass-pipeline refuses them too."""
    source = tmp_path / "empty.mlir"
    source.write_text("module {}\n")
    assert_one_line_error(run_main(flag, str(source), tool="gqa-torch-mlir-opt"), "gqa-torch-mlir-opt: error:", "unbalanced")


def test_cli_path_too_long():
    run = run_main("compile", "m" * 300 + ".onnx")
    assert_one_line_error(run, "gqa-torch-mlir: error:", "no ONNX model at", "File name too long")


def test_model_whose_external_data_was_not_loaded(tmp_path):
    """A ModelProto loaded without its external data: the initializer is named, not an importer error."""
    import onnx

    model = make_model(GQAConfig(past=4))
    weight = onnx.numpy_helper.from_array(make_inputs(GQAConfig(past=4))["past_key"], "past_key")
    model.graph.initializer.append(weight)
    del model.graph.input[[i.name for i in model.graph.input].index("past_key")]
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, size_threshold=0)
    shallow = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    with pytest.raises(GqaTorchMlirError, match="initializer 'past_key' keeps its data in an external file that was not loaded"):
        gqa_torch_mlir.compile(shallow, "torch")
    gqa_torch_mlir.compile(str(tmp_path / "m.onnx"), "torch")  # by path, the data is loaded


@pytest.mark.parametrize("field,value,message", [("ir_version", 99, "ir_version 99 is newer than ONNX defines"),
                                                 ("opset", 99, "opset 99 of the default ONNX domain, newer than ONNX defines")])
def test_versions_newer_than_onnx_defines(field, value, message):
    model = make_model(GQAConfig())
    if field == "ir_version":
        model.ir_version = value
    else:
        next(o for o in model.opset_import if o.domain == "").version = value
    with pytest.raises(GqaTorchMlirError, match=message):
        gqa_torch_mlir.compile(model, "torch")


def test_demo_prints_like_for_like_times():
    """Set-up (compile, onnxruntime's session) apart from the run calls, each timed alone in this process."""
    run = run_main("demo", "--prompt", "3", "--steps", "2")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    setup = next(line for line in lines if line.startswith("set-up: "))
    assert "refbackend compile" in setup and "onnxruntime session" in setup
    assert any(line.startswith("prompt call: refbackend ") and ", onnxruntime " in line for line in lines)
    decode = next(line for line in lines if line.startswith("decode, median per step: "))
    assert "(2 steps; onnxruntime CPU provider, 1 thread, graph optimizations off)" in decode
    assert not any("session creation" in line or "session setup" in line for line in lines)
