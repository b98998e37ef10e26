"""Run a model in a child process, so that a crash is a test result, not the end of pytest.

    run = run_isolated(model, feeds, tmp_path)                     # our InferenceSession
    run = run_isolated(model, feeds, tmp_path, engine="onnxruntime")
    run.signal        # the signal that killed the child (SIGFPE, SIGABRT...), or None
    run.results       # outputs by name when the run succeeded, else None
    run.error         # (exception class name, message) when it raised, else None

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
from typing import Dict, Optional, Tuple

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
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / f"{engine}-{name}" for name in ("model.onnx", "feeds.npz", "results.npz", "error.json")}
    onnx.save(model, str(paths["model.onnx"]))
    np.savez(paths["feeds.npz"], **feeds)
    for stale in (paths["results.npz"], paths["error.json"]):
        stale.unlink(missing_ok=True)
    options = json.dumps({"engine": engine, "backend": backend, "attention": attention, "runtime_verification": runtime_verification})
    command = [sys.executable, "-m", __name__, options] + [str(paths[n]) for n in ("model.onnx", "feeds.npz", "results.npz", "error.json")]
    child = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    results = dict(np.load(paths["results.npz"])) if child.returncode == 0 and paths["results.npz"].exists() else None
    error = tuple(json.loads(paths["error.json"].read_text())) if child.returncode == 0 and paths["error.json"].exists() else None
    return IsolatedRun(child.returncode, child.stderr, results, error)


def _run(options: dict, model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    if options["engine"] == "onnxruntime":
        from .gqa_onnx import run_onnxruntime

        return run_onnxruntime(model, feeds)
    from ..session import InferenceSession

    verify = options["runtime_verification"] and options["backend"] == "refbackend"
    session = InferenceSession(model, backend=options["backend"], attention=options["attention"], runtime_verification=verify)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def main(argv=None) -> None:
    options_json, model_path, feeds_path, results_path, error_path = (argv or sys.argv[1:])
    model, feeds = onnx.load(model_path), dict(np.load(feeds_path))
    try:
        results = _run(json.loads(options_json), model, feeds)
    except Exception as exc:  # noqa: BLE001  reported to the parent, which decides
        Path(error_path).write_text(json.dumps([type(exc).__name__, str(exc)]))
        return
    np.savez(results_path, **results)


if __name__ == "__main__":
    main()
