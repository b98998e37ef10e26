"""Property test: hypothesis-drawn valid GroupQueryAttention configurations against onnxruntime.

Each example draws a configuration onnxruntime 1.32's CPU kernel accepts --
batch, sequence, past, head counts, head size, packed QKV, rotary flavour
(off / rotate-half / interleaved / partial), position_ids, local window,
softcap, smooth_softmax, head_sink, attention_bias form, causal, scale,
qk_output, dtype, cache mode (growing / fixed capacity / right-padded chunks
with query_seqlens), a quantized cache now and then, and static, dynamic or
partly dynamic dims -- builds it with ``GQAConfig`` + ``make_model(cfg,
extra_attrs)``, runs it through ``InferenceSession`` (the pass's default
attention form, or ``attention="sdpa"``) and onnxruntime on the same feeds and
asserts ``compare(...) == []``.

The draw respects onnxruntime's constraints (see GQAConfig's checks and
/work/notes/ort_gqa_semantics.md): head_size % 8 == 0 (% 16 with rotary,
rotary width a multiple of 8 columns), batch 1 for multi-token steps after a
past unless query_seqlens is given, causal=0 only with local_window_size -1
and without query_seqlens, at least one valid token per row, with
query_seqlens one row that fills past + seq (the harness feeds
total_sequence_length = max(seqlens_k) + 1), no qk_output with a quantized
cache.

Environment:
  GQA_PROPERTY_EXAMPLES  number of examples (default 10: about 40 s on one core)
  GQA_PROPERTY_SEED      run a different deterministic draw (default: derived from the test)
  GQA_PROPERTY_SHRINK    1 to let hypothesis shrink a failure (slow: ~1 s a compile)
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import onnx
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.tiers import count

EXAMPLES = count("GQA_PROPERTY_EXAMPLES", fast=10, extended=200)
SEED = os.environ.get("GQA_PROPERTY_SEED")
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target) + ((Phase.shrink,) if os.environ.get("GQA_PROPERTY_SHRINK") == "1" else ())


@dataclass(frozen=True)
class Draw:
    cfg: GQAConfig
    attrs: Dict[str, object]
    dims: str  # "static", "dynamic", or a partly dynamic edit's name
    attention: str = "default"  # the pass's attention form: "default" (decomposed) or "sdpa"

    @property
    def name(self) -> str:
        attrs = ",".join(f"{k}={v}" for k, v in sorted(self.attrs.items()))
        form = "" if self.attention == "default" else f" attention={self.attention}"
        return f"{self.cfg.name} attrs[{attrs}] dims={self.dims}{form}"


# Partly dynamic signatures: (graph value, axis, symbolic name) edits of a static model.
_CACHES_IN, _CACHES_OUT = ("past_key", "past_value"), ("present_key", "present_value")
PARTLY_DYNAMIC: Dict[str, List[Tuple[str, int, str]]] = {
    "batch-of-query": [("query", 0, "B")],
    "batch-everywhere": [(n, 0, "B") for n in ("query", "key", "value", "past_key", "past_value", "seqlens_k", "output", "present_key", "present_value")],
    "sequence": [(n, 1, "S") for n in ("query", "key", "value", "output")],
    "cache-length": [(n, 2, "P") for n in _CACHES_IN] + [(n, 2, "T") for n in _CACHES_OUT],
    "present-length-only": [(n, 2, "T") for n in _CACHES_OUT],
}


def _edit_dims(model: onnx.ModelProto, edits: List[Tuple[str, int, str]]) -> onnx.ModelProto:
    values = {v.name: v for v in list(model.graph.input) + list(model.graph.output)}
    for name, axis, param in edits:
        if name in values:  # key/value are absent with packed QKV
            dim = values[name].type.tensor_type.shape.dim[axis]
            dim.Clear()
            dim.dim_param = param
    return model


def _past_lens(draw, batch: int, past: int, lo: int = 0, hi: Optional[int] = None, one_full: bool = False) -> Optional[Tuple[int, ...]]:
    hi = past if hi is None else hi
    if batch == 1 and not one_full:
        return (draw(st.integers(lo, hi)),)
    lens = [draw(st.integers(lo, hi)) for _ in range(batch)]
    if one_full:
        lens[draw(st.integers(0, batch - 1))] = past
    return tuple(lens)


@st.composite
def draws(draw) -> Draw:
    dtype = draw(st.sampled_from(["float32", "float16"]))
    kv_num_heads = draw(st.sampled_from([1, 2, 3]))
    num_heads = kv_num_heads * draw(st.sampled_from([1, 2, 4]))
    rotary_kind = draw(st.sampled_from(["off", "off", "half", "interleaved", "partial"]))
    rotary = rotary_kind != "off"
    if rotary_kind == "partial":
        head_size, rotary_dim = 32, 16
    else:
        head_size = draw(st.sampled_from([16, 32] if rotary else [8, 16, 24, 32]))
        rotary_dim = None
    packed = draw(st.booleans())
    kv_bits = draw(st.sampled_from([0, 0, 0, 0, 8, 4]))
    quant_type = draw(st.sampled_from(["PER_TENSOR", "PER_CHANNEL"]))

    mode = draw(st.sampled_from(["growing", "growing", "fixed_capacity", "chunks"]))
    batch = draw(st.integers(1, 3))
    seq = draw(st.integers(1, 4))
    query_lens = None
    fixed_capacity = False
    if mode == "growing":
        past = draw(st.integers(0, 6))
        if seq > 1 and past > 0:
            batch = 1  # onnxruntime: a multi-token step after a past needs batch 1 (or query_seqlens)
        past_lens = _past_lens(draw, batch, past, one_full=True) if batch > 1 and past > 0 else None
    elif mode == "fixed_capacity":
        past = seq + draw(st.integers(0, 5))  # the capacity
        prefill = draw(st.booleans())
        if batch > 1 and seq > 1:
            prefill = True  # the only multi-row multi-token step onnxruntime takes without query_seqlens
        past_lens = (0,) * batch if prefill else _past_lens(draw, batch, past, hi=past - seq)
        fixed_capacity = True
    else:  # right-padded chunks: query_seqlens[b] new tokens of S, after past_lens[b]
        past = draw(st.integers(1, 6))
        past_lens = list(_past_lens(draw, batch, past))
        query_lens = [draw(st.integers(0 if n > 0 else 1, seq)) for n in past_lens]  # >= 1 token in the cache
        # The harness feeds total_sequence_length = max(seqlens_k) + 1 but declares present and
        # attention_bias with past + seq: one row must fill both (onnxruntime checks them).
        full = draw(st.integers(0, batch - 1))
        past_lens[full], query_lens[full] = past, seq
        past_lens, query_lens = tuple(past_lens), tuple(query_lens)

    causal = 0 if mode != "chunks" and draw(st.integers(0, 4)) == 0 else 1
    cfg_fields = dict(
        batch=batch, seq=seq, past=past, num_heads=num_heads, kv_num_heads=kv_num_heads, head_size=head_size,
        packed=packed, rotary=rotary, dtype=dtype, past_lens=past_lens, fixed_capacity=fixed_capacity,
        rotary_interleaved=rotary_kind == "interleaved", rotary_dim=rotary_dim, query_lens=query_lens,
        kv_bits=kv_bits, quant_type=quant_type,
        position_ids=rotary and draw(st.booleans()),
        attention_bias=draw(st.sampled_from(["", "", "BH", "B1", "1H", "11"])),
        head_sink=draw(st.integers(0, 3)) == 0,
        trailing_empty=draw(st.booleans()),
    )
    dims = draw(st.sampled_from(["static", "static", "dynamic", "dynamic"] + sorted(PARTLY_DYNAMIC)))
    cfg_fields["dynamic"] = dims == "dynamic"
    probe = GQAConfig(**cfg_fields)
    if rotary and draw(st.booleans()):  # the smallest cos/sin cache onnxruntime takes
        cfg_fields["rotary_cache_len"] = probe.total + (3 if probe.position_ids else 0)
    cfg = GQAConfig(**cfg_fields)

    attrs: Dict[str, object] = {}
    if not causal:
        attrs["causal"] = 0
    elif draw(st.booleans()):
        attrs["local_window_size"] = draw(st.integers(-1, cfg.total + 1))
    if draw(st.booleans()):
        attrs["softcap"] = draw(st.sampled_from([0.0, 0.5, 2.0, 5.0, 30.0]))
    if draw(st.integers(0, 2)) == 0:
        attrs["smooth_softmax"] = draw(st.sampled_from([0, 1, 2]))
    if draw(st.booleans()):
        attrs["scale"] = draw(st.sampled_from([0.0, 0.1, 0.3, 0.5, 1.0, -0.25]))
    if not kv_bits and draw(st.integers(0, 3)) == 0:
        attrs["qk_output"] = draw(st.sampled_from([1, 2]))
    return Draw(cfg, attrs, dims, draw(st.sampled_from(["default", "default", "sdpa"])))


def run_draw(d: Draw) -> List[str]:
    model = make_model(d.cfg, d.attrs)
    if d.dims in PARTLY_DYNAMIC:
        model = _edit_dims(model, PARTLY_DYNAMIC[d.dims])
    feeds = make_inputs(d.cfg, seed=zlib.crc32(d.name.encode()))
    want = run_onnxruntime(model, feeds)
    # sdpa runs on iree-cpu: the refbackend refuses it (torch-mlir's loop lowering of SDPA is wrong for some rows)
    sess = InferenceSession(model) if d.attention == "default" else InferenceSession(model, backend="iree-cpu", threads=1, attention=d.attention)
    wanted = {i.name for i in sess.get_inputs()}
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {k: v for k, v in feeds.items() if k in wanted})))
    return compare(d.cfg, got, want, feeds)


def _property(d: Draw) -> None:
    try:
        msgs = run_draw(d)
    except Exception as e:  # a compile or run failure of a valid model is a disagreement too
        raise AssertionError(f"{d.name}: {type(e).__name__}: {e}") from e
    assert msgs == [], f"{d.name}: {len(msgs)} mismatch(es) against onnxruntime:\n  " + "\n  ".join(msgs)


_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)


# Disagreements the draw has found (GQA_PROPERTY_EXAMPLES=500), pinned so they run
# first whatever the draw.
FOUND = [
    # attention_bias with a static batch dim (B1/BH) while the other inputs' batch is symbolic.
    # attention=sdpa: compiles, but the rows get the wrong mask (row 1 attends row 0's valid range).
    Draw(GQAConfig(batch=2, seq=1, past=6, past_lens=(6, 3), attention_bias="BH"), {}, "batch-everywhere", "sdpa"),
    # ... decomposed form (the default; with sdpa: softcap, sinks, qk_output, W=0, quantized
    # caches): linalg-on-tensors fails to compile (tensor.expand_shape static size).
    Draw(GQAConfig(batch=2, seq=1, past=0, attention_bias="B1"), {"softcap": 2.0}, "batch-everywhere"),
    # attention=sdpa in f16 with large scores (here scale=1.0; the default scale with a 5.7x larger
    # query does the same): in batch row 0, whose only visible key is its new one, some heads
    # output 0 instead of that key's value.
    Draw(GQAConfig(batch=2, seq=1, past=2, past_lens=(0, 2), num_heads=8, kv_num_heads=2, head_size=32, dtype="float16"),
         {"scale": 1.0}, "dynamic", "sdpa"),
    # f16 + rotary + int8 cache: a quantized present_key value is off by one step (rounding of the rotated K).
    Draw(GQAConfig(batch=1, seq=4, past=4, num_heads=8, kv_num_heads=2, head_size=32, rotary=True, dtype="float16",
                   kv_bits=8, quant_type="PER_CHANNEL"), {}, "static"),
]


@_settings
@given(draws())
@example(FOUND[0])
@example(FOUND[1])
@example(FOUND[2])
@example(FOUND[3])
def test_matches_onnxruntime(d: Draw):
    _property(d)


if SEED is not None:
    test_matches_onnxruntime = seed(int(SEED))(test_matches_onnxruntime)
