"""Run a model in a child process, so that a crash is a test result, not the end of pytest.

    run = run_isolated(model, feeds, tmp_path)                     # our InferenceSession
    run = run_isolated(model, feeds, tmp_path, engine="onnxruntime")
    run.signal        # the signal that killed the child (SIGFPE, SIGABRT...), or None
    run.results       # outputs by name when the run succeeded, else None
    run.error         # (exception class name, message) when it raised, else None
    runs = run_isolated_each(model, [feeds_a, feeds_b], tmp_path)   # one child, compiled once

The model and feeds cross as files in ``directory``; the child
(``python -m gqa_torch_mlir.testing.isolated``) loads them, runs, and writes
the outputs back (or the exception it caught) before exiting normally.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx

ENGINES = ("gqa-torch-mlir", "onnxruntime")
_TIMEOUT_S = 900


@dataclass
class IsolatedRun:
    returncode: int
    stderr: str
    results: Optional[Dict[str, np.ndarray]]
    error: Optional[Tuple[str, str]]

    @property
    def signal(self) -> Optional[str]:
        """The name of the signal that killed the child, if one did."""
        return signal.Signals(-self.returncode).name if self.returncode < 0 else None

    def describe(self) -> str:
        if self.signal:
            return f"the child process died of {self.signal}:\n{self.stderr[-2000:]}"
        if self.error:
            return f"{self.error[0]}: {self.error[1]}"
        return f"exit status {self.returncode}:\n{self.stderr[-2000:]}" if self.results is None else "ok"


def run_isolated(
    model: onnx.ModelProto,
    feeds: Dict[str, np.ndarray],
    directory,
    engine: str = "gqa-torch-mlir",
    backend: str = "refbackend",
    attention: Optional[str] = None,
    runtime_verification: bool = True,
) -> IsolatedRun:
    """Run ``model`` on ``feeds`` with ``engine`` in a child process (``runtime_verification``: refbackend only)."""
    return run_isolated_each(model, [feeds], directory, engine, backend, attention, runtime_verification)[0]


def run_isolated_each(
    model: onnx.ModelProto,
    feeds_list: List[Dict[str, np.ndarray]],
    directory,
    engine: str = "gqa-torch-mlir",
    backend: str = "refbackend",
    attention: Optional[str] = None,
    runtime_verification: bool = True,
) -> List[IsolatedRun]:
    """Run ``model`` on each of ``feeds_list`` in one child process, compiled once.

    A crash ends the child: the runs it did not finish report it, those before it keep their results.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model_path = directory / f"{engine}-model.onnx"
    onnx.save(model, str(model_path))
    runs = [_RunFiles(directory, engine, i) for i in range(len(feeds_list))]
    for files, feeds in zip(runs, feeds_list):
        files.clear()
        np.savez(files.feeds, **feeds)
    options = json.dumps({"engine": engine, "backend": backend, "attention": attention, "runtime_verification": runtime_verification})
    command = [sys.executable, "-m", __name__, options, str(model_path), str(directory / engine), str(len(runs))]
    child = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    return [files.outcome(child) for files in runs]


@dataclass
class _RunFiles:
    """The files of run ``index``: its feeds, and its results or the exception it raised."""

    directory: Path
    engine: str
    index: int

    def _path(self, kind: str) -> Path:
        return self.directory / f"{self.engine}-{self.index}-{kind}"

    @property
    def feeds(self) -> Path:
        return self._path("feeds.npz")

    @property
    def results(self) -> Path:
        return self._path("results.npz")

    @property
    def error(self) -> Path:
        return self._path("error.json")

    def clear(self) -> None:
        for stale in (self.results, self.error):
            stale.unlink(missing_ok=True)

    def outcome(self, child: subprocess.CompletedProcess) -> IsolatedRun:
        if self.results.exists():
            return IsolatedRun(0, child.stderr, dict(np.load(self.results)), None)
        if self.error.exists():
            return IsolatedRun(0, child.stderr, None, tuple(json.loads(self.error.read_text())))
        return IsolatedRun(child.returncode or 1, child.stderr, None, None)  # the child ended before this run


def _session(options: dict, model: onnx.ModelProto):
    """A callable running the model on feeds (compiled once)."""
    if options["engine"] == "onnxruntime":
        from .gqa_onnx import run_onnxruntime

        return lambda feeds: run_onnxruntime(model, feeds)
    from ..session import InferenceSession

    verify = options["runtime_verification"] and options["backend"] == "refbackend"
    session = InferenceSession(model, backend=options["backend"], attention=options["attention"], runtime_verification=verify)
    return lambda feeds: dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def main(argv=None) -> None:
    options_json, model_path, prefix, count = (argv or sys.argv[1:])
    directory, engine = Path(prefix).parent, Path(prefix).name
    runs = [_RunFiles(directory, engine, i) for i in range(int(count))]
    try:
        run = _session(json.loads(options_json), onnx.load(model_path))
    except Exception as exc:  # noqa: BLE001  reported to the parent, which decides
        for files in runs:
            files.error.write_text(json.dumps([type(exc).__name__, str(exc)]))
        return
    for files in runs:
        try:
            results = run(dict(np.load(files.feeds)))
        except Exception as exc:  # noqa: BLE001
            files.error.write_text(json.dumps([type(exc).__name__, str(exc)]))
            continue
        np.savez(files.results, **results)


if __name__ == "__main__":
    main()
