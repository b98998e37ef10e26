"""The malformed-model corpus, checked: every case is refused, clearly, and onnxruntime does as recorded.

The table is ``CASES`` in gqa_torch_mlir/testing/malformed_corpus.py (its
docstring says how to add a case; the models are built by
testing/malformed_models.py): each a small com.microsoft.GroupQueryAttention
model that onnxruntime rejects or that the lowering refuses, with its expected
diagnostic.  Each is checked through both entry points:

* Python: ``gqa_torch_mlir.compile(model, "torch")`` (in process) and
  ``gqa_torch_mlir.InferenceSession(model)`` (in a subprocess, so that a crash
  of the compiler is a failed test, not a dead test run) raise a
  :class:`gqa_torch_mlir.errors.GqaTorchMlirError` -- never another exception
  type, never a crash, never an internal error wrapped into one -- whose
  message names the attribute, input or output at fault and what is
  supported or expected;
* CLI: ``gqa-torch-mlir compile MODEL.onnx`` exits non-zero with the same
  diagnostic on stderr and no Python traceback on stdout or stderr (the
  command's ``main`` in process for every case, the installed command in a
  subprocess for one).

Each case also records what onnxruntime 1.32 (CPU provider) does with the
model -- rejects it at session creation ("load"), rejects it at ``run`` with
plausible feeds ("run"), runs it ("accepts"), or kills the process
("crashes") -- and ``test_onnxruntime_does_as_recorded`` keeps that record
honest.  The subprocesses are testing/isolated.py's batch probes
(``probe_sessions``, ``probe_onnxruntime``): a case that kills its child is
recorded as crashed, and the rest go on in a new one.

Graph-level forms that must WORK against onnxruntime (two GQA nodes sharing
their inputs, GQA in If branches or a local function...) are in
test_graph_forms.py.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import onnx
import pytest

import gqa_torch_mlir
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.isolated import probe_onnxruntime, probe_sessions
from gqa_torch_mlir.testing.malformed_corpus import CASE_BY_ID, CASES, LEAKED, Case
from gqa_torch_mlir.testing.malformed_models import B, DH, F32, H, HKV, I32, I64, S, gqa_model, plausible_feeds

CLI = str(Path(sys.executable).parent / "gqa-torch-mlir")


def test_corpus():
    assert len(CASES) >= 40
    assert len(CASE_BY_ID) == len(CASES), "case ids must be unique"
    assert all(c.ort in ("load", "run", "accepts", "crashes") for c in CASES)
    assert all(bool(c.why) == (c.ort == "accepts") for c in CASES), "say why exactly for the cases onnxruntime accepts"


# ---------------------------------------------------------------------------
# the probes: every case, in subprocesses
# ---------------------------------------------------------------------------


def _with_feeds(model: onnx.ModelProto, overrides: dict):
    return model, plausible_feeds(model, overrides)


class Probes:
    """The subprocess probes of every case, started together on first use."""

    def __init__(self, root: Path):
        # Two batch processes side by side.  Every test using them is in one xdist group
        # (``--dist loadgroup``), so that one worker runs them, once.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        self.ort = self.pool.submit(probe_onnxruntime, {c.id: _with_feeds(c.build(), c.feeds) for c in CASES}, root / "ort")
        self.sessions = self.pool.submit(probe_sessions, {c.id: c.build() for c in CASES}, root / "session")
        self.root = root

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    p = Probes(tmp_path_factory.mktemp("malformed"))
    yield p
    p.close()


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def run_cli(model: onnx.ModelProto, path: Path) -> subprocess.CompletedProcess:
    """``gqa-torch-mlir compile`` on the saved model, its ``main`` in this process (the
    installed command itself is run by test_the_installed_cli_refuses_a_malformed_model)."""
    from gqa_torch_mlir.tools import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["compile", str(_save(model, path))])
    return subprocess.CompletedProcess(["gqa-torch-mlir", "compile"], code, out.getvalue(), err.getvalue())


# ---------------------------------------------------------------------------
# the checks
# ---------------------------------------------------------------------------


def _diagnostic_line(message: str) -> Optional[str]:
    """The refusal itself: the text after the op label on the 'error:' line."""
    for line in message.splitlines():
        if "com.microsoft.GroupQueryAttention:" in line:
            return line.split("com.microsoft.GroupQueryAttention:", 1)[1].strip()
    return None


def check_diagnostic(c: Case, message: str, where: str) -> None:
    missing = [e for e in c.expect if e not in message]
    assert not missing, f"{c.id} ({where}): diagnostic lacks {missing}:\n{message}"
    leaked = [w for w in LEAKED if w in message]
    assert not leaked, f"{c.id} ({where}): diagnostic leaks {leaked}:\n{message}"


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_compile_refuses(c: Case):
    model = c.build()
    with pytest.raises(Exception) as info:
        gqa_torch_mlir.compile(model, "torch")
    assert isinstance(info.value, GqaTorchMlirError), f"{c.id}: {type(info.value).__name__} is not a GqaTorchMlirError: {info.value}"
    check_diagnostic(c, str(info.value), "compile")


@pytest.mark.xdist_group("malformed_probes")
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_inference_session_refuses(c: Case, probes: Probes):
    got = probes.sessions.result()[c.id]
    assert got["outcome"] != "crashed", f"{c.id}: InferenceSession killed the process: {got['message']}"
    assert got["outcome"] != "compiled", f"{c.id}: InferenceSession compiled the model instead of refusing it"
    assert got["outcome"] == "refused", f"{c.id}: InferenceSession raised {got['type']}, not a GqaTorchMlirError: {got['message']}"
    check_diagnostic(c, got["message"], "InferenceSession")


@pytest.mark.xdist_group("malformed_probes")
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_cli_refuses(c: Case, probes: Probes):
    proc = run_cli(c.build(), probes.root / "cli" / f"{c.id}.onnx")
    out = f"exit status {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode > 0, f"{c.id}: the CLI did not fail cleanly:\n{out}"
    assert "Traceback" not in proc.stderr + proc.stdout, f"{c.id}: traceback:\n{out}"
    assert proc.stderr.startswith("gqa-torch-mlir: error:"), f"{c.id}: stderr is not a one-line-led error:\n{out}"
    check_diagnostic(c, proc.stderr, "CLI")
    try:
        gqa_torch_mlir.compile(c.build(), "torch")
    except GqaTorchMlirError as e:
        line = _diagnostic_line(str(e))
        if line is not None:
            assert line in proc.stderr, f"{c.id}: CLI and Python disagree: Python says {line!r}\n{out}"


@pytest.mark.xdist_group("malformed_probes")
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_onnxruntime_does_as_recorded(c: Case, probes: Probes):
    got = probes.ort.result()[c.id]
    assert got["outcome"] == c.ort, f"{c.id}: onnxruntime {got['outcome']} (recorded: {c.ort}): {got['error'][:500]}"


def test_the_installed_cli_refuses_a_malformed_model(tmp_path):
    """The installed command, in a subprocess, on one case: what a user runs."""
    c = CASE_BY_ID["num_heads_zero"]
    proc = subprocess.run([CLI, "compile", str(_save(c.build(), tmp_path / "m.onnx"))], capture_output=True, text=True, timeout=600)
    assert proc.returncode > 0 and "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("gqa-torch-mlir: error:")
    check_diagnostic(c, proc.stderr, "CLI")


def test_com_microsoft_opset_0_is_refused_not_left_to_torch_mlir():
    """Version 0 of com.microsoft is below our lowering's since-version: the op is
    refused by the plugin pass, never handed to torch-mlir's own GQA lowering
    (onnxruntime refuses the model at load)."""
    model = gqa_model(edit=lambda m: setattr(m.opset_import[1], "version", 0))
    with pytest.raises(GqaTorchMlirError, match="opset 0 for domain 'com.microsoft' is below the lowest version lowered"):
        gqa_torch_mlir.compile(model, "torch")


@pytest.mark.parametrize("attrs,extra", [({"do_rotary": 1}, {}), ({"do_rotary": 1}, {"position_ids": (I64, [B, S])}), ({}, {})],
                         ids=["rotary", "rotary_positions_in_range", "rotary_off"])
def test_cos_cache_shorter_than_total_fails_at_run_time(attrs, extra, tmp_path):
    """cos/sin with 3 rows for total_sequence_length 5: onnxruntime rejects it at run
    time (also when the positions read lie in the rows, and with do_rotary=0); the
    compiled model does too (its run-time checks), with a clear error."""
    model = gqa_model(attrs=attrs, inputs={"cos_cache": (F32, [3, DH // 2]), "sin_cache": (F32, [3, DH // 2]), **extra})
    feeds = plausible_feeds(model, {"position_ids": np.zeros((B, S), np.int64)} if extra else None)
    assert probe_onnxruntime({"m": (model, feeds)}, tmp_path)["m"]["outcome"] == "run"
    sess = InferenceSession(model)
    with pytest.raises(GqaTorchMlirError, match="cos_cache dimension 0 must not be less than total_sequence_length"):
        sess.run(None, feeds)


@pytest.mark.parametrize("chunked", [False, True], ids=["plain", "query_seqlens"])
def test_static_empty_sequence_is_refused_saying_why(chunked):
    """onnxruntime rejects S = 0, except with query_seqlens (an empty chunk), which is not lowered."""
    inputs = {"query": (F32, [B, 0, H * DH]), "key": (F32, [B, 0, HKV * DH]), "value": (F32, [B, 0, HKV * DH])}
    if chunked:
        inputs["query_seqlens"] = (I32, [B])
    why = "empty chunk with query_seqlens, which is not lowered" if chunked else "onnxruntime rejects an empty sequence"
    with pytest.raises(GqaTorchMlirError, match=f"input 0 'query': dimension 1 \\(sequence length\\) is 0; .*{why}"):
        gqa_torch_mlir.compile(gqa_model(inputs), "torch")
