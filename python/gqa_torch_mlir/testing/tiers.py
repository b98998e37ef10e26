"""The test suite's two tiers.

CI runs the fast tier.  ``GQA_EXTENDED=1`` runs the extended one: the whole
GroupQueryAttention end-to-end matrix instead of its all-pairs subset, and
more property draws and mutations.  A variable of its own still overrides each
count (``GQA_PROPERTY_EXAMPLES``, ``GQA_MUTATION_EXAMPLES``, ``GQA_FULL_MATRIX``).
"""

from __future__ import annotations

import os

EXTENDED = os.environ.get("GQA_EXTENDED") == "1"


def count(variable: str, fast: int, extended: int) -> int:
    """``variable``'s value when set, else the tier's count."""
    value = os.environ.get(variable)
    return int(value) if value else (extended if EXTENDED else fast)


def full_matrix() -> bool:
    return EXTENDED or os.environ.get("GQA_FULL_MATRIX") == "1"
