"""Tests of the GroupQueryAttention ONNX harness (gqa_torch_mlir.testing.gqa_onnx).

They pin the oracle: onnxruntime's CPU kernel must agree with the small numpy
reference below, and compare() must catch (only) the differences that matter.
Dimension letters as in the harness module (B, S, P, T, H, Hkv, G, Dh, M).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

from gqa_torch_mlir.testing.gqa_onnx import (
    GQAConfig,
    compare,
    make_inputs,
    make_model,
    run_onnxruntime,
)

# ---------------------------------------------------------------------------
# numpy reference
# ---------------------------------------------------------------------------


def _split_qkv(cfg: GQAConfig, feeds: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """query_BHSDh, key_BHkvSDh, value_BHkvSDh in float64."""
    B, S, H, Hkv, Dh = cfg.batch, cfg.seq, cfg.num_heads, cfg.kv_num_heads, cfg.head_size
    if cfg.packed:
        qkv = feeds["query"].astype(np.float64)
        q, k, v = np.split(qkv, [H * Dh, (H + Hkv) * Dh], axis=-1)
    else:
        q, k, v = (feeds[n].astype(np.float64) for n in ("query", "key", "value"))
    query_BHSDh = q.reshape(B, S, H, Dh).transpose(0, 2, 1, 3)
    key_BHkvSDh = k.reshape(B, S, Hkv, Dh).transpose(0, 2, 1, 3)
    value_BHkvSDh = v.reshape(B, S, Hkv, Dh).transpose(0, 2, 1, 3)
    return query_BHSDh, key_BHkvSDh, value_BHkvSDh


def _rotate_half(x_NSDh: np.ndarray, cos_SDh2: np.ndarray, sin_SDh2: np.ndarray) -> np.ndarray:
    """Non-interleaved rotary: x1 = x[:Dh/2], x2 = x[Dh/2:]."""
    half = x_NSDh.shape[-1] // 2
    x1, x2 = x_NSDh[..., :half], x_NSDh[..., half:]
    return np.concatenate([x1 * cos_SDh2 - x2 * sin_SDh2, x2 * cos_SDh2 + x1 * sin_SDh2], axis=-1)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attend_one(cfg: GQAConfig, q_HSDh, k_HkvTDh, v_HkvTDh, past_len: int, scale: float) -> np.ndarray:
    """Causal grouped attention for one batch row; returns out_SHDh."""
    S, T = q_HSDh.shape[1], k_HkvTDh.shape[1]
    k_HTDh = np.repeat(k_HkvTDh, cfg.group, axis=0)  # query head h uses kv head h // G
    v_HTDh = np.repeat(v_HkvTDh, cfg.group, axis=0)
    scores_HST = np.einsum("hsd,htd->hst", q_HSDh, k_HTDh) * scale
    visible_ST = np.arange(T)[None, :] <= past_len + np.arange(S)[:, None]
    scores_HST = np.where(visible_ST, scores_HST, -np.inf)
    out_HSDh = np.einsum("hst,htd->hsd", _softmax(scores_HST), v_HTDh)
    return out_HSDh.transpose(1, 0, 2)


def reference_gqa(cfg: GQAConfig, feeds: dict, scale: float | None = None) -> dict[str, np.ndarray]:
    """GQA in float64; present rows beyond past_lens[b] + S are left zero."""
    B, S, P, Dh = cfg.batch, cfg.seq, cfg.past, cfg.head_size
    scale = 1.0 / np.sqrt(Dh) if scale is None else scale
    query_BHSDh, key_BHkvSDh, value_BHkvSDh = _split_qkv(cfg, feeds)
    past_lens = feeds["seqlens_k"].astype(np.int64) + 1 - S
    present_key_BHkvTDh = np.zeros((B, cfg.kv_num_heads, P + S, Dh))
    present_value_BHkvTDh = np.zeros_like(present_key_BHkvTDh)
    output_BSHDh = np.zeros((B, S, cfg.num_heads, Dh))
    for b, past_len in enumerate(past_lens):
        q_HSDh, k_HkvSDh = query_BHSDh[b], key_BHkvSDh[b]
        if cfg.rotary:
            pos_S = past_len + np.arange(S)
            cos_SDh2 = feeds["cos_cache"].astype(np.float64)[pos_S]
            sin_SDh2 = feeds["sin_cache"].astype(np.float64)[pos_S]
            q_HSDh = _rotate_half(q_HSDh, cos_SDh2, sin_SDh2)
            k_HkvSDh = _rotate_half(k_HkvSDh, cos_SDh2, sin_SDh2)
        n = past_len + S
        present_key_BHkvTDh[b, :, :n] = np.concatenate([feeds["past_key"][b, :, :past_len], k_HkvSDh], axis=1)
        present_value_BHkvTDh[b, :, :n] = np.concatenate([feeds["past_value"][b, :, :past_len], value_BHkvSDh[b]], axis=1)
        output_BSHDh[b] = _attend_one(
            cfg, q_HSDh, present_key_BHkvTDh[b, :, :n], present_value_BHkvTDh[b, :, :n], past_len, scale
        )
    return {
        "output": output_BSHDh.reshape(B, S, cfg.num_heads * Dh).astype(np.float32),
        "present_key": present_key_BHkvTDh.astype(np.float32),
        "present_value": present_value_BHkvTDh.astype(np.float32),
    }


# ---------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------

CONFIGS = [
    GQAConfig(),  # first token, P = 0
    GQAConfig(seq=5, past=0),  # prefill
    GQAConfig(batch=2, seq=4, past=0, rotary=True),  # batched prefill with rotary
    GQAConfig(seq=1, past=6),  # decode
    GQAConfig(seq=3, past=5, rotary=True),  # chunked prompt after a past
    GQAConfig(seq=3, past=5, packed=True),
    GQAConfig(seq=2, past=4, packed=True, rotary=True, rotary_cache_len=32),
    GQAConfig(batch=2, seq=1, past=5, past_lens=(5, 2)),  # ragged decode
    GQAConfig(batch=3, seq=1, past=6, past_lens=(3, 6, 0), rotary=True),
    GQAConfig(seq=3, past=4, num_heads=6, kv_num_heads=3, head_size=8, dynamic=True),
    GQAConfig(seq=2, past=3, num_heads=4, kv_num_heads=4, trailing_empty=False),  # MHA, H == Hkv
    GQAConfig(batch=2, seq=1, past=4, num_heads=8, kv_num_heads=1, past_lens=(1, 4), packed=True, dynamic=True),  # MQA
    GQAConfig(seq=3, past=5, rotary=True, dtype="float16"),
    GQAConfig(batch=2, seq=1, past=5, past_lens=(5, 3), packed=True, rotary=True, dtype="float16", dynamic=True, trailing_empty=False),
]


def _run(cfg: GQAConfig, **kw) -> tuple[dict, dict]:
    feeds = make_inputs(cfg, seed=1)
    return feeds, run_onnxruntime(make_model(cfg, **kw), feeds)


# ---------------------------------------------------------------------------
# oracle vs reference
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_onnxruntime_matches_numpy_reference(cfg: GQAConfig) -> None:
    feeds, ort_out = _run(cfg)
    H, Hkv, Dh = cfg.num_heads, cfg.kv_num_heads, cfg.head_size
    assert ort_out["output"].shape == (cfg.batch, cfg.seq, H * Dh)
    assert ort_out["present_key"].shape == (cfg.batch, Hkv, cfg.past + cfg.seq, Dh)
    assert all(a.dtype == cfg.np_dtype for a in ort_out.values())
    assert compare(cfg, reference_gqa(cfg, feeds), ort_out, feeds) == []


def test_extra_attrs_reach_the_node() -> None:
    cfg = GQAConfig(seq=2, past=3)
    node = make_model(cfg, extra_attrs={"scale": 0.5}).graph.node[0]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}["scale"] == 0.5
    feeds, ort_out = _run(cfg, extra_attrs={"scale": 0.5})
    assert compare(cfg, reference_gqa(cfg, feeds, scale=0.5), ort_out, feeds) == []
    assert compare(cfg, reference_gqa(cfg, feeds), ort_out, feeds) != []


def test_rotary_is_rotate_half_not_interleaved() -> None:
    """The rotary configs above are not vacuous: the interleaved variant differs."""
    cfg = GQAConfig(seq=3, past=5, rotary=True)
    feeds, ort_out = _run(cfg, extra_attrs={"rotary_interleaved": 1})
    msgs = compare(cfg, reference_gqa(cfg, feeds), ort_out, feeds)
    assert any(m.startswith("output[b=0]") for m in msgs)
    assert any(m.startswith("present_key[b=0]") for m in msgs)
    assert not any(m.startswith("present_value") for m in msgs)


def test_packed_and_separate_inputs_agree() -> None:
    sep = GQAConfig(seq=3, past=4, rotary=True)
    packed = dataclasses.replace(sep, packed=True)
    feeds, want = _run(sep)
    _, got = _run(packed)
    assert compare(sep, got, want, feeds, atol=0, rtol=0) == []


# ---------------------------------------------------------------------------
# model and inputs
# ---------------------------------------------------------------------------


def test_node_input_slots() -> None:
    full = make_model(GQAConfig(packed=True)).graph.node[0]
    assert list(full.input) == ["query", "", "", "past_key", "past_value", "seqlens_k", "total_sequence_length", "", "", "", "", ""]
    assert full.domain == "com.microsoft" and full.op_type == "GroupQueryAttention"
    short = make_model(GQAConfig(rotary=True, trailing_empty=False)).graph.node[0]
    assert list(short.input) == ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache"]


def test_dynamic_dims_are_symbolic() -> None:
    graph = make_model(GQAConfig(rotary=True, dynamic=True)).graph
    dims = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in list(graph.input) + list(graph.output)
    }
    assert dims["query"] == ["batch", "seq", 64]
    assert dims["past_key"] == ["batch", 2, "past", 16]
    assert dims["cos_cache"] == ["max_seq", 8]
    assert dims["present_value"] == ["batch", 2, "total", 16]
    assert dims["total_sequence_length"] == []


def test_inputs_follow_seqlens_semantics() -> None:
    cfg = GQAConfig(batch=3, seq=1, past=6, past_lens=(6, 2, 0), rotary=True, dtype="float16")
    feeds = make_inputs(cfg)
    assert feeds["seqlens_k"].dtype == np.int32 and feeds["seqlens_k"].tolist() == [6, 2, 0]
    assert feeds["total_sequence_length"].shape == () and int(feeds["total_sequence_length"]) == 7
    assert feeds["cos_cache"].shape == (15, 8) and feeds["cos_cache"].dtype == np.float16
    assert "key" in feeds and feeds["past_key"].shape == (3, 2, 6, 16)
    junk = np.abs(feeds["past_key"][1, :, 2:].astype(np.float32))
    assert junk.max() > 50  # invalid past rows hold large junk
    np.testing.assert_allclose(feeds["sin_cache"][3, 0], np.sin(3.0), atol=1e-3)


def test_prefill_seqlens() -> None:
    feeds = make_inputs(GQAConfig(batch=2, seq=4, past=0))
    assert feeds["seqlens_k"].tolist() == [3, 3] and int(feeds["total_sequence_length"]) == 4
    assert feeds["past_key"].shape == (2, 2, 0, 16)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(num_heads=6, kv_num_heads=4), "multiple of kv_num_heads"),
        (dict(head_size=15), "even"),
        (dict(batch=2, past=3, past_lens=(3,)), "expected batch=2"),
        (dict(batch=2, past=3, past_lens=(3, 4)), "[0, past=3]"),
        (dict(batch=2, past=3, past_lens=(1, 2)), "must equal past=3"),
        (dict(past=3, seq=2, rotary=True, rotary_cache_len=4), "rotary_cache_len"),
        (dict(dtype="bfloat16"), "dtype"),
        (dict(batch=2, seq=2, past=3), "batch == 1"),
    ],
)
def test_config_validation(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError) as info:
        GQAConfig(**kwargs)
    assert words in str(info.value)


def test_name() -> None:
    cfg = GQAConfig(batch=2, seq=1, past=5, packed=True, rotary=True, dtype="float16", dynamic=True)
    assert cfg.name == "b2_s1_p5_h4kv2_d16_packed_rot_f16_dyn"
    assert "pl5-2" in GQAConfig(batch=2, seq=1, past=5, past_lens=[5, 2]).name
    assert len({c.name for c in CONFIGS}) == len(CONFIGS)


# ---------------------------------------------------------------------------
# compare()
# ---------------------------------------------------------------------------

RAGGED = GQAConfig(batch=2, seq=1, past=5, past_lens=(5, 2))  # seqlens_k = [5, 2]


@pytest.fixture(scope="module")
def ragged_run() -> tuple[dict, dict]:
    return _run(RAGGED)


def _copy(outs: dict) -> dict:
    return {k: v.copy() for k, v in outs.items()}


def test_compare_flags_output_row(ragged_run) -> None:
    feeds, want = ragged_run
    got = _copy(want)
    got["output"][1, 0, 7] += 0.5
    msgs = compare(RAGGED, got, want, feeds)
    assert len(msgs) == 1 and msgs[0].startswith("output[b=1]:")
    assert "0.5" in msgs[0] and "(1,0,7)" in msgs[0]


def test_compare_flags_valid_cache_row(ragged_run) -> None:
    feeds, want = ragged_run
    got = _copy(want)
    got["present_value"][1, 1, 2, 3] -= 0.25  # row 2 == seqlens_k[1]: the new token
    msgs = compare(RAGGED, got, want, feeds)
    assert msgs == [m for m in msgs if m.startswith("present_value[b=1]: rows [0,3) head 1")]
    assert len(msgs) == 1 and "(1,1,2,3)" in msgs[0]


def test_compare_ignores_cache_rows_beyond_seqlens(ragged_run) -> None:
    feeds, want = ragged_run
    got = _copy(want)
    got["present_key"][1, :, 3:] = 1e4  # b=1 holds 3 valid rows
    assert compare(RAGGED, got, want, feeds) == []
    # a longer present is another cache (fed back, it would not be onnxruntime's): reported
    got["present_key"] = np.concatenate([got["present_key"], np.full((2, 2, 4, 16), 7.0, np.float32)], axis=2)
    assert compare(RAGGED, got, want, feeds) == ["present_key: shape (2, 2, 10, 16) != onnxruntime's (2, 2, 6, 16) ([B,Hkv,T,Dh])"]


def test_compare_reports_shapes_and_missing(ragged_run) -> None:
    feeds, want = ragged_run
    got = _copy(want)
    del got["present_value"]
    got["present_key"] = got["present_key"][:, :, :4]  # b=0 needs 6 rows
    got["output"] = got["output"][:1]
    msgs = "\n".join(compare(RAGGED, got, want, feeds))
    assert "present_value: missing" in msgs
    assert "present_key: shape (2, 2, 4, 16) != onnxruntime's (2, 2, 6, 16)" in msgs
    assert "output: shape (1, 1, 64)" in msgs


def test_compare_catches_attending_junk_past_rows(ragged_run) -> None:
    """An implementation that ignores seqlens_k and attends all P past rows is caught."""
    feeds, want = ragged_run
    wrong_feeds = dict(feeds, seqlens_k=np.full(2, RAGGED.past, np.int32))
    wrong = reference_gqa(RAGGED, wrong_feeds)
    msgs = compare(RAGGED, wrong, want, feeds)
    assert any(m.startswith("output[b=1]") for m in msgs)
    assert not any("[b=0]" in m for m in msgs)


def test_compare_nan_and_f16_tolerance() -> None:
    cfg = GQAConfig(seq=2, past=3, dtype="float16")
    feeds, want = _run(cfg)
    got = _copy(want)
    got["output"] = (want["output"].astype(np.float32) + 5e-3).astype(np.float16)  # within 2e-2
    assert compare(cfg, got, want, feeds) == []
    got["output"][0, 1, 0] = np.nan
    msgs = compare(cfg, got, want, feeds)
    assert len(msgs) == 1 and "output[b=0]" in msgs[0] and "nan" in msgs[0]
