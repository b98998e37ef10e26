"""Mutation tests: valid GroupQueryAttention models with their attributes or
input declarations changed at random, each checked against onnxruntime.

An attribute mutation is lowered and agrees with onnxruntime where
onnxruntime runs it, or refused by name (the attribute, an input or the op)
where onnxruntime rejects it or docs/limits.md names the limit.  A declaration
mutation (an input's element type, rank, a dim made symbolic or changed,
inputs dropped or swapped, outputs added or dropped) compiles to linalg, or
is refused by the plugin pass or the importer: never a failure further down
torch-mlir's pipeline, which names no input.  Both found defects (a large
softcap 1.05 off; a static seqlens_k beside a symbolic batch failing in
torch-mlir's linalg lowering).

CI runs GQA_MUTATION_EXAMPLES (default 10) of each; more on demand:
``GQA_MUTATION_EXAMPLES=500 .venv/bin/python -m pytest -q test/python/test_mutations.py``.
"""

from __future__ import annotations

import math
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
from gqa_torch_mlir.testing.gqa_onnx import compare, make_inputs, make_model, run_onnxruntime, window_resident
from gqa_torch_mlir.testing.tiers import count

EXAMPLES = count("GQA_MUTATION_EXAMPLES", fast=10, extended=60)

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
# onnxruntime accepts these, the lowering refuses them by name (docs/limits.md).
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
def test_mutated_declarations_compile_or_are_refused_before_torch_mlir(seed, tmp_path):
    """Refused by the pass or the importer, naming the op; or compiled, and then run next to
    onnxruntime on feeds fitted to the declarations (see _assert_runs_as_onnxruntime)."""
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
    else:
        feeds = fitted_feeds(np.random.default_rng(seed), model, make_inputs(cfg))
        if feeds is not None:
            _assert_runs_as_onnxruntime(f"{kinds} on {cfg.name}", model, feeds, tmp_path)


_NUMPY = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64, TensorProto.INT32: np.int32,
          TensorProto.INT64: np.int64, TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.BOOL: np.bool_}


def fitted_feeds(rng: np.random.Generator, model: onnx.ModelProto, base: dict):
    """Feeds of the declared element types and shapes: ``base``'s where the shape still fits
    (cast to a changed type), fresh values elsewhere (integers repeat the base's values); a
    symbolic dim keeps the base feed's size, the same for every dim of that name.  None for
    a type numpy cannot feed (bf16)."""
    sizes = {}
    for vi in model.graph.input:
        old, dims = base.get(vi.name), vi.type.tensor_type.shape.dim
        for i, d in enumerate(dims):
            if d.dim_param and old is not None and old.ndim == len(dims):
                sizes.setdefault(d.dim_param, old.shape[i])
    feeds = {}
    for vi in model.graph.input:
        tt, old = vi.type.tensor_type, base.get(vi.name)
        if tt.elem_type not in _NUMPY:
            return None
        dtype = _NUMPY[tt.elem_type]
        fits_rank = old is not None and old.ndim == len(tt.shape.dim)
        if not tt.HasField("shape"):
            shape = old.shape if old is not None else ()
        else:
            shape = tuple(d.dim_value if d.HasField("dim_value") else sizes.get(d.dim_param, old.shape[i] if fits_rank else 1) for i, d in enumerate(tt.shape.dim))
        if old is not None and old.shape == shape:
            feeds[vi.name] = old.astype(dtype) if dtype != np.bool_ else old != 0
        elif np.issubdtype(dtype, np.integer):
            values = old.reshape(-1) if old is not None and old.size else np.zeros(1, np.int64)
            feeds[vi.name] = np.resize(values, shape).astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype) if dtype != np.bool_ else rng.random(shape) < 0.5
    return feeds


# Refusals of models onnxruntime runs that docs/limits.md names.
DOCUMENTED_REFUSALS = (
    "(hidden size) must be static",  # a dynamic query hidden size
    "must be static, a multiple of 8",  # a dynamic cos/sin width
    "is declared",  # a declared output shape that contradicts the op (onnxruntime only warns)
    "is not broadcast",  # a dynamic attention_bias dim fed 1
    "differs from the query's",  # mixed element types (an f32 query with an f16 cache)
)
OUR_ERRORS = ("GqaTorchMlirError", "LoweringError", "CompileStageError", "RuntimeInvocationError")


def _assert_runs_as_onnxruntime(what: str, model, feeds: dict, tmp_path) -> None:
    """Ours never dies and raises only its own errors; it computes only where onnxruntime
    does, and then agrees on the rows onnxruntime defines, or refuses with a limit of docs/limits.md."""
    from gqa_torch_mlir.testing.isolated import run_isolated

    theirs = run_isolated(_with_presents(model), feeds, tmp_path, engine="onnxruntime")
    ours = run_isolated(model, feeds, tmp_path)
    assert ours.signal is None and (ours.results is not None or ours.error is not None), f"{what}: ours {ours.describe()}"
    if ours.error is not None:
        assert ours.error[0] in OUR_ERRORS, f"{what}: ours raised {ours.describe()}"
        refused_a_run = theirs.results is not None
        assert not refused_a_run or any(r in ours.error[1] for r in DOCUMENTED_REFUSALS), (
            f"{what}: ours refuses what onnxruntime computes: {ours.describe()}")
        return
    assert theirs.results is not None, f"{what}: ours computed what onnxruntime rejects ({theirs.describe()})"
    problems = _compare_defined_rows(model, ours.results, theirs.results, feeds)
    assert not problems, f"{what}:\n" + "\n".join(problems)


def _with_presents(model):
    """The model with its node's present outputs named (not graph outputs): onnxruntime 1.32
    without them reads the step's new K/V rows in place of its cache after a past (its output
    is not the op's; test_gqa_outputs.py), with them it is the op."""
    node = model.graph.node[0]
    names = list(node.output) + [""] * (3 - len(node.output))
    if names[1] or names[2]:  # both given, or one alone (which onnxruntime rejects, and so must ours)
        return model
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    names[1], names[2] = "present_key_for_reference", "present_value_for_reference"
    del fixed.graph.node[0].output[:]
    fixed.graph.node[0].output.extend(names)
    return fixed


def _compare_defined_rows(model, got: dict, want: dict, feeds: dict) -> list:
    """Every output of onnxruntime's shape; values on the rows it defines: cache rows
    [0, seqlens_k[b]] (a window cache's resident rows), output_qk columns likewise."""
    node = model.graph.node[0]
    slot = lambda i: feeds.get(node.input[i]) if i < len(node.input) and node.input[i] else None  # noqa: E731
    seqlens, past = slot(5), slot(3)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    problems = []
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.shape != w.shape:
            problems.append(f"{name}: shape {None if g is None else g.shape}, onnxruntime's {w.shape}")
            continue
        keep = np.ones(w.shape, bool)
        index = list(node.output).index(name) if name in node.output else -1
        if index in (1, 2, 3) and seqlens is not None and w.ndim == 4 and seqlens.size == w.shape[0]:
            for b, last in enumerate(seqlens.reshape(-1)):
                rows = int(last) + 1
                if attrs.get("sliding_window_cache") == 1 and index != 3 and past is not None and past.ndim == 4:
                    rows = window_resident(rows, past.shape[2], attrs.get("local_window_size", -1))
                if index == 3:
                    keep[b, ..., rows:] = False  # output_qk [B,H,S,T]: key columns
                else:
                    keep[b, :, rows:] = False  # present [B,Hkv,T,D]: cache rows
        query_lens = slot(16)
        if index == 0 and query_lens is not None and w.ndim == 3 and query_lens.size == w.shape[0]:
            for b, n in enumerate(query_lens.reshape(-1)):
                keep[b, max(int(n), 0):] = False  # right-padded rows
        tol = 2e-2 if w.dtype == np.float16 else 1e-3
        close = np.isclose(g.astype(np.float64), w.astype(np.float64), atol=tol, rtol=tol, equal_nan=True) | ~keep
        if not close.all():
            at = tuple(int(i) for i in np.argwhere(~close)[0])
            problems.append(f"{name}: {int((~close).sum())} of {w.size} differ, first at {at}: ours {g[at]}, onnxruntime {w[at]}")
    return problems
