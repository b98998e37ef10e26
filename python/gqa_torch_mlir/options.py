"""Options of the ``convert-onnx-gqa-to-torch`` pass, as lowerings see them.

On the command line they are the pass's options,
``--convert-onnx-gqa-to-torch=attention=decomposed`` or
``convert-onnx-gqa-to-torch{attention=decomposed}`` in a pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import GqaTorchMlirError

ATTENTION_FORMS = ("decomposed", "sdpa")


@dataclass(frozen=True)
class LoweringOptions:
    # How GroupQueryAttention's attention is written:
    #   decomposed  grouped-query math: queries regrouped by KV head, scores,
    #               mask, softmax, P.V (K/V never repeated to num_heads)
    #   sdpa        aten.scaled_dot_product_attention with enable_gqa where it
    #               can express the op (torch-mlir's lowering repeats K/V)
    attention: str = "decomposed"

    def __post_init__(self):
        if self.attention not in ATTENTION_FORMS:
            raise GqaTorchMlirError(f"option attention={self.attention!r} is not one of {', '.join(ATTENTION_FORMS)}")

    @staticmethod
    def parse(text: str) -> "LoweringOptions":
        """``"attention=sdpa"`` (space-separated key=value pairs, as MLIR pass options)."""
        known = {f.name for f in fields(LoweringOptions)}
        values = {}
        for item in text.split():
            key, eq, value = item.partition("=")
            if not eq or key not in known:
                raise GqaTorchMlirError(f"unknown pass option '{item}'; options: {', '.join(sorted(known))} (e.g. attention=decomposed)")
            values[key] = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value  # MLIR allows quotes
        return LoweringOptions(**values)
