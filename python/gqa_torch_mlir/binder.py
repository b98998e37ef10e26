"""Reads an imported ``torch.operator "onnx.<Op>"`` by ONNX slot and attribute name.

Optional ONNX inputs reach the op in two forms: an empty name in the middle
becomes a ``!torch.none`` operand, and trailing unused slots may be dropped.
Both read as absent here, so a lowering never counts operands.  Attributes
are ``torch.onnx.<name>`` on the op; each getter takes the ONNX default.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .builder import Tensor, parse_vtensor_type, vtensor_type_text
from .registry import Refusal

_MISSING = object()
ATTR_PREFIX = "torch.onnx."


class OpBinder:
    """Slot- and name-based access to one ``torch.operator``."""

    def __init__(self, op, ir_module, options=None):
        from .options import LoweringOptions

        self.op = op.operation if hasattr(op, "operation") else op
        self.ir = ir_module
        self.options = options or LoweringOptions()

    @property
    def location(self):
        return self.op.location

    # -- inputs -------------------------------------------------------------
    def has_input(self, slot: int) -> bool:
        operands = self.op.operands
        return slot < len(operands) and str(operands[slot].type) != "!torch.none"

    def input_is_constant(self, slot: int) -> bool:
        """True when input ``slot`` is a graph constant (an ONNX initializer or Constant node).

        The importer turns initializers into ``torch.operator "onnx.Constant"``;
        later stages may have made them ``torch.vtensor.literal``.
        """
        if not self.has_input(slot):
            return False
        owner = getattr(self.op.operands[slot].owner, "operation", None)  # None for a block argument (a graph input)
        if owner is None:
            return False
        if owner.name == "torch.vtensor.literal":
            return True
        if owner.name == "torch.operator" and "name" in owner.attributes:
            return self.ir.StringAttr(owner.attributes["name"]).value == "onnx.Constant"
        return False

    def num_input_slots(self) -> int:
        return len(self.op.operands)

    def tensor(self, slot: int, name: str, required: bool = False) -> Optional[Tensor]:
        """Input ``slot`` as a :class:`Tensor`; None when absent (Refusal if required)."""
        if not self.has_input(slot):
            if required:
                raise Refusal("is required but absent", f"input {slot} '{name}'")
            return None
        value = self.op.operands[slot]
        parsed = parse_vtensor_type(str(value.type))
        if parsed is None:
            raise Refusal(f"must be a ranked tensor, got {value.type}", f"input {slot} '{name}'")
        return Tensor(value, *parsed)

    # -- outputs ------------------------------------------------------------
    @property
    def num_results(self) -> int:
        return len(self.op.results)

    def result_is_used(self, i: int) -> bool:
        return any(True for _ in self.op.results[i].uses)

    def result_type_text(self, i: int) -> str:
        return str(self.op.results[i].type)

    def declared_result(self, tb, i: int, t: Tensor, name: str = ""):
        """``t`` as result ``i`` of the op, cast to the op's declared type.

        A declaration that is not a ranked vtensor (the importer writes
        ``!torch.none`` for an output ONNX shape inference could not type, or
        an unnamed one) is no refinement: ``t`` keeps its own exact type.  A
        declared dtype, rank or static dim that contradicts ``t`` is refused by
        name rather than cast.
        """
        text = self.result_type_text(i)
        parsed = parse_vtensor_type(text)
        if parsed is None:
            self._check_untyped_result_uses(i, text, name)
        if parsed is not None:
            shape, dtype = parsed
            clash = dtype != t.dtype or len(shape) != t.rank or any(d is not None and e is not None and d != e for d, e in zip(shape, t.shape))
            if clash:
                found = vtensor_type_text(t.shape, t.dtype)
                raise Refusal(f"is declared {text} but the op produces {found}", f"output {i} '{name}'" if name else f"output {i}")
            subject = f"output {i} '{name}'" if name else f"output {i}"
            for d, (declared, produced) in enumerate(zip(shape, t.shape)):
                if declared is not None and produced is None:  # the cast would trust it: check it
                    tb.check_dim(t, d, declared, f"{self.op_name}: {subject} is declared {text}: dimension {d} must be {declared}")
        return tb.static_info_cast(t, text)

    def _check_untyped_result_uses(self, i: int, text: str, name: str) -> None:
        """A result declared without a ranked tensor type may only feed ops that take any type
        (other ONNX ops); a function return or a typed op would no longer verify, naming nothing."""
        for use in self.op.results[i].uses:
            owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            if owner.name not in ("torch.operator", "torch.operator_terminator"):  # ONNX ops and their regions' yields
                raise Refusal(
                    f"is declared {text}, not a ranked tensor type, and '{owner.name}' uses it; "
                    "supported: a !torch.vtensor<[dims],dtype> declaration",
                    f"output {i} '{name}'" if name else f"output {i}",
                )

    @property
    def op_name(self) -> str:
        """The ONNX op type, e.g. ``GroupQueryAttention``."""
        name = self.ir.StringAttr(self.op.attributes["name"]).value if "name" in self.op.attributes else "?"
        return name.split(".", 1)[-1]

    # -- attributes ---------------------------------------------------------
    def attribute_names(self) -> Sequence[str]:
        """ONNX attribute names present on the op (without the prefix)."""
        return [a[len(ATTR_PREFIX) :] for a in self._attr_keys() if a.startswith(ATTR_PREFIX)]

    def attribute_keys(self):
        """Every attribute name on the op (ONNX ones prefixed ``torch.onnx.``)."""
        return self._attr_keys()

    def _attr_keys(self):
        # Newer bindings iterate names, older ones NamedAttributes.
        return [getattr(a, "name", a) for a in self.op.attributes]

    def _raw(self, name: str):
        key = ATTR_PREFIX + name
        return self.op.attributes[key] if key in self.op.attributes else None

    def attr_int(self, name: str, default=_MISSING) -> int:
        return self._attr(name, default, self._read_int, "an integer")

    def _read_int(self, raw) -> int:
        attr = self.ir.IntegerAttr(raw)
        try:
            width = self.ir.IntegerType(attr.type).width
        except ValueError:  # index
            width = None
        if width == 1:
            raise ValueError("a boolean")  # i1 reads as -1 for true: no ONNX integer
        return int(attr.value)

    def attr_float(self, name: str, default=_MISSING) -> float:
        """As an ONNX float attribute holds it: rounded to f32 (hand-written IR may carry an f64,
        whose 1e300 would pass a finiteness check and then be inf in the f32 code).  So is a float
        default: onnxruntime's 1e-5 is the f32 nearest, which f64 arithmetic tells apart."""
        if isinstance(default, float):
            default = _as_f32(default)
        return self._attr(name, default, lambda raw: _as_f32(float(self.ir.FloatAttr(raw).value)), "a float")

    def attr_str(self, name: str, default=_MISSING) -> str:
        return self._attr(name, default, lambda raw: str(self.ir.StringAttr(raw).value), "a string")

    def _attr(self, name: str, default, read, kind: str):
        """The attribute's value read by ``read``; ``default`` when absent (a Refusal if required)."""
        raw = self._raw(name)
        if raw is None:
            return self._default(name, default)
        try:
            return read(raw)
        except (ValueError, TypeError, RuntimeError):  # RuntimeError: a string that is not UTF-8
            raise Refusal(f"must be {kind}, got {_printable(raw)}", f"attribute '{name}'") from None

    def has_attr(self, name: str) -> bool:
        return self._raw(name) is not None

    @staticmethod
    def _default(name: str, default):
        if default is _MISSING:
            raise Refusal("is required but absent", f"attribute '{name}'")
        return default



def _as_f32(value: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _printable(raw) -> str:
    try:
        return str(raw)
    except Exception:  # noqa: BLE001  bytes that are not UTF-8
        return "an attribute that is not valid text"
