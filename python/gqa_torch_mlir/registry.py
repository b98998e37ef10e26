"""Registry of Python lowerings for ONNX ops imported as ``torch.operator``.

torch-mlir's ONNX importer turns every ONNX node into
``torch.operator "onnx.<OpType>"``, whatever its domain (a com.microsoft op
arrives as ``onnx.GroupQueryAttention``), with the function attributes
``torch.onnx_meta.opset_version`` (default domain) and
``torch.onnx_meta.opset_versions`` (other domains, e.g. ``{com.microsoft = 1}``).

A lowering is registered per ONNX op type, domain and since-version::

    @onnx_op("GroupQueryAttention", domain="com.microsoft", since=1)
    def lower_gqa(binder: OpBinder, builder: TorchBuilder):
        ...                      # return the replacement values, or
        raise Refusal("...")     # say why not (or return a Refusal), or
        return NOT_LOWERED       # leave the op to torch-mlir's conversion

Lookup picks, among the lowerings registered for the op's name, the one with
the highest since-version not above the model's opset for that domain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

DEFAULT_DOMAIN = ""


class Refusal(Exception):
    """Why a lowering does not apply: a value the pass reports at the op's location.

    ``subject`` names the attribute, input or output at fault (``"attribute
    'softcap'"``); ``reason`` says what was found and what is supported.
    Patterns may ``raise`` it from deep helpers or ``return`` it.
    """

    def __init__(self, reason: str, subject: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.subject = subject

    def message(self, op_label: str) -> str:
        prefix = f"{op_label}: {self.subject}: " if self.subject else f"{op_label}: "
        return prefix + self.reason


class _NotLowered:
    """What a lowering returns to leave the op as it is, for torch-mlir's own conversion."""

    def __repr__(self) -> str:
        return "NOT_LOWERED"


#: Returned by a lowering that has nothing to add for this op (e.g. Gather with constant indices).
NOT_LOWERED = _NotLowered()


@dataclass(frozen=True)
class Lowering:
    op_type: str
    domain: str
    since: int
    fn: Callable

    @property
    def label(self) -> str:
        return f"{self.domain or 'ai.onnx'}.{self.op_type}"


@dataclass
class Registry:
    """Lowerings by ``onnx.<OpType>`` name."""

    _by_name: Dict[str, List[Lowering]] = field(default_factory=dict)

    def register(self, op_type: str, *, domain: str = DEFAULT_DOMAIN, since: int = 1):
        """Decorator registering ``fn(binder, builder)`` for ``op_type``."""

        def wrap(fn):
            entries = self._by_name.setdefault("onnx." + op_type, [])
            if any(e.domain == domain and e.since == since for e in entries):
                raise ValueError(f"{domain or 'ai.onnx'}.{op_type} since {since} is registered twice")
            entries.append(Lowering(op_type, domain, since, fn))
            entries.sort(key=lambda e: -e.since)
            return fn

        return wrap

    def names(self) -> List[str]:
        return sorted(self._by_name)

    def candidates(self, name: str, domain: Optional[str] = None) -> List[Lowering]:
        """The lowerings registered for ``name`` (in ``domain`` only, when given)."""
        return [e for e in self._by_name.get(name, []) if domain is None or e.domain == domain]

    def lookup(self, name: str, opset_of: Callable[[str], Optional[int]], domain: Optional[str] = None) -> Optional[Lowering]:
        """The lowering for ``name`` given ``opset_of(domain)``; None if none applies.

        ``opset_of`` returns the model's opset for a domain, or None when the
        model does not say (then the newest lowering is used).  ``domain``:
        the node's, when two domains define the name (dispatch.py).
        """
        for entry in self.candidates(name, domain):
            version = opset_of(entry.domain)
            if version is None or entry.since <= version:
                return entry
        return None


#: The registry the pass uses unless told otherwise.
REGISTRY = Registry()


def onnx_op(op_type: str, *, domain: str = DEFAULT_DOMAIN, since: int = 1):
    """Register a lowering in the default registry (see module docstring)."""
    return REGISTRY.register(op_type, domain=domain, since=since)
