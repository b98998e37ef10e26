"""One MatMulNBits (4-bit weight, blocks of 32, packed zero points, weights as initializers) on iree-cpu,
its CPU kernel (``matmul_nbits=kernel``, kernels/nbits_matmul.py) and the dequantized weight
(``matmul_nbits=dequantize``), against onnxruntime's kernel.  ``--accuracy-level 4`` times the
builder's int4 form instead (accuracy_level 4, no zero points: onnxruntime's int8 path), with
the int8 kernel too (``matmul_nbits=vnni``, kernels/nbits_matmul_vnni.py; a host with AVX-512 VNNI).

    .venv/bin/python benchmarks/matmul_nbits.py [--shapes 1024x4096 4096x1024] [--rows 1 4 16] [--threads 1 2]
    .venv/bin/python benchmarks/matmul_nbits.py --accuracy-level 4 --shapes 1024x2816 1024x32000

A is [rows, K] with its rows declared symbolic, as a decoder's (batch x sequence) are.  The runs are
measured alternately in one process, each round in a new random order; the outputs are
checked against onnxruntime's first.  Prints medians (µs) and ratios to onnxruntime.  Not a
test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from decode_step import cpu_model
from model_step import print_alternating, session

L = 32  # the builder's block size


def model(K: int, N: int, accuracy_level: int = 0) -> onnx.ModelProto:
    """Packed zero points at accuracy_level 0; none at 4 (the builder's symmetric int4 weights)."""
    rng = np.random.default_rng(0)
    Kb = K // L
    inits = [numpy_helper.from_array(rng.integers(0, 256, (N, Kb, L // 2), dtype=np.uint8), "B"),
             numpy_helper.from_array((rng.random(N * Kb) * 0.02).astype(np.float32), "scales")]
    if accuracy_level != 4:
        inits.append(numpy_helper.from_array(rng.integers(0, 256, N * -(-Kb // 2), dtype=np.uint8), "zero_points"))
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"] + ["zero_points"] * (accuracy_level != 4), ["Y"],
                            domain="com.microsoft", K=K, N=N, bits=4, block_size=L, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["rows", K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["rows", N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)], ir_version=10)


def measure(proto: onnx.ModelProto, rows: int, threads: int, rounds: int, inner: int, sessions) -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no spinning into the next runner's time
    ref = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    K = proto.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    feeds = {"A": np.random.default_rng(rows).standard_normal((rows, K)).astype(np.float32)}
    expected = ref.run(None, feeds)[0]
    runs = {"onnxruntime": lambda: ref.run(None, feeds)}
    for form, sess in sessions.items():
        worst = float(np.abs(sess.run(None, feeds)[0] - expected).max())
        if worst > 1e-3:
            raise SystemExit(f"{form}: outputs differ from onnxruntime's by {worst}")
        runs[form] = lambda sess=sess: sess.run(None, feeds)
    print_alternating(runs, rounds, inner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=["1024x4096", "4096x1024", "2048x8192"], help="KxN weights")
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 4, 16, 64, 256])
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=9, help="rounds")
    parser.add_argument("--inner", type=int, default=20, help="calls timed together in each round")
    parser.add_argument("--accuracy-level", type=int, choices=(0, 4), default=0,
                        help="4: the builder's int4 form (onnxruntime's int8 path), with matmul_nbits=vnni beside the others")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}")
    for shape in args.shapes:
        K, N = map(int, shape.split("x"))
        proto = model(K, N, args.accuracy_level)
        forms = ("vnni", "kernel", "dequantize") if args.accuracy_level == 4 else ("kernel", "dequantize")
        for threads in args.threads:
            sessions = {form: session(proto, threads, matmul_nbits=form) for form in forms}
            for rows in args.rows:
                print(f"MatMulNBits K={K} N={N}, accuracy_level {args.accuracy_level}, {rows} row(s), {threads} thread(s):")
                measure(proto, rows, threads, args.repeats, args.inner, sessions)


if __name__ == "__main__":
    main()
