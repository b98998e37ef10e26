"""A bindings-agnostic builder for torch-dialect ops.

Every op is made with the generic ``Operation.create`` and types are parsed
from their textual form, so the same code runs on any MLIR Python bindings
instance that has the torch dialect loaded: torch-mlir's wheel (which ships
op classes) and IREE's compiler (which does not).  The ``ir`` module in use is
taken from the op being rewritten, never imported here.

Shapes are tracked in Python: a :class:`Tensor` carries its value, its dims
(``int`` when static, ``None`` when dynamic) and its torch element type
(``"f32"``, ``"f16"``, ``"si64"``, ...).  Each builder method computes the exact
result type of the op it emits; unknown dims stay ``?``.  A :data:`Dim` is a
Python ``int`` when static or an SSA ``!torch.int`` value when dynamic:
:meth:`TorchBuilder.size` emits ``aten.size.int`` only for dynamic dims.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

# The torch dtype codes (c10::ScalarType) of the element types we emit.
DTYPE_CODES = {"f16": 5, "f32": 6, "f64": 7, "bf16": 15, "si64": 4, "si32": 3, "si8": 1, "ui8": 0, "i1": 11}
FLOAT_DTYPES = ("f16", "f32", "f64", "bf16")

_VTENSOR_RE = re.compile(r"^!torch\.vtensor<\[([^\]]*)\],([a-z0-9]+)>$")


@dataclass(frozen=True)
class Tensor:
    """An SSA value of type ``!torch.vtensor`` with its shape known in Python."""

    value: Any
    shape: tuple  # of Optional[int]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def dim(self, i: int) -> Optional[int]:
        return self.shape[i]

    @staticmethod
    def of(value) -> "Tensor":
        """Wrap ``value``; raises ValueError unless it is a ranked vtensor."""
        parsed = parse_vtensor_type(str(value.type))
        if parsed is None:
            raise ValueError(f"expected a ranked !torch.vtensor, got {value.type}")
        return Tensor(value, *parsed)


Dim = Union[int, Any]  # int when static, an SSA !torch.int value when dynamic


def parse_vtensor_type(text: str):
    """``'!torch.vtensor<[?,2],f32>'`` -> ``((None, 2), 'f32')``; None if unranked."""
    m = _VTENSOR_RE.match(text.strip())
    if not m:
        return None
    dims = m.group(1).strip()
    shape = tuple(None if d.strip() == "?" else int(d) for d in dims.split(",")) if dims else ()
    return shape, m.group(2)


def vtensor_type_text(shape: Sequence[Optional[int]], dtype: str) -> str:
    dims = ",".join("?" if d is None else str(d) for d in shape)
    return f"!torch.vtensor<[{dims}],{dtype}>"


def broadcast_shapes(a: Sequence[Optional[int]], b: Sequence[Optional[int]]) -> tuple:
    """Numpy broadcasting over dims that may be unknown (None)."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None:
            out.append(x)
        else:
            raise ValueError(f"shapes {a} and {b} do not broadcast")
    return tuple(out)


class TypeCache:
    """Parsed types of one MLIRContext, keyed by their text; and the module-level ops the
    lowerings of one pass run call (``functions``: symbol -> MLIR text, added after the walk)."""

    def __init__(self, ir_module, context):
        self.ir = ir_module
        self.context = context
        self._types = {}
        self.functions = {}

    def get(self, text: str):
        t = self._types.get(text)
        if t is None:
            t = self.ir.Type.parse(text, self.context)
            self._types[text] = t
        return t


class TorchBuilder:
    """Emits torch ops before an insertion point, at one location.

    ``ir`` is the bindings' ``ir`` module (torch-mlir's or IREE's), ``ip`` an
    ``InsertionPoint``.  Constants are cached so one lowering emits each once.
    """

    def __init__(self, ir_module, types: TypeCache, ip, loc):
        self.ir = ir_module
        self.types = types
        self.ip = ip
        self.loc = loc
        self._consts = {}

    # -- generic creation ---------------------------------------------------
    def op(self, name: str, operands: Sequence[Any], result_types: Sequence[str], attributes=None):
        """Create op ``name``; ``result_types`` are type texts. Returns its results."""
        op = self.ir.Operation.create(
            name,
            results=[self.types.get(t) for t in result_types],
            operands=list(operands),
            attributes=attributes or {},
            loc=self.loc,
            ip=self.ip,
        )
        return op.results

    def tensor_op(self, name: str, operands, shape, dtype: str, attributes=None) -> Tensor:
        """Create an op with one vtensor result of the given shape and dtype."""
        (res,) = self.op(name, operands, [vtensor_type_text(shape, dtype)], attributes)
        return Tensor(res, tuple(shape), dtype)

    # -- calls on builtin tensors (kernels/) ------------------------------------
    def builtin(self, t: Tensor, shape: Optional[Sequence[Optional[int]]] = None):
        """``t`` as a builtin tensor (``torch_c.to_builtin_tensor``; si8/ui8 become i8), cast to
        ``shape`` (``tensor.cast``: a static dim made dynamic, or the reverse) if given."""
        element = {"si8": "i8", "ui8": "i8", "si32": "i32", "si64": "i64"}.get(t.dtype, t.dtype)
        text = lambda dims: "tensor<" + "".join(("?" if d is None else str(d)) + "x" for d in dims) + element + ">"
        value = self.op("torch_c.to_builtin_tensor", [t.value], [text(t.shape)])[0]
        if shape is not None and tuple(shape) != tuple(t.shape):
            value = self.op("tensor.cast", [value], [text(shape)])[0]
        return value

    def index(self, d: Dim):
        """A Dim as an ``index`` value."""
        if isinstance(d, int):
            return self.op("arith.constant", [], ["index"], {"value": self.ir.IntegerAttr.get(self.ir.IndexType.get(self.types.context), d)})[0]
        i64 = self.op("torch_c.to_i64", [d], ["i64"])[0]
        return self.op("arith.index_cast", [i64], ["index"])[0]

    def call_function(self, symbol: str, text: str, operands, shape, dtype: str) -> Tensor:
        """``func.call @symbol`` on builtin operands, its one result back as a vtensor; ``text``
        (the function and what it uses) is added to the module once, after the pass's walk."""
        return self.call_function_results(symbol, text, operands, [(shape, dtype)])[0]

    def call_function_results(self, symbol: str, text: str, operands, results) -> List[Tensor]:
        """:meth:`call_function` with several results, each a ``(shape, dtype)``."""
        self.types.functions.setdefault(symbol, text)
        dims = lambda shape: "x".join("?" if d is None else str(d) for d in shape)  # noqa: E731
        callee = self.ir.FlatSymbolRefAttr.get(symbol, self.types.context)
        values = self.op("func.call", operands, [f"tensor<{dims(shape)}x{dtype}>" for shape, dtype in results], {"callee": callee})
        return [self.tensor_op("torch_c.from_builtin_tensor", [v], shape, dtype) for v, (shape, dtype) in zip(values, results)]

    # -- scalar constants ---------------------------------------------------
    def _cached(self, key, make):
        if key not in self._consts:
            self._consts[key] = make()
        return self._consts[key]

    def int(self, v: int):
        ir = self.ir
        attr = lambda: ir.IntegerAttr.get(ir.IntegerType.get_signless(64, self.types.context), int(v))
        return self._cached(("int", int(v)), lambda: self.op("torch.constant.int", [], ["!torch.int"], {"value": attr()})[0])

    def float(self, v: float):
        ir = self.ir
        attr = lambda: ir.FloatAttr.get(ir.F64Type.get(self.types.context), float(v))
        key = ("float", repr(float(v)))
        return self._cached(key, lambda: self.op("torch.constant.float", [], ["!torch.float"], {"value": attr()})[0])

    def bool(self, v: bool):
        attr = lambda: self.ir.BoolAttr.get(bool(v), self.types.context)
        return self._cached(("bool", bool(v)), lambda: self.op("torch.constant.bool", [], ["!torch.bool"], {"value": attr()})[0])

    def string(self, v: str):
        attr = lambda: self.ir.StringAttr.get(v, self.types.context)
        return self._cached(("str", v), lambda: self.op("torch.constant.str", [], ["!torch.str"], {"value": attr()})[0])

    def none(self):
        return self._cached(("none",), lambda: self.op("torch.constant.none", [], ["!torch.none"])[0])

    def dim_value(self, d: Dim):
        """A Dim as an SSA !torch.int (a constant when static)."""
        return self.int(d) if isinstance(d, int) else d

    def int_list(self, dims: Sequence[Dim]):
        vals = [self.dim_value(d) for d in dims]
        return self.op("torch.prim.ListConstruct", vals, ["!torch.list<int>"])[0]

    def tensor_list(self, tensors: Sequence[Tensor], optional: bool = False):
        elem = "optional<vtensor>" if optional else "vtensor"
        return self.op("torch.prim.ListConstruct", [t.value for t in tensors], [f"!torch.list<{elem}>"])[0]

    # -- dims ---------------------------------------------------------------
    def size(self, t: Tensor, d: int) -> Dim:
        """Dim ``d`` of ``t``: a Python int when static, else ``aten.size.int``."""
        if t.shape[d] is not None:
            return t.shape[d]
        key = ("size", t.value, d)
        return self._cached(key, lambda: self.op("torch.aten.size.int", [t.value, self.int(d)], ["!torch.int"])[0])

    def dim_add(self, a: Dim, b: Dim) -> Dim:
        """a + b: folded when both are static, ``aten.add.int`` otherwise."""
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        return self.op("torch.aten.add.int", [self.dim_value(a), self.dim_value(b)], ["!torch.int"])[0]

    def dim_sub(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        return self.op("torch.aten.sub.int", [self.dim_value(a), self.dim_value(b)], ["!torch.int"])[0]

    def dim_max(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b)
        return self.op("torch.prim.max.int", [self.dim_value(a), self.dim_value(b)], ["!torch.int"])[0]

    def dim_min(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return self.op("torch.prim.min.int", [self.dim_value(a), self.dim_value(b)], ["!torch.int"])[0]

    def dim_mul(self, a: Dim, b: Dim) -> Dim:
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        return self.op("torch.aten.mul.int", [self.dim_value(a), self.dim_value(b)], ["!torch.int"])[0]

    def dim_floordiv(self, a: Dim, b: Dim) -> Dim:
        """a // b rounded toward -inf (Python's and ``aten.floordiv.int``'s rule); b must not be 0."""
        if isinstance(a, int) and isinstance(b, int) and b != 0:
            return a // b
        return self.op("torch.aten.floordiv.int", [self.dim_value(a), self.dim_value(b)], ["!torch.int"])[0]

    def dim_remainder(self, a: Dim, b: Dim) -> Dim:
        """a % b with the divisor's sign (Python's and ``aten.remainder.int``'s rule); b must not be 0."""
        if isinstance(a, int) and isinstance(b, int) and b != 0:
            return a % b
        return self.op("torch.aten.remainder.int", [self.dim_value(a), self.dim_value(b)], ["!torch.int"])[0]

    def dim_lt(self, a: Dim, b: Dim):
        """a < b as a !torch.bool value."""
        return self.op("torch.aten.lt.int", [self.dim_value(a), self.dim_value(b)], ["!torch.bool"])[0]

    def dim_le(self, a: Dim, b: Dim):
        """a <= b as a !torch.bool value."""
        return self.op("torch.aten.le.int", [self.dim_value(a), self.dim_value(b)], ["!torch.bool"])[0]

    def dim_eq(self, a: Dim, b: Dim):
        """a == b as a !torch.bool value."""
        return self.op("torch.aten.eq.int", [self.dim_value(a), self.dim_value(b)], ["!torch.bool"])[0]

    def if_else(self, cond, shape: Sequence[Optional[int]], dtype: str, then_branch, else_branch) -> Tensor:
        """``torch.prim.If`` on the !torch.bool ``cond``: only the taken branch runs.

        Each branch is a function given a builder that emits into its region
        and returning a Tensor of ``shape``/``dtype`` (refined types are cast).
        """
        (result,) = self.if_else_each(cond, [(shape, dtype)], lambda inner: [then_branch(inner)],
                                      lambda inner: [else_branch(inner)])
        return result

    def if_else_each(self, cond, types: Sequence[Tuple[Sequence[Optional[int]], str]], then_branch, else_branch) -> List[Tensor]:
        """:meth:`if_else` with several results, one (shape, dtype) each in ``types``: each branch
        returns a list of Tensors (one branch for them all: each is a submission of its own on IREE)."""
        type_texts = [vtensor_type_text(shape, dtype) for shape, dtype in types]
        if_op = self.ir.Operation.create(
            "torch.prim.If", results=[self.types.get(t) for t in type_texts], operands=[cond], regions=2, loc=self.loc, ip=self.ip
        )
        for region, branch in zip(if_op.regions, (then_branch, else_branch)):
            inner = TorchBuilder(self.ir, self.types, self.ir.InsertionPoint(region.blocks.append()), self.loc)
            yielded = [inner.static_info_cast(t, text) for t, text in zip(branch(inner), type_texts)]
            inner.op("torch.prim.If.yield", yielded, [])
        return [Tensor(r, tuple(shape), dtype) for r, (shape, dtype) in zip(if_op.results, types)]

    def if_joined(self, cond, then_branch, else_branch) -> List[Tensor]:
        """:meth:`if_else_each` typed by the branches themselves: each result's type is the two
        branches' joined (a dim they disagree on, or either leaves dynamic, is dynamic).  For
        branches whose types are easier built than foretold (one lowering under two assumptions)."""
        staging = self.ir.Operation.create("torch.prim.If", results=[], operands=[cond], regions=2, loc=self.loc, ip=self.ip)
        built = []
        for region, branch in zip(staging.regions, (then_branch, else_branch)):
            block = region.blocks.append()
            inner = TorchBuilder(self.ir, self.types, self.ir.InsertionPoint(block), self.loc)
            built.append((block, inner, list(branch(inner))))
        (_, _, then_ts), (_, _, else_ts) = built
        assert len(then_ts) == len(else_ts) and all(t.dtype == e.dtype and t.rank == e.rank for t, e in zip(then_ts, else_ts))
        types = [(tuple(d if d == e else None for d, e in zip(t.shape, u.shape)), t.dtype) for t, u in zip(then_ts, else_ts)]
        type_texts = [vtensor_type_text(shape, dtype) for shape, dtype in types]
        if_op = self.ir.Operation.create(
            "torch.prim.If", results=[self.types.get(t) for t in type_texts], operands=[cond], regions=2, loc=self.loc, ip=self.ip
        )
        for region, (block, inner, tensors) in zip(if_op.regions, built):
            block.append_to(region)  # the staged branch moves into the typed op
            inner.op("torch.prim.If.yield", [inner.static_info_cast(t, text) for t, text in zip(tensors, type_texts)], [])
        staging.erase()
        return [Tensor(r, shape, dtype) for r, (shape, dtype) in zip(if_op.results, types)]

    def loop(self, count: Dim, init: Tensor, body) -> Tensor:
        """``torch.prim.Loop`` for i in [0, count), carrying one tensor: ``body(inner, i, carried)``
        emits one iteration with the builder ``inner`` (into the loop's region; ``i`` a !torch.int)
        and returns the next carried tensor, of ``init``'s type (refined types are cast)."""
        (result,) = self.loop_each(count, [init], lambda inner, i, carried: [body(inner, i, carried[0])])
        return result

    def loop_each(self, count: Dim, inits: Sequence[Tensor], body) -> List[Tensor]:
        """:meth:`loop` carrying several tensors: ``body(inner, i, carried)`` takes and returns a list
        of them, each of its ``inits``' type."""
        type_texts = [vtensor_type_text(t.shape, t.dtype) for t in inits]
        operands = [self.dim_value(count), self.bool(True)] + [t.value for t in inits]
        loop_op = self.ir.Operation.create(
            "torch.prim.Loop", results=[self.types.get(t) for t in type_texts], operands=operands, regions=1, loc=self.loc, ip=self.ip
        )
        arg_types = [self.types.get("!torch.int")] + [self.types.get(t) for t in type_texts]
        block = loop_op.regions[0].blocks.append(*arg_types, arg_locs=[self.loc] * len(arg_types))
        inner = TorchBuilder(self.ir, self.types, self.ir.InsertionPoint(block), self.loc)
        carried = [Tensor(a, tuple(t.shape), t.dtype) for a, t in zip(list(block.arguments)[1:], inits)]
        nexts = body(inner, block.arguments[0], carried)
        yielded = [inner.static_info_cast(t, text) for t, text in zip(nexts, type_texts)]
        inner.op("torch.prim.Loop.condition", [inner.bool(True)] + yielded, [])
        return [Tensor(r, tuple(t.shape), t.dtype) for r, t in zip(loop_op.results, inits)]

    def runtime_check(self, ok: Tensor, message: str) -> None:
        """Assert at run time that every element of the i1 tensor ``ok`` holds.

        The message starts with ``gqa-torch-mlir:``, which our refbackend turns
        into a Python exception (a plain ``cf.assert`` would abort the process);
        IREE reports a failed assert as an error status.  Callers keep the
        computation in bounds whatever the outcome (indices are clamped).
        """
        self.runtime_assert(self.all_true(ok), message)

    def all_true(self, t: Tensor):
        """Whether every element of the i1 tensor ``t`` holds, as a !torch.bool value.

        Reduced from one dim: IREE sizes a stack buffer for a reduction over several dynamic
        dims from their value ranges, which may overflow (a shape computed from data).
        """
        if t.rank > 1 and None in t.shape:
            t = self.flatten(t, 0, t.rank - 1)  # [..] -> [N]
        all_t = self.tensor_op("torch.aten.all", [t.value], (), "i1")
        return self.op("torch.aten.Bool.Tensor", [all_t.value], ["!torch.bool"])[0]

    def runtime_assert(self, flag, message: str) -> None:
        """``torch.runtime.assert`` of the !torch.bool ``flag``, message prefixed ``gqa-torch-mlir:``
        and ending with the node it checks (two Reshapes' checks read alike otherwise)."""
        text = f"gqa-torch-mlir: {message} [{self.location_label()}]"
        self.ir.Operation.create(
            "torch.runtime.assert",
            operands=[flag],
            attributes={"message": self.ir.StringAttr.get(text, self.types.context)},
            loc=self.loc,
            ip=self.ip,
        )

    def location_label(self) -> str:
        """The op's location as a user reads it: ``at 'name'`` for an imported ONNX node."""
        text = str(self.loc)
        name = re.fullmatch(r'loc\("((?:[^"\\]|\\.)*)"\)', text)
        if name:
            return f"at '{name.group(1)}'"
        place = re.fullmatch(r'loc\("((?:[^"\\]|\\.)*)":(\d+):(\d+)\)', text)  # a file:line:col of hand-written IR
        return f"at {place.group(1)}:{place.group(2)}:{place.group(3)}" if place else f"at {text}"

    def check_dim(self, t: Tensor, d: int, size: Dim, message: str) -> None:
        """Assert at run time that dim ``d`` of ``t`` is ``size``; nothing when both
        are static (the caller compares static sizes when it validates).

        A dim only known at run time that the lowering assumes equal to another
        (a batch size, a refined head size) must be checked: torch-mlir's casts
        and broadcasts trust the types, and a wrong size would read out of bounds.
        """
        actual = self.size(t, d)
        if isinstance(actual, int) and isinstance(size, int):
            return
        # size == 0 as size <= 0: torch-mlir rewrites a dynamic size compared equal to 0 into
        # its own assert that the size is > 0 ("Expected dim size > 0."), failing every empty one.
        self.runtime_assert(self.dim_le(actual, 0) if size == 0 else self.dim_eq(actual, size), message)

    def in_range(self, t: Tensor, low: Dim, high: Dim) -> Tensor:
        """i1: low <= t <= high, elementwise."""
        return self.logical_and(self.ge_scalar(t, low), self.le_scalar(t, high))

    def dim_tensor(self, d: Dim) -> Tensor:
        """A Dim as a si64 [] tensor (``prim.NumToTensor``), e.g. to check it at run time."""
        return self.tensor_op("torch.prim.NumToTensor.Scalar", [self.dim_value(d)], (), "si64")

    def item(self, t: Tensor) -> Dim:
        """The value of a one-element integer tensor as a dynamic !torch.int."""
        return self.op("torch.aten.item", [t.value], ["!torch.int"])[0]

    def items(self, tensors: Sequence[Tensor]) -> List[Dim]:
        """The values of one-element integer tensors ([] or [1]), read back to the host together:
        IREE reads their join ([n] si64) at once, where an ``item`` each would stop the step
        until the device has computed it, once per read."""
        joined_N = self.cat([self.to_dtype(t if t.rank == 1 else self.unsqueeze(t, 0), "si64") for t in tensors], 0)
        return [self.item(self.slice(joined_N, 0, i, i + 1)) for i in range(len(tensors))]

    @staticmethod
    def static(d: Dim) -> Optional[int]:
        return d if isinstance(d, int) else None

    # -- shape ops ----------------------------------------------------------
    def unflatten(self, t: Tensor, dim: int, sizes: Sequence[Dim]) -> Tensor:
        """Split ``dim`` into ``sizes`` (one static size may be -1; run-time sizes are taken as given,
        e.g. a flattened tensor's leading dims): [.., a*b, ..] -> [.., a, b, ..]."""
        static = [self.static(d) for d in sizes]
        known = None if None in static else math.prod(d for d in static if d != -1)
        inferred = t.shape[dim] // known if t.shape[dim] is not None and known else None
        shape = t.shape[:dim] + tuple(inferred if d == -1 else d for d in static) + t.shape[dim + 1 :]
        return self.tensor_op("torch.aten.unflatten.int", [t.value, self.int(dim), self.int_list(sizes)], shape, t.dtype)

    def flatten(self, t: Tensor, start: int, end: int) -> Tensor:
        """Merge dims [start, end] into one."""
        merged = t.shape[start : end + 1]
        size = None if None in merged else math.prod(merged)
        shape = t.shape[:start] + (size,) + t.shape[end + 1 :]
        return self.tensor_op("torch.aten.flatten.using_ints", [t.value, self.int(start), self.int(end)], shape, t.dtype)

    def transpose(self, t: Tensor, d0: int, d1: int) -> Tensor:
        shape = list(t.shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        return self.tensor_op("torch.aten.transpose.int", [t.value, self.int(d0), self.int(d1)], shape, t.dtype)

    def unsqueeze(self, t: Tensor, dim: int) -> Tensor:
        dim = dim if dim >= 0 else dim + t.rank + 1
        shape = t.shape[:dim] + (1,) + t.shape[dim:]
        return self.tensor_op("torch.aten.unsqueeze", [t.value, self.int(dim)], shape, t.dtype)

    def expand(self, t: Tensor, sizes: Sequence[Dim]) -> Tensor:
        """Broadcast to ``sizes`` (static or dynamic Dims); -1 keeps that dim of ``t``."""
        shape = tuple(t.shape[i] if isinstance(s, int) and s == -1 else self.static(s) for i, s in enumerate(sizes))
        return self.tensor_op("torch.aten.expand", [t.value, self.int_list(sizes), self.bool(False)], shape, t.dtype)

    def slice(self, t: Tensor, dim: int, start: Dim, end: Dim, step: int = 1, in_bounds: bool = False) -> Tensor:
        """``t[..., start:end:step, ...]`` on ``dim``; ``start`` and ``end`` may be dynamic Dims.

        On a dynamic dim the result is dynamic unless the caller knows the
        range is in bounds (``in_bounds``): then its static length is kept.
        That matters beyond precision: torch-mlir's linalg lowering never
        broadcasts a dynamic dim that is 1 at run time (it aborts on a size
        check), so a length-1 slice must be typed 1.
        """
        shape = list(t.shape)
        if not (isinstance(start, int) and isinstance(end, int)):
            shape[dim] = None
        elif shape[dim] is not None:
            shape[dim] = len(range(*slice(start, end, step).indices(shape[dim])))
        elif in_bounds and 0 <= start <= end:
            shape[dim] = len(range(start, end, step))
        else:
            shape[dim] = None  # the dim may be shorter than end
        return self.tensor_op(
            "torch.aten.slice.Tensor",
            [t.value, self.int(dim), self.dim_value(start), self.dim_value(end), self.int(step)],
            shape,
            t.dtype,
        )

    def slice_rows(self, t: Tensor, dim: int, start: Dim, length: int) -> Tensor:
        """``t[..., start:start+length, ...]`` on ``dim``, typed ``length`` long: the caller guarantees
        ``start + length`` is within the dim (torch-mlir trusts the static size)."""
        shape = list(t.shape)
        shape[dim] = length
        end = self.dim_add(start, length)
        return self.tensor_op(
            "torch.aten.slice.Tensor", [t.value, self.int(dim), self.dim_value(start), self.dim_value(end), self.int(1)], shape, t.dtype
        )

    def pad_dim_end(self, t: Tensor, dim: int, amount: Dim, value: float = 0.0) -> Tensor:
        """``constant_pad_nd`` appending ``amount`` entries of ``value`` to ``dim``."""
        pads = []
        for d in reversed(range(t.rank)):
            pads += [0, amount if d == dim else 0]
        last = max(i for i, p in enumerate(pads) if not (isinstance(p, int) and p == 0))
        shape = list(t.shape)
        both_static = t.shape[dim] is not None and isinstance(amount, int)
        shape[dim] = t.shape[dim] + amount if both_static else None
        return self.tensor_op(
            "torch.aten.constant_pad_nd", [t.value, self.int_list(pads[: last + 1]), self.float(value)], shape, t.dtype
        )

    def cat(self, tensors: Sequence[Tensor], dim: int) -> Tensor:
        sizes = [t.shape[dim] for t in tensors]
        shape = list(tensors[0].shape)
        shape[dim] = None if None in sizes else sum(sizes)
        for i in range(len(shape)):
            if i != dim:
                known = [t.shape[i] for t in tensors if t.shape[i] is not None]
                shape[i] = known[0] if known else None
        return self.tensor_op("torch.aten.cat", [self.tensor_list(tensors), self.int(dim)], shape, tensors[0].dtype)

    # -- data ops -----------------------------------------------------------
    def to_dtype(self, t: Tensor, dtype: str) -> Tensor:
        if t.dtype == dtype:
            return t
        f = self.bool(False)
        operands = [t.value, self.int(DTYPE_CODES[dtype]), f, f, self.none()]
        return self.tensor_op("torch.aten.to.dtype", operands, t.shape, dtype)

    def arange(self, end: Dim, dtype: str = "si64") -> Tensor:
        """``[0, 1, ..., end-1]`` as a 1-D tensor."""
        n = self.none()
        operands = [self.dim_value(end), self.int(DTYPE_CODES[dtype]), n, n, n]
        return self.tensor_op("torch.aten.arange", operands, (self.static(end),), dtype)

    def flip(self, t: Tensor, dim: int) -> Tensor:
        """Reverse ``t`` along ``dim``."""
        return self.tensor_op("torch.aten.flip", [t.value, self.int_list([dim])], t.shape, t.dtype)

    def add_scalar(self, t: Tensor, scalar: Dim) -> Tensor:
        """``t + scalar`` with an int scalar (static or a !torch.int value)."""
        return self.tensor_op("torch.aten.add.Scalar", [t.value, self.dim_value(scalar), self.int(1)], t.shape, t.dtype)

    def mul_scalar(self, t: Tensor, scalar: float) -> Tensor:
        return self.tensor_op("torch.aten.mul.Scalar", [t.value, self.float(scalar)], t.shape, t.dtype)

    def add_float(self, t: Tensor, scalar: float) -> Tensor:
        """``t + scalar`` with a float scalar."""
        return self.tensor_op("torch.aten.add.Scalar", [t.value, self.float(scalar), self.int(1)], t.shape, t.dtype)

    def lt_float(self, t: Tensor, scalar: float) -> Tensor:
        """``t < scalar`` with a float scalar, as i1."""
        return self.tensor_op("torch.aten.lt.Scalar", [t.value, self.float(scalar)], t.shape, "i1")

    def _binary(self, name: str, a: Tensor, b: Tensor, dtype: str, extra=()) -> Tensor:
        shape = broadcast_shapes(a.shape, b.shape)
        return self.tensor_op(name, [a.value, b.value, *extra], shape, dtype)

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.add.Tensor", a, b, a.dtype, [self.int(1)])

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.sub.Tensor", a, b, a.dtype, [self.int(1)])

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.mul.Tensor", a, b, a.dtype)

    def le(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.le.Tensor", a, b, "i1")

    def minimum(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.minimum", a, b, a.dtype)

    def eq_scalar(self, t: Tensor, scalar) -> Tensor:
        """``t == scalar`` (a float, an int, or a !torch.int value) as i1."""
        value = self.float(scalar) if isinstance(scalar, float) else self.dim_value(scalar)
        return self.tensor_op("torch.aten.eq.Scalar", [t.value, value], t.shape, "i1")

    def ne_scalar(self, t: Tensor, scalar: Dim) -> Tensor:
        """``t != scalar`` (an int or a !torch.int value) as i1."""
        return self.tensor_op("torch.aten.ne.Scalar", [t.value, self.dim_value(scalar)], t.shape, "i1")

    def ge(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.ge.Tensor", a, b, "i1")

    def logical_and(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.logical_and", a, b, "i1")

    def logical_or(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.logical_or", a, b, "i1")

    def logical_not(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.logical_not", [t.value], t.shape, "i1")

    def maximum(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.maximum", a, b, a.dtype)

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary("torch.aten.div.Tensor", a, b, a.dtype)

    def where(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape), b.shape)
        return self.tensor_op("torch.aten.where.self", [cond.value, a.value, b.value], shape, a.dtype)

    def where_else_scalar(self, cond: Tensor, a: Tensor, other: float) -> Tensor:
        """``where(cond, a, other)`` with a float scalar for the false branch."""
        shape = broadcast_shapes(cond.shape, a.shape)
        return self.tensor_op("torch.aten.where.ScalarOther", [cond.value, a.value, self.float(other)], shape, a.dtype)

    def isnan(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.isnan", [t.value], t.shape, "i1")

    def exp(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.exp", [t.value], t.shape, t.dtype)

    def tanh(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.tanh", [t.value], t.shape, t.dtype)

    def amax(self, t: Tensor, dim: int) -> Tensor:
        """Max over ``dim``, kept as size 1."""
        shape = t.shape[:dim] + (1,) + t.shape[dim + 1 :]
        return self.tensor_op("torch.aten.amax", [t.value, self.int_list([dim]), self.bool(True)], shape, t.dtype)

    def amin(self, t: Tensor, dim: int) -> Tensor:
        """Min over ``dim``, kept as size 1."""
        shape = t.shape[:dim] + (1,) + t.shape[dim + 1 :]
        return self.tensor_op("torch.aten.amin", [t.value, self.int_list([dim]), self.bool(True)], shape, t.dtype)

    def sum_dim(self, t: Tensor, dim: int) -> Tensor:
        """Sum over ``dim``, kept as size 1."""
        shape = t.shape[:dim] + (1,) + t.shape[dim + 1 :]
        operands = [t.value, self.int_list([dim]), self.bool(True), self.none()]
        return self.tensor_op("torch.aten.sum.dim_IntList", operands, shape, t.dtype)

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """Batched ``a @ b``: [..., M, K] x [..., K, N] -> [..., M, N]."""
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return self.tensor_op("torch.aten.matmul", [a.value, b.value], batch + (a.shape[-2], b.shape[-1]), a.dtype)

    def where_scalar_else(self, cond: Tensor, if_true, other: Tensor) -> Tensor:
        """``where(cond, if_true, other)`` with an int (or Dim) or float scalar for the true branch."""
        scalar = self.float(if_true) if isinstance(if_true, float) else self.dim_value(if_true)
        shape = broadcast_shapes(cond.shape, other.shape)
        return self.tensor_op("torch.aten.where.ScalarSelf", [cond.value, scalar, other.value], shape, other.dtype)

    def clamp(self, t: Tensor, low: float, high: float) -> Tensor:
        return self.tensor_op("torch.aten.clamp", [t.value, self.float(low), self.float(high)], t.shape, t.dtype)

    def round(self, t: Tensor) -> Tensor:
        """Round half to even, like numpy's rint."""
        return self.tensor_op("torch.aten.round", [t.value], t.shape, t.dtype)

    def remainder_scalar(self, t: Tensor, divisor: Dim) -> Tensor:
        """``t mod divisor`` (Python's sign: in ``[0, divisor)`` for a positive divisor)."""
        return self.tensor_op("torch.aten.remainder.Scalar", [t.value, self.dim_value(divisor)], t.shape, t.dtype)

    def floor_divide_scalar(self, t: Tensor, divisor: Dim) -> Tensor:
        """``t // divisor`` for small integers only: IREE lowers an integer division through f32,
        wrong once ``|t|`` passes 2^24 (use ``remainder_scalar``, exact, where values can be large)."""
        return self.tensor_op("torch.aten.floor_divide.Scalar", [t.value, self.dim_value(divisor)], t.shape, t.dtype)

    def clamp_int(self, t: Tensor, low: Dim, high: Dim) -> Tensor:
        """Clamp an integer tensor to [low, high] (static or dynamic bounds)."""
        return self.tensor_op("torch.aten.clamp", [t.value, self.dim_value(low), self.dim_value(high)], t.shape, t.dtype)

    def mul_int_scalar(self, t: Tensor, scalar: Dim) -> Tensor:
        return self.tensor_op("torch.aten.mul.Scalar", [t.value, self.dim_value(scalar)], t.shape, t.dtype)

    def le_scalar(self, t: Tensor, scalar: Dim) -> Tensor:
        return self.tensor_op("torch.aten.le.Scalar", [t.value, self.dim_value(scalar)], t.shape, "i1")

    def gather(self, t: Tensor, dim: int, index: Tensor) -> Tensor:
        """``torch.gather``: the result has the index's shape."""
        return self.tensor_op("torch.aten.gather", [t.value, self.int(dim), index.value, self.bool(False)], index.shape, t.dtype)

    def clamp_min(self, t: Tensor, low: float) -> Tensor:
        return self.tensor_op("torch.aten.clamp_min", [t.value, self.float(low)], t.shape, t.dtype)

    def neg(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.neg", [t.value], t.shape, t.dtype)

    def where_scalars(self, cond: Tensor, if_true: float, if_false: float, dtype: str) -> Tensor:
        """``where(cond, if_true, if_false)`` with float scalars, as ``dtype``."""
        operands = [cond.value, self.float(if_true), self.float(if_false)]
        return self.tensor_op("torch.aten.where.Scalar", operands, cond.shape, dtype)

    def gather_rows(self, table: Tensor, index: Tensor) -> Tensor:
        """``table[index]`` on dim 0: [N, R] indexed by [...] -> [..., R]."""
        shape = index.shape + table.shape[1:]
        indices = self.tensor_list([index], optional=True)
        return self.tensor_op("torch.aten.index.Tensor", [table.value, indices], shape, table.dtype)

    def slice_scatter(self, t: Tensor, src: Tensor, dim: int, start: Dim, end: Dim) -> Tensor:
        """``t`` with ``t[..., start:end, ...] = src`` on ``dim`` (``start``/``end`` may be dynamic)."""
        operands = [t.value, src.value, self.int(dim), self.dim_value(start), self.dim_value(end), self.int(1)]
        return self.tensor_op("torch.aten.slice_scatter", operands, t.shape, t.dtype)

    def scatter_src(self, t: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.scatter.src", [t.value, self.int(dim), index.value, src.value], t.shape, t.dtype)

    def sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], enable_gqa: bool) -> Tensor:
        """``scaled_dot_product_attention`` with its default scale 1/sqrt(Dh).

        No explicit scale is passed: torch-mlir's linalg lowering drops it.
        Callers fold any other scale into the query instead.
        """
        operands = [
            q.value,
            k.value,
            v.value,
            mask.value if mask is not None else self.none(),
            self.float(0.0),
            self.bool(False),
            self.none(),
            self.bool(enable_gqa),
        ]
        shape = q.shape[:-1] + v.shape[-1:]
        return self.tensor_op("torch.aten.scaled_dot_product_attention", operands, shape, q.dtype)

    def refine(self, t: Tensor, dims: dict, what: str, why: str = "") -> Tensor:
        """``t`` with dynamic dims ``{index: size}`` refined to static sizes (tensor_static_info_cast).

        Each refined dim is checked at run time (``what`` names the tensor in
        the message, ``why`` ends it): the cast itself would trust a wrong size.
        """
        for i, d in enumerate(t.shape):
            if d is None and i in dims:
                self.check_dim(t, i, dims[i], f"{what} dimension {i} must be {dims[i]}{why}")
        return self.known_static(t, dims)

    def known_static(self, t: Tensor, dims: dict) -> Tensor:
        """``t`` with dynamic dims ``{index: size}`` typed static, unchecked: for a branch taken only
        when those sizes hold (``if_else`` on them)."""
        shape = tuple(dims.get(i, d) if d is None else d for i, d in enumerate(t.shape))
        if shape == t.shape:
            return t
        (res,) = self.op("torch.tensor_static_info_cast", [t.value], [vtensor_type_text(shape, t.dtype)])
        return Tensor(res, shape, t.dtype)

    def checked_static(self, t: Tensor, dims: dict, what: str, why: str = "") -> Tensor:
        """:meth:`refine`'s checks, then each checked dim sliced to ``[0, size)``, typed static:
        [?,..] -> [size,..].

        Not refine's cast: IREE folds a cast of a graph input into the input's import, whose own
        shape assert then fails before our check and names no input.  After a passed check the
        slice is the whole dim.
        """
        for d, size in dims.items():
            if t.shape[d] is None:
                self.check_dim(t, d, size, f"{what} dimension {d} must be {size}{why}")
        for d, size in dims.items():
            if t.shape[d] is None:
                t = self.slice(t, d, 0, size, in_bounds=True)  # [..,?,..] -> [..,size,..]
        return t

    def static_info_cast(self, t: Tensor, type_text: str):
        """Cast to another shape refinement of the same tensor (e.g. an op's declared result type).

        A declared type that is not a ranked vtensor (the importer writes
        ``!torch.none`` for values ONNX shape inference could not type) is not
        a refinement: ``t`` keeps its own, exact type.
        """
        if vtensor_type_text(t.shape, t.dtype) == type_text or parse_vtensor_type(type_text) is None:
            return t.value
        return self.op("torch.tensor_static_info_cast", [t.value], [type_text])[0]

    # -- elementwise math, reductions and integer bit ops (normalization and weight dequantization) --
    def abs(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.abs", [t.value], t.shape, t.dtype)

    def sqrt(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.sqrt", [t.value], t.shape, t.dtype)

    def erf(self, t: Tensor) -> Tensor:
        return self.tensor_op("torch.aten.erf", [t.value], t.shape, t.dtype)

    def div_scalar(self, t: Tensor, scalar: float) -> Tensor:
        """``t / scalar`` with a float scalar (a true division, not a multiplication by 1/scalar)."""
        return self.tensor_op("torch.aten.div.Scalar", [t.value, self.float(scalar)], t.shape, t.dtype)

    def full_like(self, t: Tensor, value: float, dtype: Optional[str] = None) -> Tensor:
        """A tensor of ``t``'s shape filled with ``value`` (as ``dtype``, default ``t``'s)."""
        dtype = dtype or t.dtype
        n = self.none()
        scalar = self.float(value) if dtype in FLOAT_DTYPES else self.int(int(value))
        operands = [t.value, scalar, self.int(DTYPE_CODES[dtype]), n, n, n, n]
        return self.tensor_op("torch.aten.full_like", operands, t.shape, dtype)

    def full_sized(self, sizes: Sequence[Dim], value: float, dtype: str) -> Tensor:
        """A tensor of ``sizes`` (static or dynamic Dims) filled with ``value`` (``aten.full``)."""
        n = self.none()
        scalar = self.float(value) if dtype in FLOAT_DTYPES else self.int(int(value))
        operands = [self.int_list(sizes), scalar, self.int(DTYPE_CODES[dtype]), n, n, n]
        return self.tensor_op("torch.aten.full", operands, tuple(self.static(d) for d in sizes), dtype)

    def mean_dims(self, t: Tensor, dims: Sequence[int]) -> Tensor:
        """Mean over ``dims`` (a sum divided by the count), each kept as size 1."""
        dims = sorted(d % t.rank for d in dims)
        shape = tuple(1 if i in dims else d for i, d in enumerate(t.shape))
        operands = [t.value, self.int_list(dims), self.bool(True), self.none()]
        return self.tensor_op("torch.aten.mean.dim", operands, shape, t.dtype)

    def lt_scalar(self, t: Tensor, scalar: Dim) -> Tensor:
        """``t < scalar`` (an int or a !torch.int value) as i1."""
        return self.tensor_op("torch.aten.lt.Scalar", [t.value, self.dim_value(scalar)], t.shape, "i1")

    def ge_scalar(self, t: Tensor, scalar: Dim) -> Tensor:
        """``t >= scalar`` (an int or a !torch.int value) as i1."""
        return self.tensor_op("torch.aten.ge.Scalar", [t.value, self.dim_value(scalar)], t.shape, "i1")

    def reciprocal(self, t: Tensor) -> Tensor:
        """1 / t as a division: torch-mlir lowers ``aten.reciprocal`` with an assert that each
        element is ordered and non-zero, which a NaN fails (the refbackend then refused the call)."""
        return self.div(self.full_like(t, 1.0), t)

    def bitwise_and_scalar(self, t: Tensor, mask: int) -> Tensor:
        """``t & mask`` on an integer tensor."""
        return self.tensor_op("torch.aten.bitwise_and.Scalar", [t.value, self.int(mask)], t.shape, t.dtype)

    def bitwise_right_shift(self, t: Tensor, shift: Tensor) -> Tensor:
        """``t >> shift`` elementwise on integer tensors (broadcast)."""
        return self._binary("torch.aten.bitwise_right_shift.Tensor", t, shift, t.dtype)
