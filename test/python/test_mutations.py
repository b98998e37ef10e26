"""Mutation tests: valid GroupQueryAttention models with their attributes or
input declarations changed at random, each checked against onnxruntime.

An attribute mutation is lowered and agrees with onnxruntime where
onnxruntime runs it, or refused by name (the attribute, an input or the op)
where onnxruntime rejects it or the README names the limit.  A declaration
mutation (an input's element type, rank, a dim made symbolic or changed,
inputs dropped or swapped, outputs added or dropped) compiles to linalg, or
is refused by the plugin pass or the importer: never a failure further down
torch-mlir's pipeline, which names no input.  Both found defects (a large
softcap 1.05 off; a static seqlens_k beside a symbolic batch failing in
torch-mlir's linalg lowering).

CI runs GQA_MUTATION_EXAMPLES (default 30) of each; more on demand:
``GQA_MUTATION_EXAMPLES=500 .venv/bin/python -m pytest -q test/python/test_mutations.py``.
"""

from __future__ import annotations

import math
import os
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gqa_torch_mlir
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import CompileStageError, GqaTorchMlirError, LoweringError, RuntimeInvocationError
from gqa_torch_mlir.passes import PASS_ARGUMENT
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig as C
from gqa_torch_mlir.testing.gqa_onnx import compare, make_inputs, make_model, run_onnxruntime

EXAMPLES = int(os.environ.get("GQA_MUTATION_EXAMPLES", "30"))

BASES = [
    C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True),
    C(batch=1, seq=3, past=4, dynamic=True),
    C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True),
    C(batch=1, seq=2, past=0, packed=True),
    C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True),
    C(batch=1, seq=1, past=4, kv_bits=8),
]
DECLARATION_BASES = BASES + [
    C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True, position_ids=True),
    C(batch=1, seq=3, past=4, dynamic=True, attention_bias="BH"),
    C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True, head_sink=True),
    C(batch=1, seq=1, past=4, kv_bits=4, quant_type="PER_CHANNEL"),
    C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1)),
]

_INTS = [-2, -1, 0, 1, 2, 3, 4, 5, 8, 16, 64, 2**31 - 1]
_FLOATS = [-1.0, 0.0, 0.5, 1.0, 30.0, 1e30, math.inf, math.nan]
ATTRIBUTE_VALUES = {
    **{name: _INTS for name in ("num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved", "local_window_size",
                                "smooth_softmax", "causal", "qk_output", "sliding_window_cache", "kv_cache_bit_width")},
    "scale": _FLOATS,
    "softcap": _FLOATS,
    "k_quant_type": ["NONE", "PER_TENSOR", "PER_CHANNEL", "PER_ROW", ""],
    "v_quant_type": ["NONE", "PER_TENSOR", "PER_CHANNEL", "PER_ROW"],
    "not_an_attribute": [1],
}
# onnxruntime accepts these, the lowering refuses them by name (README, Limits).
DELIBERATE_LIMITS = {"scale": lambda v: not math.isfinite(v)}


def mutate_attributes(rng: random.Random, model: onnx.ModelProto) -> dict:
    """Set one or two attributes of the node to drawn values (an int sometimes as a float)."""
    node, changed = model.graph.node[0], {}
    for _ in range(rng.choice([1, 1, 2])):
        name = rng.choice(sorted(ATTRIBUTE_VALUES))
        value = rng.choice(ATTRIBUTE_VALUES[name])
        if isinstance(value, int) and rng.random() < 0.1:
            value = float(value)  # the wrong attribute type
        for attr in [a for a in node.attribute if a.name == name]:
            node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute(name, value))
        changed[name] = value
    return changed


def _run_ours(model, feeds):
    session = InferenceSession(model)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.mark.parametrize("seed", range(EXAMPLES))
def test_mutated_attributes_agree_with_onnxruntime_or_are_refused_by_name(seed):
    rng = random.Random(seed)
    cfg = rng.choice(BASES)
    model = make_model(cfg)
    changed = mutate_attributes(rng, model)
    feeds = make_inputs(cfg)
    try:
        want = run_onnxruntime(model, feeds)
    except Exception:  # noqa: BLE001  onnxruntime rejects the model or the feeds
        want = None
    try:
        got = _run_ours(model, feeds)
    except CompileStageError as e:
        assert e.stage == PASS_ARGUMENT, f"{changed} on {cfg.name}: failed in torch-mlir's '{e.stage}' stage:\n{e}"
        _assert_refused_by_name(cfg, changed, want, e)
    except (LoweringError, RuntimeInvocationError) as e:
        _assert_refused_by_name(cfg, changed, want, e)
    else:
        _assert_agrees(cfg, changed, got, want, feeds)


def _assert_refused_by_name(cfg, changed: dict, want, e: Exception) -> None:
    names = list(changed) + ["GroupQueryAttention", "input"]
    assert any(n in str(e) for n in names), f"{changed}: the refusal names none of {names}: {e}"
    limit = any(DELIBERATE_LIMITS.get(n, lambda v: False)(v) for n, v in changed.items())
    assert want is None or limit, f"{changed} on {cfg.name}: refused, but onnxruntime runs it: {e}"


def _assert_agrees(cfg, changed: dict, got: dict, want, feeds: dict) -> None:
    assert want is not None, f"{changed} on {cfg.name}: computed, but onnxruntime rejects it"
    assert sorted(got) == sorted(want), f"{changed}: outputs {sorted(got)}, onnxruntime's {sorted(want)}"
    if all(np.isfinite(v).all() for v in want.values() if v.dtype.kind == "f"):
        problems = compare(cfg, got, want, feeds)
        assert not problems, f"{changed} on {cfg.name}:\n" + "\n".join(problems)
    else:  # NaN where onnxruntime's is
        np.testing.assert_array_equal(np.isnan(got["output"]), np.isnan(want["output"]))


_ELEM_TYPES = [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL,
               TensorProto.UINT8, TensorProto.INT8, TensorProto.DOUBLE, TensorProto.BFLOAT16]


def _edit_input(rng: random.Random, graph: onnx.GraphProto, kind: str) -> None:
    dims = rng.choice(list(graph.input)).type.tensor_type
    shape = dims.shape.dim
    if kind == "elem_type":
        dims.elem_type = rng.choice(_ELEM_TYPES)
    elif kind == "rank_up":
        shape.add().dim_value = rng.choice([1, 2, 3])
    elif kind == "rank_down" and len(shape):
        del shape[-1]
    elif kind in ("symbolic", "size") and len(shape):
        dim = rng.choice(list(shape))
        dim.Clear()
        if kind == "symbolic":
            dim.dim_param = rng.choice(["x", "batch", "seq", "past"])
        else:
            dim.dim_value = rng.choice([0, 1, 2, 3, 5, 7, 8, 16, 33])


def _edit_node(rng: random.Random, graph: onnx.GraphProto, kind: str) -> None:
    node = graph.node[0]
    names = list(node.input)
    if kind == "drop_input":
        names[rng.randrange(len(names))] = ""
    elif kind == "swap_inputs":
        i, j = rng.randrange(len(names)), rng.randrange(len(names))
        names[i], names[j] = names[j], names[i]
    del node.input[:]
    node.input.extend(names)
    if kind == "add_output":
        node.output.append("extra")
        graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, None))
    elif kind == "drop_output":
        outputs = list(node.output)
        outputs[rng.randrange(1, len(outputs))] = ""  # output 0 is required
        del node.output[:]
        node.output.extend(outputs)
        kept = [o for o in graph.output if o.name in outputs]
        del graph.output[:]
        graph.output.extend(kept)


def mutate_declarations(rng: random.Random, model: onnx.ModelProto) -> list:
    kinds = []
    for _ in range(rng.choice([1, 1, 2])):
        kind = rng.choice(["elem_type", "rank_up", "rank_down", "symbolic", "size", "drop_input", "swap_inputs", "add_output", "drop_output"])
        (_edit_input if kind in ("elem_type", "rank_up", "rank_down", "symbolic", "size") else _edit_node)(rng, model.graph, kind)
        kinds.append(kind)
    return kinds


@pytest.mark.parametrize("seed", range(EXAMPLES))
def test_mutated_declarations_compile_or_are_refused_before_torch_mlir(seed):
    rng = random.Random(10_000 + seed)
    cfg = rng.choice(DECLARATION_BASES)
    model = make_model(cfg)
    kinds = mutate_declarations(rng, model)
    try:
        gqa_torch_mlir.compile(model, "linalg-on-tensors")
    except CompileStageError as e:
        assert e.stage in ("import", PASS_ARGUMENT), f"{kinds} on {cfg.name}: failed in torch-mlir's '{e.stage}' stage, naming no input:\n{e}"
        if e.stage == PASS_ARGUMENT:
            assert "GroupQueryAttention" in str(e), f"{kinds} on {cfg.name}: {e}"
    except GqaTorchMlirError as e:  # the plugin pass's refusal (or the domain check before import)
        assert "GroupQueryAttention" in str(e), f"{kinds} on {cfg.name}: {e}"
