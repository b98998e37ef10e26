"""The fused decode kernel (kernels/decode_attention.py) alone against numpy, and where the
iree-cpu lowering uses it (attention=fused, its default there) and where it does not."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError, RuntimeInvocationError
from gqa_torch_mlir.kernels import present_write
from gqa_torch_mlir.kernels.decode_attention import CHUNK_ROWS, SPLIT_ROWS, KernelShape, render
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir.passes.convert_onnx_gqa_to_torch import FUSED_OUTSIDE_IREE, apply_lowerings
from gqa_torch_mlir.pipeline import import_onnx
from gqa_torch_mlir.testing.filecheck import filecheck
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.standard_attention import AttentionConfig as AC
from gqa_torch_mlir.testing.standard_attention import MaskSpec as AM
from gqa_torch_mlir.testing.standard_attention import make_inputs as make_attention_inputs
from gqa_torch_mlir.testing.standard_attention import make_model as make_attention_model
from gqa_torch_mlir.testing.standard_attention import run_onnxruntime as run_attention_onnxruntime

iree_compiler = pytest.importorskip("iree.compiler.tools")
from gqa_torch_mlir.backends.iree import IreeCompiledModule, IreeCpuBackend  # noqa: E402

HEADS = dict(num_heads=8, kv_num_heads=2, head_size=64)


def _dims(shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def compiled_kernel(shape: KernelShape) -> IreeCompiledModule:
    """@f(q, k, v, mask[, sinks]): the kernel's function called with n = the mask's columns."""
    symbol, text = render(shape, 21)
    q = f"tensor<{_dims([shape.batch, shape.kv_heads, shape.group, shape.head_size])}xf32>"
    kv = f"tensor<{_dims([shape.batch, shape.kv_heads, shape.rows, shape.head_size])}xf32>"
    m = f"tensor<{_dims([shape.batch, shape.seq, None])}xf32>"
    z, zt = (", %z", f", tensor<{shape.kv_heads}x{shape.group}xf32>") if shape.sinks else ("", "")
    text += f"""
func.func @f(%q: {q}, %k: {kv}, %v: {kv}, %m: {m}{z}{zt and ": " + zt[2:]}) -> {q} {{
  %c2 = arith.constant 2 : index
  %n = tensor.dim %m, %c2 : {m}
  %r = func.call @{symbol}(%q, %k, %v, %m{z}, %n) : ({q}, {kv}, {kv}, {m}{zt}, index) -> {q}
  return %r : {q}
}}"""
    vmfb = iree_compiler.compile_str(text, target_backends=["llvm-cpu"], input_type="none",
                                     extra_args=["--iree-llvmcpu-target-cpu=host"])
    return IreeCompiledModule(vmfb, "f", [np.float32], threads=1)


def compiled_writing_kernel(shape: KernelShape) -> IreeCompiledModule:
    """@f(q, past_k, past_v, mask, new_k, new_v, start) -> (attention, present_k, present_v): the
    write variant called with n = the mask's columns."""
    symbol, text = render(shape, 21)
    B, H, D = shape.batch, shape.kv_heads, shape.head_size
    q, m = f"tensor<{_dims([B, H, shape.group, D])}xf32>", f"tensor<{_dims([B, shape.seq, None])}xf32>"
    p, new, kv = (f"tensor<{_dims([B, H, rows, D])}xf32>" for rows in (shape.past, shape.seq, shape.rows))
    text += f"""
func.func @f(%q: {q}, %k: {p}, %v: {p}, %m: {m}, %nk: {new}, %nv: {new}, %start: tensor<i64>) -> ({q}, {kv}, {kv}) {{
  %c2 = arith.constant 2 : index
  %n = tensor.dim %m, %c2 : {m}
  %s64 = tensor.extract %start[] : tensor<i64>
  %s = arith.index_cast %s64 : i64 to index
  %r:3 = func.call @{symbol}(%q, %k, %v, %m, %nk, %nv, %n, %s) : ({q}, {p}, {p}, {m}, {new}, {new}, index, index) -> ({q}, {kv}, {kv})
  return %r#0, %r#1, %r#2 : {q}, {kv}, {kv}
}}"""
    vmfb = iree_compiler.compile_str(text, target_backends=["llvm-cpu"], input_type="none",
                                     extra_args=["--iree-llvmcpu-target-cpu=host"])
    return IreeCompiledModule(vmfb, "f", [np.float32] * 3, threads=2)


def reference(q, k, v, bias, softcap=0.0, sinks=None):
    """softmax(cap(q.k^T) + bias over the rows whose bias is not -inf) . v in f64, grouped row
    g*S + s taking bias row s, cap(x) = c tanh(x / c) if softcap c > 0, the denominator with
    e^(z - m) of the row's sink logit z (sinks [Hkv,G*S]) if given; a row with no such key gives
    zeros."""
    S, n = bias.shape[1:]
    bias_BGR = np.tile(bias, (1, q.shape[2] // S, 1))  # [B,S,n] -> [B,G*S,n], row g*S + s
    visible = bias_BGR != -np.inf
    scores = np.einsum("bhgd,bhrd->bhgr", q.astype(np.float64), np.nan_to_num(k[:, :, :n]).astype(np.float64))
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    scores = np.where(visible[:, None], scores + bias_BGR[:, None], -np.inf)
    top = scores.max(-1, keepdims=True)
    sink = None if sinks is None else sinks.astype(np.float64)[None, :, :, None]  # [1,Hkv,G*S,1]
    if sink is not None:
        top = np.maximum(top, sink)
    e = np.exp(scores - np.where(np.isinf(top), 0.0, top))
    den = e.sum(-1, keepdims=True)
    if sink is not None:
        den = den + np.exp(sink - top)
    return np.einsum("bhgr,bhrd->bhgd", e, np.nan_to_num(v[:, :, :n])) / np.where(den == 0, 1.0, den)


# (B or None, Hkv, G*S, Dh, T or None, S), batch rows, rows read: chunk tails, several blocks,
# one row, short chunks of S query rows (each with its own bias row)
SHAPES = [
    ((1, 8, 4, 128, None, 1), 1, 1000),
    ((None, 2, 7, 64, None, 1), 3, SPLIT_ROWS + CHUNK_ROWS + 3),
    ((2, 4, 1, 96, 2 * SPLIT_ROWS + 40, 1), 2, 2 * SPLIT_ROWS + 1),
    ((None, 1, 16, 256, None, 1), 2, 9),
    ((1, 8, 4, 128, None, 1), 1, 1),
    ((None, 2, 12, 64, None, 3), 2, SPLIT_ROWS + 5),
    ((1, 8, 4, 128, 300, 4), 1, 257),
    ((None, 2, 4, 64, None, 1, 5.0), 2, SPLIT_ROWS + 9),  # softcap (Gemma 2's: 50, on scores of a few units here)
    ((None, 4, 6, 32, None, 2, 0.0, True), 2, 40),  # sinks (head_sink, smooth_softmax)
    ((None, 2, 8, 64, 64, 1, 30.0, True), 1, 1),
]


@pytest.mark.parametrize("shape,batch,n", SHAPES, ids=lambda v: KernelShape(*v).symbol() if isinstance(v, tuple) and len(v) >= 6 else str(v))
def test_kernel_matches_numpy(shape, batch, n):
    """Every shape form against numpy, with a bias of 0, -inf and finite values (per query row
    where S > 1, -inf alike for all of them); batch row 0 has rows of bias -inf holding NaN (never
    read), batch row 1 (if any) no key to see (zeros, as onnxruntime gives)."""
    s = KernelShape(*shape)
    rng = np.random.default_rng(n)
    rows = s.rows or n + 5
    q = (rng.standard_normal((batch, s.kv_heads, s.group, s.head_size)) / np.sqrt(s.head_size)).astype(np.float32)
    k = rng.standard_normal((batch, s.kv_heads, rows, s.head_size)).astype(np.float32)
    v = rng.standard_normal((batch, s.kv_heads, rows, s.head_size)).astype(np.float32)
    visible = rng.random((batch, n)) < 0.9
    visible[0, 0] = n == 1 or visible[0, 0]
    k[0, :, :n][:, ~visible[0]] = np.nan
    v[0, :, :n][:, ~visible[0]] = np.nan
    if batch > 1:
        visible[1] = False
        k[1], v[1] = np.nan, np.nan
    finite = np.where(rng.random((batch, s.seq, n)) < 0.5, 0.0, rng.standard_normal((batch, s.seq, n)))
    bias = np.where(visible[:, None], finite, -np.inf).astype(np.float32)  # [B,S,n]
    q = q * (4.0 if s.softcap else 1.0)  # scores of a few units: the cap bends them
    sinks = rng.standard_normal((s.kv_heads, s.group)).astype(np.float32) if s.sinks else None
    out = np.asarray(compiled_kernel(s).invoke("f", q, k, v, bias, *([] if sinks is None else [sinks]))[0])
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, reference(q, k, v, bias, s.softcap, sinks), rtol=0, atol=2e-6)
    if batch > 1:
        assert not out[1].any()


# (B, Hkv, G*S, Dh, T, S), rows read n, first new row: the new row last (a decode step), inside
# the past (the rows after it keep the past's), several blocks with rows not read, rows of 96 and
# 24 floats (not whole 64-byte lines), a short chunk, rows of 0 after the past (start < P: T - S.. 0)
WRITES = [
    ((1, 8, 4, 128, 1024, 1), 1024, 1023),
    ((1, 2, 4, 64, 40, 1), 40, 17),
    ((2, 3, 2, 96, 2 * SPLIT_ROWS + 7, 1), SPLIT_ROWS + 3, 2 * SPLIT_ROWS + 6),
    ((1, 2, 6, 24, 33, 3), 33, 30),
    ((1, 1, 8, 256, 20, 2), 12, 5),
    ((1, 8, 2, 256, 1030, 1), 1030, 1029),  # several SUPER_ROWS blocks of rows, the last one short
    ((1, 2, 16, 256, 300, 1), 280, 299),  # the largest group and head (their stack arrays fit now)
]


@pytest.mark.parametrize("shape,n,start", WRITES, ids=lambda v: KernelShape(*v, writes=True).symbol() if isinstance(v, tuple) else str(v))
def test_kernel_writes_present(shape, n, start):
    """The write variant: present = the past with the new rows at ``start`` (every other row after
    the past 0), whatever rows attention reads, and the attention over present's first n rows."""
    s = KernelShape(*shape, writes=True)
    B, H, D, P, S = s.batch, s.kv_heads, s.head_size, s.past, s.seq
    rng = np.random.default_rng(start)
    q = (rng.standard_normal((B, H, s.group, D)) / np.sqrt(D)).astype(np.float32)
    past_k, past_v = (rng.standard_normal((B, H, P, D)).astype(np.float32) for _ in range(2))
    new_k, new_v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(2))
    read = rng.random((B, 1, n)) < 0.8  # -inf: a key not read (by every query row alike)
    read[:, :, 0] = True
    bias = np.where(read, rng.standard_normal((B, S, n)), -np.inf).astype(np.float32)
    want_k, want_v = (np.concatenate([p, np.zeros((B, H, S, D), np.float32)], 2) for p in (past_k, past_v))
    want_k[:, :, start:start + S], want_v[:, :, start:start + S] = new_k, new_v
    out, have_k, have_v = compiled_writing_kernel(s).invoke("f", q, past_k, past_v, bias, new_k, new_v, np.array(start, np.int64))
    np.testing.assert_array_equal(have_k, want_k)
    np.testing.assert_array_equal(have_v, want_v)
    np.testing.assert_allclose(out, reference(q, want_k, want_v, bias), rtol=0, atol=2e-6)


def compiled_lengths_kernel(shape: KernelShape) -> IreeCompiledModule:
    """@f(q, k, v, mask, new_k, new_v, lens) -> (attention, present_k, present_v): the variant whose
    first new row and rows read (``lens``, i64 [2]) stay on the device."""
    symbol, text = render(shape, 21)
    B, H, D = shape.batch, shape.kv_heads, shape.head_size
    q, m = f"tensor<{_dims([B, H, shape.group, D])}xf32>", f"tensor<{_dims([B, shape.seq, None])}xf32>"
    fed, new, kv = (f"tensor<{_dims([B, H, rows, D])}xf32>" for rows in (shape.past if shape.writes else shape.rows, shape.seq, shape.rows))
    text += f"""
func.func @f(%q: {q}, %k: {fed}, %v: {fed}, %m: {m}, %nk: {new}, %nv: {new}, %lens: tensor<2xi64>) -> ({q}, {kv}, {kv}) {{
  %r:3 = func.call @{symbol}(%q, %k, %v, %m, %nk, %nv, %lens) : ({q}, {fed}, {fed}, {m}, {new}, {new}, tensor<2xi64>) -> ({q}, {kv}, {kv})
  return %r#0, %r#1, %r#2 : {q}, {kv}, {kv}
}}"""
    vmfb = iree_compiler.compile_str(text, target_backends=["llvm-cpu"], input_type="none",
                                     extra_args=["--iree-llvmcpu-target-cpu=host"])
    return IreeCompiledModule(vmfb, "f", [np.float32] * 3, threads=2)


# (B, Hkv, G*S, Dh, T, S), writes, rows read n, first new row: a fixed-capacity buffer written in
# place (one block; two blocks, the second not read; a short chunk), a growing cache (one block,
# two), the first new row out of the cache (nothing written in place)
LENGTHS = [
    ((1, 8, 4, 128, 64, 1), False, 41, 40),
    ((1, 2, 4, 64, SPLIT_ROWS + 40, 1), False, 300, 299),
    ((1, 2, 6, 24, 33, 3), False, 20, 17),
    ((1, 8, 4, 128, 1024, 1), True, 1024, 1023),
    ((2, 3, 2, 96, 2 * SPLIT_ROWS + 7, 1), True, SPLIT_ROWS + 3, 2 * SPLIT_ROWS + 6),
    ((1, 2, 4, 64, 40, 1), False, 40, 40),
    ((1, 8, 2, 256, 1030, 1), True, 1030, 1029),  # non-temporal stores (with T at run time: picked by the kernel)
]
# every case again with T known at run time only (the kernel's grid and ``_put`` take it; the
# write variant takes P from the past fed)
LENGTHS += [(shape, writes, n, start, True) for shape, writes, n, start in LENGTHS]
LENGTHS = [case if len(case) == 5 else case + (False,) for case in LENGTHS]


@pytest.mark.parametrize("shape,writes,n,start,run_time_rows", LENGTHS,
                         ids=lambda v: KernelShape(*v, writes=True).symbol() if isinstance(v, tuple) else str(v))
def test_kernel_lengths_from_the_device(shape, writes, n, start, run_time_rows):
    """The lengths variant: the new rows at ``start`` (a fixed-capacity buffer's in place, the
    others kept; a growing cache's present as the write variant makes it), and the attention over
    the first n rows only, read off the device: rows past n hold NaN under a finite bias."""
    s = KernelShape(*shape, writes=writes, lengths=True)
    B, H, D, T, S = s.batch, s.kv_heads, s.head_size, s.rows, s.seq
    if run_time_rows:
        s = dataclasses.replace(s, rows=None)
    rng = np.random.default_rng(n)
    q = (rng.standard_normal((B, H, s.group, D)) / np.sqrt(D)).astype(np.float32)
    rows_fed = T - S if writes else T
    k, v = (rng.standard_normal((B, H, rows_fed, D)).astype(np.float32) for _ in range(2))
    new_k, new_v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(2))
    want_k, want_v = (np.concatenate([c, np.zeros((B, H, T - rows_fed, D), np.float32)], 2) for c in (k, v))
    want_k[:, :, start:start + S], want_v[:, :, start:start + S] = new_k[:, :, :T - start], new_v[:, :, :T - start]
    if not writes:  # rows past n: NaN (never read), kept as they are
        k[:, :, max(n, start + S):], v[:, :, max(n, start + S):] = np.nan, np.nan
        want_k[:, :, max(n, start + S):], want_v[:, :, max(n, start + S):] = np.nan, np.nan
    bias = rng.standard_normal((B, S, T)).astype(np.float32)  # finite past n: n alone bounds the rows read
    out, have_k, have_v = compiled_lengths_kernel(s).invoke("f", q, k, v, bias, new_k, new_v, np.array([start, n], np.int64))
    np.testing.assert_array_equal(have_k, want_k)
    np.testing.assert_array_equal(have_v, want_v)
    np.testing.assert_allclose(out, reference(q, want_k, want_v, bias[:, :, :n]), rtol=0, atol=2e-6)


@pytest.mark.parametrize("rows", [1030, 20, None], ids=["t1030", "t20", "run_time_t"])
def test_present_stores_bypass_the_caches(rows):
    """The write variant stores present non-temporally, whatever its size (it is not read again in
    the step: the chunks read the past's rows, still in cache), each row once, in blocks of
    SUPER_ROWS rows written before their chunks are read."""
    text = render(KernelShape(1, 8, 2, 256, rows, 1, writes=True, lengths=True), 21)[1]
    stores = text.count('"vector.store"(')
    assert stores == 6 and text.count("<{nontemporal = true}>") == stores  # K and V: new, past, zero rows
    assert f"%cW = arith.constant {present_write.SUPER_ROWS} : index" in text


def lowered_text(cfg: GQAConfig, attention=None) -> str:
    options = LoweringOptions.for_backend("iree-cpu", attention)
    return str(IreeCpuBackend(threads=1, options=options).lower(make_model(cfg)).module)


def test_decode_steps_take_the_kernel(tmp_path):
    """A decode step dispatches the kernel, reading a fixed-capacity buffer in place (the whole
    buffer and the rows read, no slice of it).  Its sizes declared, the new row is written in
    place by the kernel's put and the lengths stay on the device (``_dl``: an i64 [2] operand,
    the presents the kernel's); a run-time query length or cache size takes the rows read from
    the host."""
    text = lowered_text(GQAConfig(batch=1, seq=1, past=64, past_lens=(40,), fixed_capacity=True, **HEADS))
    filecheck(text, """
        CHECK: %[[PUT:.+]]:2 = flow.dispatch @[[SYM:gqa_decode_attention_b1_hkv2_g4_dh64_t64_dl]]_executable::@[[SYM]]_put[{{.+}}](%[[K:.+]], %[[V:.+]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) : ({{.+}}, tensor<2xi64>, index) -> (%[[K]], %[[V]])
        CHECK: flow.dispatch @[[SYM]]_executable::@[[SYM]]_attend[{{.+}}](%{{.+}}, %[[PUT]]#0, %[[PUT]]#1,
        CHECK-DAG: %[[PK:.+]] = torch_c.from_builtin_tensor %[[PUT]]#0
        CHECK-DAG: %[[PV:.+]] = torch_c.from_builtin_tensor %[[PUT]]#1
        CHECK: return %{{.+}}, %[[PK]], %[[PV]]{{(, %.+)?}} :
        """, tmp_path)
    assert text.count("flow.dispatch @gqa_decode_attention_b1_hkv2_g4_dh64_t64_dl_executable") == 2  # put, attend: one block, no combine
    assert "torch.aten.matmul" not in text
    two_blocks = lowered_text(GQAConfig(batch=1, seq=1, past=SPLIT_ROWS + 1, past_lens=(40,), fixed_capacity=True, **HEADS))
    assert two_blocks.count(f"flow.dispatch @gqa_decode_attention_b1_hkv2_g4_dh64_t{SPLIT_ROWS + 1}_dl_executable") == 3  # and combine
    dynamic = lowered_text(GQAConfig(batch=1, seq=1, past=64, past_lens=(40,), fixed_capacity=True, dynamic=True, **HEADS))
    assert "flow.dispatch @gqa_decode_attention" in dynamic and "_dl_executable" not in dynamic


@pytest.mark.parametrize("seqlens_k", [-5, 64, 1000])
def test_failed_shared_step_leaves_the_buffer(seqlens_k):
    """The checks are read at the end of the step, after the kernel ran: where the new row does not
    fit the buffer (past_len outside [0, T - S]), the lengths variant writes none, so a
    fixed-capacity buffer fed in place is as it was (a row clamped into it would overwrite valid
    rows), and the call fails naming the broken rule."""
    cfg = GQAConfig(batch=1, seq=1, past=64, past_lens=(40,), fixed_capacity=True, **HEADS)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=4)
    session = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    _, key, value = session.run(None, feeds)
    key_before, value_before = np.array(key), np.array(value)
    with pytest.raises(RuntimeInvocationError, match="seqlens_k|total_sequence_length"):
        session.run(None, dict(feeds, past_key=key, past_value=value, seqlens_k=np.array([seqlens_k], np.int32)))
    np.testing.assert_array_equal(np.asarray(key), key_before)
    np.testing.assert_array_equal(np.asarray(value), value_before)


# Growing caches of one batch row (a new present every step): the kernel writes present as it
# reads the past; two blocks a KV head with rotary; head sinks; a sliding window.
GROWING = [
    GQAConfig(batch=1, seq=1, past=40, **HEADS),
    GQAConfig(batch=1, seq=1, past=1030, num_heads=8, kv_num_heads=4, head_size=64, rotary=True),
    GQAConfig(batch=1, seq=1, past=40, head_sink=True, **HEADS),
    GQAConfig(batch=1, seq=1, past=30, window=8, **HEADS),
]


@pytest.mark.parametrize("cfg", GROWING, ids=lambda c: c.name)
def test_growing_steps_write_present_in_the_kernel(cfg, tmp_path):
    """The presents the step returns are the write variant's (the copy built for the other forms
    is left dead, for IREE to drop), and every output against onnxruntime's kernel.  The attend
    dispatch's results: the attention and the presents (one block of rows a KV head), or the
    blocks' partial results and the presents (several)."""
    first = 1 if cfg.past + 1 <= SPLIT_ROWS else 2
    filecheck(lowered_text(cfg), f"""
        CHECK: %[[PART:.+]]:{first + 2} = flow.dispatch @{{{{.+}}}}_write_dl_executable::@{{{{.+}}}}_write_dl_attend
        CHECK: %[[PK:.+]] = torch_c.from_builtin_tensor %[[PART]]#{first}
        CHECK: %[[PV:.+]] = torch_c.from_builtin_tensor %[[PART]]#{first + 1}
        CHECK: return %{{{{.+}}}}, %[[PK]], %[[PV]]{{{{(, %.+)?}}}} :
        """, tmp_path)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=4)
    session = InferenceSession(model, backend="iree-cpu", threads=2)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    problems = compare(cfg, got, run_onnxruntime(model, feeds), feeds)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("cfg,attention", [
    (GQAConfig(batch=1, seq=5, past=8, **HEADS), None),  # 20 grouped query rows: more than the kernel's 16
    (GQAConfig(batch=1, seq=1, past=8, attention_bias="B1", **HEADS), None),  # a bias per head: decomposed
    (GQAConfig(batch=1, seq=1, past=8, **HEADS), "decomposed"),
], ids=["long_chunk", "attention_bias", "decomposed"])
def test_other_steps_stay_decomposed(cfg, attention):
    assert "gqa_decode_attention" not in lowered_text(cfg, attention)


# Short chunks (speculative decoding, a draft's rows checked at once): S query rows per step with
# a causal span each, after a past in a growing cache, in a shared buffer, under a sliding
# window, 16 grouped rows, and padded query rows of two batch rows
# (onnxruntime takes several batch rows of a chunk after a past only with query_seqlens).
SHORT_CHUNKS = [
    GQAConfig(batch=1, seq=4, past=37, **HEADS),
    GQAConfig(batch=1, seq=3, past=70, past_lens=(50,), fixed_capacity=True, rotary=True, **HEADS),
    GQAConfig(batch=1, seq=2, past=40, num_heads=16, kv_num_heads=2, head_size=32, past_lens=(30,),
              fixed_capacity=True),  # 16 grouped rows: the most the kernel takes
    GQAConfig(batch=1, seq=4, past=30, window=8, **HEADS),
    GQAConfig(batch=2, seq=4, past=30, past_lens=(20, 9), fixed_capacity=True, query_lens=(4, 2), **HEADS),
]


@pytest.mark.parametrize("cfg", SHORT_CHUNKS, ids=lambda c: c.name)
def test_short_chunks_take_the_kernel(cfg):
    """The chunk's G*S grouped rows (at most 16) in one dispatch, each with its own causal bias
    row, against onnxruntime's kernel."""
    G = cfg.num_heads // cfg.kv_num_heads
    assert f"_g{G * cfg.seq}_s{cfg.seq}_" in lowered_text(cfg)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=cfg.seq)
    session = InferenceSession(model, backend="iree-cpu", threads=2)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    problems = compare(cfg, got, run_onnxruntime(model, feeds), feeds)
    assert not problems, "\n".join(problems)


# Gemma 2's softcap, gpt-oss's head sinks, smooth_softmax (a sink logit of 0), and softcap with a
# local window, in decode steps and a short chunk.
EXTRAS = [
    (GQAConfig(batch=1, seq=1, past=1030, num_heads=8, kv_num_heads=4, head_size=64, rotary=True), {"softcap": 50.0}, "_cap"),
    (GQAConfig(batch=1, seq=1, past=64, past_lens=(40,), fixed_capacity=True, head_sink=True, **HEADS), {}, "_sink"),
    (GQAConfig(batch=1, seq=3, past=20, **HEADS), {"smooth_softmax": 1}, "_sink"),
    (GQAConfig(batch=1, seq=1, past=30, window=8, **HEADS), {"softcap": 2.0}, "_cap"),
]


@pytest.mark.parametrize("cfg,attrs,symbol", EXTRAS, ids=lambda v: v.name if isinstance(v, GQAConfig) else None)
def test_softcap_and_sinks_take_the_kernel(cfg, attrs, symbol):
    model = make_model(cfg, attrs)
    lowered = str(IreeCpuBackend(threads=1, options=LoweringOptions.for_backend("iree-cpu")).lower(model).module)
    assert symbol in lowered and "torch.aten.matmul" not in lowered.split("func.func private")[0]
    feeds = make_inputs(cfg, seed=2)
    session = InferenceSession(model, backend="iree-cpu", threads=2)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    problems = compare(cfg, got, run_onnxruntime(model, feeds), feeds)
    assert not problems, "\n".join(problems)


def test_fused_is_refused_outside_iree():
    """torch-mlir's bindings (gqa-torch-mlir-opt, the refbackend) have no IREE dialects."""
    module = import_onnx(make_model(GQAConfig(batch=1, seq=1, past=8, **HEADS)))
    refused = apply_lowerings(module.operation, options=LoweringOptions(attention="fused"))
    assert [r.message for r in refused] == [FUSED_OUTSIDE_IREE]
    with pytest.raises(GqaTorchMlirError, match="attention='fused' is refused on the refbackend"):
        InferenceSession(make_model(GQAConfig(batch=1, seq=1, past=8, **HEADS)), attention="fused")


def test_nan_bias_reaches_the_row():
    """A NaN bias is not a skipped key: that batch row's output is NaN, the others' are not."""
    s = KernelShape(None, 2, 4, 64, None)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in [(2, 2, 4, 64), (2, 2, 20, 64), (2, 2, 20, 64)])
    bias = np.zeros((2, 1, 20), np.float32)
    bias[1, 0, 7] = np.nan
    out = np.asarray(compiled_kernel(s).invoke("f", q, k, v, bias)[0])
    assert np.isnan(out[1]).all() and not np.isnan(out[0]).any()


# The standard Attention's decode steps (S = 1, a past): masks of one bias row per batch row
# take the kernel; the outputs against onnxruntime's kernel.
STANDARD_DECODES = [
    AC(B=2, S=1, L=1, P=20, H=8, Hkv=2, Dh=16, present=True, mask=AM("bool", "B1ST")),
    AC(S=1, L=1, P=20, H=8, Hkv=2, Dh=16, present=True, mask=AM("float", "ST")),  # 20% -inf, the rest finite biases
    AC(S=1, L=1, P=9, H=4, Hkv=4, Dh=8, present=True, is_causal=True),
    AC(B=2, S=1, L=1, P=6, H=4, Hkv=2, Dh=8, present=True, mask=AM("bool", "B1ST", full_rows=True)),  # rows of no key: zeros
    AC(S=1, L=1, P=6, H=4, Hkv=2, Dh=8, present=True, mask=AM("float", "B1ST", float_fill="lowest")),
]


@pytest.mark.parametrize("cfg", STANDARD_DECODES, ids=lambda c: c.name)
def test_standard_attention_decode_takes_the_kernel(cfg):
    model, feeds = make_attention_model(cfg), make_attention_inputs(cfg, 0)
    lowered = str(IreeCpuBackend(threads=1, options=LoweringOptions.for_backend("iree-cpu")).lower(model).module)
    assert "flow.dispatch @gqa_decode_attention" in lowered
    expected = run_attention_onnxruntime(model, feeds)
    session = InferenceSession(model, backend="iree-cpu")
    names = [o.name for o in session.get_outputs()]
    for name, have in zip(names, session.run(names, feeds)):
        np.testing.assert_allclose(have, expected[name], rtol=0, atol=1e-5, err_msg=name)
