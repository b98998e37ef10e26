"""iree-cpu's tuning spec (backends/iree/tuning.py): a decode step's Q.K^T and an attention mask's
row sums take the spec's tile sizes and every other dispatch IREE's own; the tuned steps match onnxruntime for each kind of
matcher; the variable and the flag opt out; iree-cuda resets the flags (IREE keeps them from
one compile to the next in a process).  The fast tier
compiles iree-cpu without the spec elsewhere (conftest.py): each test here turns it on."""

from __future__ import annotations

import pathlib

import onnx
import pytest
from onnx import TensorProto, helper

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import IreeBackend, IreeCpuBackend, tuning
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir.testing.filecheck import filecheck
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig as C
from gqa_torch_mlir.testing.gqa_onnx import compare, make_inputs, make_model, run_onnxruntime


@pytest.fixture(autouse=True)
def tuned(monkeypatch):
    monkeypatch.setenv(tuning.ENABLED_VARIABLE, "1")


# One KV head's decode step: G = 4 query rows, a 40-row shared buffer, head 64.
DECODE = C(seq=1, past=40, past_lens=(30,), fixed_capacity=True, num_heads=8, kv_num_heads=2, head_size=64, rotary=True)


def configured(backend: IreeBackend, cfg, tmp_path: pathlib.Path) -> str:
    """Every dispatch of ``cfg``'s step (or of an ONNX model) as IREE configured it (its lowering
    configs), one text."""
    out = tmp_path / "configs"
    backend.flags += (f"--iree-hal-dump-executable-configurations-to={out}",)
    backend.compile_lowered(backend.lower(cfg if isinstance(cfg, onnx.ModelProto) else make_model(cfg)))
    return "\n".join(p.read_text() for p in sorted(out.iterdir()))


TUNED = "{lowering_config = #iree_cpu.lowering_config<distribution = [1, 16, " + str(tuning.KEY_ROWS_PER_WORKGROUP) + ", 0], vector_common_parallel = [1, 1, 1, 0], vector_reduction = [0, 0, 0, 64]>}"


DECOMPOSED = LoweringOptions(attention="decomposed")  # the spec's Q.K^T: iree-cpu's fused form has none in a decode step


def test_decode_qk_takes_the_spec_tiles_and_nothing_else_does(tmp_path):
    text = configured(IreeCpuBackend(threads=1, options=DECOMPOSED), DECODE, tmp_path)
    filecheck(text, f"""
        CHECK:     linalg.batch_matmul indexing_maps = {{{{.+}}}} {TUNED} ins({{{{.+}}}} : tensor<2x4x64xf32>, tensor<2x?x64xf32>)
        CHECK-NOT: vector_common_parallel = [1, 1, 1, 0]
    """, tmp_path)
    assert text.count("vector_common_parallel = [1, 1, 1, 0]") == 1  # P.V and the rest: IREE's own


def test_a_prefill_block_keeps_irees_tiles(tmp_path):
    """256 query rows in blocks of 64: each block's Q.K^T has G*64 rows, past the spec's MAX_ROWS."""
    text = configured(IreeCpuBackend(threads=1), C(seq=256, num_heads=8, kv_num_heads=2, head_size=64), tmp_path)
    filecheck(text, """
        CHECK:     linalg.batch_matmul indexing_maps = {{.+}} ins({{.+}} : tensor<2x256x64xf32>, tensor<2x{{[0-9]+}}x64xf32>)
        CHECK-NOT: vector_common_parallel = [1, 1, 1, 0]
    """, tmp_path)


# The builder's decode step: every length dynamic, seqlens_k = ReduceSum(attention_mask, 1) - 1.
MASKED = C(seq=1, past=9, past_lens=(6,), fixed_capacity=True, num_heads=4, kv_num_heads=2, head_size=16, dynamic=True, mask=True)
ROW_SUM = "{lowering_config = #iree_cpu.lowering_config<distribution = [32, 0], vector_common_parallel = [1, 0], vector_reduction = [0, 16]>}"


def int32_row_sums() -> onnx.ModelProto:
    """ReduceSum over dim 1 of an int32 [B, T] mask, both dims dynamic."""
    mask = helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", "T"])
    sums = helper.make_tensor_value_info("sums", TensorProto.INT32, ["B"])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    node = helper.make_node("ReduceSum", ["mask", "axes"], ["sums"], keepdims=0)
    return helper.make_model(helper.make_graph([node], "row_sums", [mask], [sums], [axes]), opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("element", tuning.ROW_SUM_TYPES)
def test_the_masks_row_sum_takes_one_row_a_vector_pass(element, tmp_path):
    """IREE's own tiles (8 rows a pass) read rows a batch of one does not have with masked loads
    (130 us a step on the AMD guest where the memory past the mask is not mapped); the spec's
    take one row at a time: the builder's int64 mask, and an int32 one."""
    text = configured(IreeCpuBackend(threads=1), MASKED if element == "i64" else int32_row_sums(), tmp_path)
    filecheck(text, f"""
        CHECK: linalg.generic {{{{.+}}}} ins(%{{{{.+}}}} : tensor<?x?x{element}>) outs(%{{{{.+}}}} : tensor<?x{element}>) attrs =  {ROW_SUM}
    """, tmp_path)


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_the_spec_path_flag_and_the_variable_opt_out(how, tmp_path, monkeypatch):
    if how == "variable":
        monkeypatch.setenv(tuning.ENABLED_VARIABLE, "0")
    backend = IreeCpuBackend(threads=1, extra_flags=[f"{tuning.SPEC_PATH}="] if how == "flag" else [], options=DECOMPOSED)
    assert not tuning.uses_spec(backend.flags)
    text = configured(backend, DECODE, tmp_path)
    assert "linalg.batch_matmul" in text and "vector_common_parallel = [1, 1, 1, 0]" not in text


def test_a_value_of_the_variable_other_than_0_or_1_is_refused(monkeypatch):
    monkeypatch.setenv(tuning.ENABLED_VARIABLE, "yes")
    with pytest.raises(GqaTorchMlirError, match="GQA_IREE_CPU_TUNING='yes' is not supported; supported: 0"):
        IreeCpuBackend(threads=1)


def test_iree_cuda_resets_the_spec_flags():
    """IREE keeps the spec path and the reassociation flag from one compile to the next in a
    process (an untuned iree-cpu compile after a tuned one measured tuned): iree-cuda's flags
    reset both, after its target flags."""
    cuda = IreeBackend(target="iree-cuda", options=LoweringOptions.for_backend("iree-cuda"))
    assert not tuning.uses_spec(cuda.flags) and f"{tuning.REASSOCIATE}=false" in cuda.flags
    assert tuning.uses_spec(IreeCpuBackend(threads=1).flags)


# Each kind of matcher against onnxruntime: a head size reduced whole (64, 96, 128), 256 in two
# passes; query rows per KV head 4 (MQA), 7 (Qwen2's 28/4), 1 (MHA) and 16 (MAX_ROWS); a growing
# cache (static rows read) and shared buffers (the rows read known at run time), one from a
# model with every length dynamic.
TUNED_STEPS = [
    C(seq=1, past=33, num_heads=4, kv_num_heads=1, head_size=96),
    C(seq=1, past=70, past_lens=(64,), fixed_capacity=True, num_heads=14, kv_num_heads=2, head_size=128, rotary=True),
    C(seq=1, past=20, num_heads=2, kv_num_heads=2, head_size=256),
    C(seq=1, past=50, past_lens=(41,), fixed_capacity=True, num_heads=16, kv_num_heads=1, head_size=64, dynamic=True),
    C(batch=3, seq=1, past=9, past_lens=(6, 8, 2), fixed_capacity=True, num_heads=4, kv_num_heads=2, head_size=16,
      dynamic=True, mask=True),  # the mask's row sums, one row a pass
]


@pytest.mark.parametrize("cfg", TUNED_STEPS, ids=lambda c: c.name)
def test_tuned_decode_steps_match_onnxruntime(cfg):
    model, feeds = make_model(cfg), make_inputs(cfg, seed=cfg.head_size)
    session = InferenceSession(model, backend="iree-cpu", threads=2, attention="decomposed")
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    problems = compare(cfg, got, run_onnxruntime(model, feeds), feeds)
    assert not problems, "\n".join(problems)


def test_the_spec_names_every_head_size_once():
    text = tuning.spec_text()
    assert [text.count(f"@match_decode_qk_d{d}(") for d in tuning.HEAD_SIZES] == [1] * len(tuning.HEAD_SIZES)
    assert [text.count(f"@match_row_sum_{t}(") for t in tuning.ROW_SUM_TYPES] == [1] * len(tuning.ROW_SUM_TYPES)
    assert tuning.reduction_tile(96) == 96 and tuning.reduction_tile(256) == 128 and tuning.reduction_tile(192) == 64
    assert pathlib.Path(tuning.spec_path()).read_text() == text


def test_a_planted_file_of_the_specs_name_is_not_read(tmp_path, monkeypatch):
    """A file under the spec's name with other content (another user's in a shared /tmp) is not
    loaded: ours is written under a name of its own, in the same directory."""
    monkeypatch.setattr(tuning.tempfile, "tempdir", str(tmp_path))
    first = pathlib.Path(tuning.spec_path())
    first.write_text("// not our spec\n")
    second = pathlib.Path(tuning.spec_path())
    assert second.read_text() == tuning.spec_text() and second.parent == tmp_path
