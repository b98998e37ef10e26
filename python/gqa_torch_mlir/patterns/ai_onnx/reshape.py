"""ONNX ``Reshape`` with a run-time shape: checked, and lowered without a division by zero.

torch-mlir lowers such a Reshape to ``aten.reshape`` on the shape's values,
whose linalg code divides the element count by the product of the
non-negative target dims, whether or not one is ``-1``: an empty input (a
dynamic batch of 0) or a shape holding 0 dies of SIGFPE.  Here the target dims
are resolved as onnxruntime resolves them (a 0 copies the input's dim unless
``allowzero = 1``; one ``-1`` takes what is left), checked at run time by
exact successive division (no overflowing product), and the data is
flattened and unflattened to them: a collapse and a reshape of the buffer,
no division.  A failed check keeps the buffer's size (``[n, 1, ...]``).
Constant shapes (torch-mlir infers their ``-1`` statically) are left to
torch-mlir.

Letters: R the target rank, n the data's element count.
"""

from __future__ import annotations

from typing import List, NamedTuple

from ...binder import OpBinder
from ...builder import Dim, TorchBuilder
from ...registry import NOT_LOWERED, Refusal, onnx_op


@onnx_op("Reshape", domain="", since=5)
def lower_runtime_reshape(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 2 or b.input_is_constant(1):
        return NOT_LOWERED
    data, shape = b.tensor(0, "data"), b.tensor(1, "shape")
    if shape is not None and shape.rank == 1 and shape.shape[0] is None:
        raise Refusal("has a dynamic length, so the output's rank is unknown; supported: a shape input of static length "
                      "(torch-mlir's tensors are ranked)", "input 1 'shape'")
    if data is None or shape is None or shape.rank != 1 or shape.dtype != "si64" or not shape.shape[0]:
        return NOT_LOWERED  # torch-mlir's conversion handles (or reports) these
    allow_zero = b.attr_int("allowzero", 0) == 1  # onnxruntime reads any other value as 0
    n = _numel(tb, data)
    dims = [_resolved_dim(tb, data, shape, i, allow_zero) for i in range(shape.shape[0])]
    out = _checked_dims(tb, dims, n)
    if data.rank == 0:
        flat_N = tb.unsqueeze(data, 0)  # [] -> [1]
    else:
        flat_N = tb.flatten(data, 0, data.rank - 1) if data.rank > 1 else data  # [d0, .., dk] -> [n]
    if len(out) == 1:  # [n] is the result (checked above); torch-mlir's unflatten of a static [n] to [?] segfaults
        return [b.declared_result(tb, 0, flat_N, "reshaped")]
    unflattened = tb.tensor_op("torch.aten.unflatten.int", [flat_N.value, tb.int(0), tb.int_list(out)], (None,) * len(out), data.dtype)
    return [b.declared_result(tb, 0, unflattened, "reshaped")]


def _numel(tb: TorchBuilder, data) -> Dim:
    n: Dim = 1
    for d in range(data.rank):
        n = tb.dim_mul(n, tb.size(data, d))
    return n


def _flag(tb: TorchBuilder, cond) -> Dim:
    """A !torch.bool as the !torch.int 0 or 1."""
    return tb.op("torch.aten.Int.bool", [cond], ["!torch.int"])[0]


def _is_zero(tb: TorchBuilder, x: Dim) -> Dim:
    """x == 0 as 0 or 1, written x <= 0 and not x < 0: torch-mlir turns a size compared equal
    to 0 into its own assert that the size is > 0, which would fail every empty input."""
    return tb.dim_mul(_flag(tb, tb.dim_le(x, 0)), tb.dim_sub(1, _flag(tb, tb.dim_lt(x, 0))))


def _resolved_dim(tb: TorchBuilder, data, shape, i: int, allow_zero: bool) -> Dim:
    """shape[i], a 0 replaced by the data's dim i unless allowzero (a 0 past the data's rank is checked)."""
    value_1 = tb.tensor_op("torch.aten.select.int", [shape.value, tb.int(0), tb.int(i)], (), "si64")
    s = tb.item(value_1)
    if allow_zero:
        return s
    if i >= data.rank:
        tb.runtime_assert(
            tb.op("torch.aten.ne.int", [s, tb.int(0)], ["!torch.bool"])[0],
            f"Reshape: shape[{i}] is 0 but the data has rank {data.rank}: there is no dimension to copy (onnxruntime rejects it)",
        )
        return s
    return tb.dim_add(s, tb.dim_mul(_is_zero(tb, s), tb.size(data, i)))  # s, or data dim i when s == 0


class _Scan(NamedTuple):
    """What the checks need of the target dims, as !torch.int values (or folded ints)."""

    minus_ones: Dim  # how many dims are -1
    negatives: Dim  # how many are < 0 (-1 included)
    zeros: Dim  # how many are 0
    divisible: Dim  # 1 if each dim (-1 and 0 as 1) divided what was left of n, else 0
    rest: Dim  # n divided by every dim in turn: exact, so no product can overflow


def _scan(tb: TorchBuilder, dims: List[Dim], n: Dim) -> _Scan:
    minus_ones = negatives = zeros = 0
    divisible: Dim = 1
    rest: Dim = n
    for d in dims:
        minus_ones = tb.dim_add(minus_ones, _flag(tb, tb.dim_eq(d, -1)))
        negatives = tb.dim_add(negatives, _flag(tb, tb.dim_lt(d, 0)))
        zeros = tb.dim_add(zeros, _is_zero(tb, d))
        divisor = tb.dim_max(d, 1)
        divisible = tb.dim_mul(divisible, _is_zero(tb, tb.dim_remainder(rest, divisor)))
        rest = tb.dim_floordiv(rest, divisor)
    return _Scan(minus_ones, negatives, zeros, divisible, rest)


def _checked_dims(tb: TorchBuilder, dims: List[Dim], n: Dim) -> List[Dim]:
    """The target dims with the -1 inferred, checked against n; [n, 1, ..] when a check fails."""
    scan = _scan(tb, dims, n)
    ok = _checks(tb, scan, n)
    out = []
    for i, d in enumerate(dims):
        resolved = tb.dim_add(d, tb.dim_mul(_flag(tb, tb.dim_eq(d, -1)), tb.dim_add(scan.rest, 1)))  # -1 -> rest
        fallback = n if i == 0 else 1
        out.append(tb.dim_add(tb.dim_mul(ok, resolved), tb.dim_mul(tb.dim_sub(1, ok), fallback)))
    return out


def _checks(tb: TorchBuilder, scan: _Scan, n: Dim) -> Dim:
    """onnxruntime's three rules on the target dims, each a named run-time check; 1 if all hold, else 0."""
    one_inferred = _flag(tb, tb.dim_eq(scan.minus_ones, 1))
    signs_ok = tb.dim_eq(tb.dim_mul(_flag(tb, tb.dim_eq(scan.negatives, scan.minus_ones)), _flag(tb, tb.dim_le(scan.minus_ones, 1))), 1)
    tb.runtime_assert(signs_ok, "Reshape: shape may hold one -1 and no other negative value (onnxruntime rejects it)")
    no_zero = _is_zero(tb, scan.zeros)
    inferable = tb.dim_sub(1, tb.dim_mul(one_inferred, tb.dim_sub(1, no_zero)))  # no -1, or no 0 next to it
    tb.runtime_assert(
        tb.dim_eq(inferable, 1),
        "Reshape: a -1 in shape cannot be inferred next to a dimension of 0 (the ONNX spec and onnxruntime reject it)",
    )
    exact = tb.dim_mul(tb.dim_mul(no_zero, scan.divisible), _flag(tb, tb.dim_eq(scan.rest, 1)))  # the dims multiply to n > 0 ...
    empty = tb.dim_mul(_flag(tb, tb.dim_le(1, scan.zeros)), _is_zero(tb, n))  # ... or hold a 0 and n == 0
    sized = tb.dim_add(tb.dim_mul(one_inferred, scan.divisible), tb.dim_mul(tb.dim_sub(1, one_inferred), tb.dim_max(exact, empty)))
    tb.runtime_assert(
        tb.dim_eq(sized, 1),
        "Reshape: the dims of shape must multiply to the data's element count (with a -1: divide it) "
        "(onnxruntime rejects it otherwise)",
    )
    return tb.dim_mul(tb.dim_mul(inferable, sized), _flag(tb, signs_ok))
