"""Shared fixtures of the pytest suite, and the tier it runs (testing/tiers.py).

* ``run_ours(model, feeds, backend="refbackend")``: the model through
  ``InferenceSession``, outputs by name (onnxruntime's oracle is
  ``gqa_torch_mlir.testing.gqa_onnx.run_onnxruntime``).
* ``backend``: each backend in turn, for a test that runs on both.
"""

from __future__ import annotations

import os

import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import tuning
from gqa_torch_mlir.backends.refbackend import OPT_LEVEL_VARIABLE
from gqa_torch_mlir.testing import tiers

BACKENDS = ("refbackend", "iree-cpu")

# The fast tier JIT-compiles the refbackend's code unoptimised: the same lowered IR (what the
# tests check) in a quarter of the compile time; the extended tier at LLVM's -O2, as users
# run it.  Subprocesses (the CLI tests) inherit it.
# Likewise iree-cpu without its tuning spec, whose compiles run on one thread (backends/iree/tuning.py):
# test_backends_iree_tuning.py compiles with it, the extended tier everywhere.
if not tiers.EXTENDED:
    os.environ.setdefault(OPT_LEVEL_VARIABLE, "0")
    os.environ.setdefault(tuning.ENABLED_VARIABLE, "0")


def pytest_report_header(config):
    return f"gqa-torch-mlir tier: {'extended' if tiers.EXTENDED else 'fast (GQA_EXTENDED=1 runs the extended tier)'}"


def _run_ours(model, feeds, backend: str = "refbackend") -> dict:
    session = InferenceSession(model, backend=backend)
    wanted = {i.name for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted})))


@pytest.fixture
def run_ours():
    return _run_ours


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param
