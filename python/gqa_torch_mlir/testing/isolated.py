"""Run a model in a child process, so that a crash is a test result, not the end of pytest.

    run = run_isolated(model, feeds, tmp_path)                     # our InferenceSession
    run = run_isolated(model, feeds, tmp_path, engine="onnxruntime")
    run.signal        # the signal that killed the child (SIGFPE, SIGABRT...), or None
    run.results       # outputs by name when the run succeeded, else None
    run.error         # (exception class name, message) when it raised, else None
    runs = run_isolated_each(model, [feeds_a, feeds_b], tmp_path)   # one child, compiled once

The model and feeds cross as files in ``directory``; the child
(``python -m gqa_torch_mlir.testing.isolated each ...``) loads them, runs, and
writes the outputs back (or the exception it caught) before exiting normally.

Many models, each probed once, a crash costing one of them only::

    probe_onnxruntime({id: (model, feeds or None)}, directory)[id]  # {"outcome": load|run|accepts|crashes|unfeedable, "error"}
    probe_sessions({id: model}, directory)[id]  # InferenceSession(model): {"outcome": refused|other|compiled|crashed, ...}

Both go through :func:`run_batch`: the child
(``python -m gqa_torch_mlir.testing.isolated batch PROBE JOBS.json``) takes
the jobs in turn, printing a "start" line before each and a "done" line with
its result after, so that when one job kills the child the parent knows which,
records it as "crashed", and starts a new child for the rest.
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
    command = [sys.executable, "-m", __name__, "each", options, str(model_path), str(directory / engine), str(len(runs))]
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


def _child_each(options_json: str, model_path: str, prefix: str, count: str) -> None:
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


# ---------------------------------------------------------------------------
# batches: many models, a crash ending one job, not the batch
# ---------------------------------------------------------------------------

PROBES = ("onnxruntime", "session")


def run_batch(probe: str, jobs: List[dict], directory, timeout: float = 1200) -> Dict[str, dict]:
    """Run ``probe`` over ``jobs`` ({"id", "model": path, ...}) in child processes, a result per id;
    a job that kills the child gets {"outcome": "crashed", "exit": status, "stderr": ...} and the rest run in a new child."""
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
    directory = Path(directory)
    results: Dict[str, dict] = {}
    pending = list(jobs)
    while pending:
        jobs_path = directory / f"jobs-{len(results)}.json"
        jobs_path.write_text(json.dumps(pending))
        proc = subprocess.run([sys.executable, "-m", __name__, "batch", probe, str(jobs_path)],
                              capture_output=True, text=True, timeout=timeout)
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                started = msg["start"]
            elif "done" in msg:
                results[msg.pop("done")] = msg
                started = None
        if started is not None:  # the child died in this job
            results[started] = {"outcome": "crashed", "exit": proc.returncode, "stderr": proc.stderr.strip()[-1000:]}
        elif proc.returncode != 0:
            raise RuntimeError(f"probe process failed outside any job (exit {proc.returncode}): {proc.stderr[-2000:]}")
        pending = [j for j in pending if j["id"] not in results]
    return results


def probe_onnxruntime(models: Dict[str, Tuple[onnx.ModelProto, Optional[Dict[str, np.ndarray]]]], directory) -> Dict[str, dict]:
    """What onnxruntime (CPU provider, one thread, no graph optimisation) does with each model and its feeds
    (None: none can be made): {"outcome": "load" | "run" (rejects it there) | "accepts" | "crashes" | "unfeedable", "error": ...}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    jobs = []
    for id, (model, feeds) in models.items():
        model_path, feeds_path = directory / f"{id}.onnx", "-"
        onnx.save(model, str(model_path))
        if feeds is not None:
            feeds_path = str(directory / f"{id}.feeds.npz")
            np.savez(feeds_path, **feeds)
        jobs.append({"id": id, "model": str(model_path), "feeds": feeds_path})
    results = run_batch("onnxruntime", jobs, directory)
    for r in results.values():
        if r["outcome"] == "crashed":
            r.update(outcome="crashes", error=f"exit status {r['exit']}: {r['stderr'][-300:]}")
    return results


def probe_sessions(models: Dict[str, onnx.ModelProto], directory) -> Dict[str, dict]:
    """``InferenceSession(model)`` of each model: {"outcome": "refused" (a GqaTorchMlirError) | "other" (another
    exception) | "compiled" | "crashed", "type": the exception's class name, "message": ...}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    jobs = []
    for id, model in models.items():
        onnx.save(model, str(directory / f"{id}.onnx"))
        jobs.append({"id": id, "model": str(directory / f"{id}.onnx")})
    results = run_batch("session", jobs, directory)
    for r in results.values():
        if r["outcome"] == "crashed":
            r.update(type="", message=f"exit status {r['exit']}; stderr: {r['stderr']}")
    return results


def _onnxruntime_prober():
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4

    def probe(job: dict) -> dict:
        try:
            sess = ort.InferenceSession(job["model"], opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001  the outcome probed
            return {"outcome": "load", "error": str(e)}
        if job["feeds"] == "-":
            return {"outcome": "unfeedable", "error": ""}
        try:
            sess.run(None, dict(np.load(job["feeds"])))
        except Exception as e:  # noqa: BLE001
            return {"outcome": "run", "error": str(e)}
        return {"outcome": "accepts", "error": ""}

    return probe


def _session_prober():
    from ..errors import GqaTorchMlirError
    from ..session import InferenceSession

    def probe(job: dict) -> dict:
        try:
            InferenceSession(job["model"])
        except GqaTorchMlirError as e:
            return {"outcome": "refused", "type": type(e).__name__, "message": str(e)}
        except BaseException as e:  # noqa: BLE001  anything else is the failure probed for
            return {"outcome": "other", "type": type(e).__name__, "message": str(e)}
        return {"outcome": "compiled", "type": "", "message": ""}

    return probe


def _child_batch(probe_name: str, jobs_path: str) -> None:
    probe = {"onnxruntime": _onnxruntime_prober, "session": _session_prober}[probe_name]()
    for job in json.loads(Path(jobs_path).read_text()):
        print(json.dumps({"start": job["id"]}), flush=True)
        print(json.dumps({"done": job["id"], **probe(job)}), flush=True)


def main(argv=None) -> None:
    command, *args = argv or sys.argv[1:]
    {"each": _child_each, "batch": _child_batch}[command](*args)


if __name__ == "__main__":
    main()
