"""Which ONNX domain an imported op belongs to, when two domains define the same op name.

torch-mlir's ONNX importer writes ``torch.operator "onnx.<OpType>"`` whatever
the node's domain, so ``com.microsoft.RotaryEmbedding`` and the standard
``RotaryEmbedding`` (opset 23) arrive under one name, and so do the contrib
and standard ``Attention``.  Their operands mean different things; a lowering
bound by name alone computes garbage (torch-mlir's own conversion binds the
contrib meaning to both).  The domain is told here from what is left:

* the operands (each shared name has a test that tells the two signatures
  apart, e.g. RotaryEmbedding's input 1 is int64 position_ids in the contrib
  op and the float cos_cache in the standard one), checked against
* the function's opset imports (``torch.onnx_meta.opset_version(s)``): a
  domain the model does not import, or imports below the op's first
  version, cannot be the node's.

Operands that fit neither signature, or a verdict the imports contradict,
are refused by name: a node whose domain cannot be told is never lowered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional

from .binder import OpBinder
from .builder import parse_vtensor_type
from .registry import DEFAULT_DOMAIN, Refusal

CONTRIB = "com.microsoft"


def _operand_type(b: OpBinder, slot: int):
    """``(shape, dtype)`` of input ``slot``, or None when absent or not a ranked tensor."""
    if not b.has_input(slot):
        return None
    return parse_vtensor_type(str(b.op.operands[slot].type))


def _rotary_domain(b: OpBinder) -> Optional[str]:
    """Input 1: int64 position_ids (contrib: input, position_ids, cos, sin) or a float cos_cache (standard)."""
    parsed = _operand_type(b, 1)
    if parsed is None:
        return None
    return CONTRIB if parsed[1].startswith(("si", "ui")) else DEFAULT_DOMAIN if parsed[1].startswith(("f", "bf")) else None


def _attention_domain(b: OpBinder) -> Optional[str]:
    """Input 1: rank-2 packed weights (contrib) or a rank-3/4 key (standard)."""
    parsed = _operand_type(b, 1)
    if parsed is None:
        return None
    return {2: CONTRIB, 3: DEFAULT_DOMAIN, 4: DEFAULT_DOMAIN}.get(len(parsed[0]))


@dataclass(frozen=True)
class SharedName:
    """An op name two domains define: the first version in each, and how the operands tell them apart."""

    since: Dict[str, int]
    tell: Callable[[OpBinder], Optional[str]]
    signatures: str  # what each domain's operands look like, for the refusal


SHARED_NAMES: Dict[str, SharedName] = {
    "onnx.RotaryEmbedding": SharedName(
        {DEFAULT_DOMAIN: 23, CONTRIB: 1},
        _rotary_domain,
        "ai.onnx (23): input 1 is a float cos_cache; com.microsoft: input 1 is int64 position_ids",
    ),
    "onnx.Attention": SharedName(
        {DEFAULT_DOMAIN: 23, CONTRIB: 1},
        _attention_domain,
        "ai.onnx (23): input 1 is a rank-3 or rank-4 key; com.microsoft: input 1 is rank-2 packed weights",
    ),
}


def _label(domain: str) -> str:
    return domain or "ai.onnx"


def domain_of(name: str, b: OpBinder, opset_of: Callable[[str], Optional[int]]) -> Optional[str]:
    """The node's domain for a shared ``name``; None for a name only one domain defines.

    Raises :class:`Refusal` when neither signature fits or the imports rule out the operands' domain.
    """
    shared = SHARED_NAMES.get(name)
    if shared is None:
        return None
    verdict = shared.tell(b)
    if verdict is None:
        raise Refusal(f"the node's domain cannot be told from its operands; supported: {shared.signatures}", "input 1")
    version = opset_of(verdict)
    # A contrib domain the function does not list is unknown, not absent (torch-mlir's own
    # tests write contrib ops without it); the default domain is always listed.
    if version is not None and version < shared.since[verdict]:
        imported = ", ".join(f"{_label(d)} {opset_of(d)}" for d in shared.since if opset_of(d) is not None)
        raise Refusal(
            f"the operands are those of {_label(verdict)}.{name.split('.', 1)[1]} (since opset {shared.since[verdict]}), "
            f"but the model imports {imported}; supported: {shared.signatures}",
            "input 1",
        )
    return verdict
