"""The test suite's two tiers.

CI runs the fast tier.  ``GQA_EXTENDED=1`` runs the extended one: the whole
GroupQueryAttention end-to-end matrix instead of its all-pairs subset, and
more property draws and mutations, every decoder fixture in both cache modes
(the fast tier: one per architecture, the modes in turn), every case on every
backend where the fast tier takes the backends in turn (``across``), and each
CUDA matrix case both compiled for CUDA and run in its GPU form on the CPU (the
fast tier: one or the other), every 2-thread iree-cpu case on 1 thread too.  A variable of its own still overrides each
count (``GQA_PROPERTY_EXAMPLES``, ``GQA_MUTATION_EXAMPLES``, ``GQA_FULL_MATRIX``).
"""

from __future__ import annotations

import os
from typing import Dict, List, Sequence

EXTENDED = os.environ.get("GQA_EXTENDED") == "1"


def count(variable: str, fast: int, extended: int) -> int:
    """``variable``'s value when set, else the tier's count."""
    value = os.environ.get(variable)
    return int(value) if value else (extended if EXTENDED else fast)


def full_matrix() -> bool:
    return EXTENDED or os.environ.get("GQA_FULL_MATRIX") == "1"


def across(cases: Sequence, options: Sequence) -> List[tuple]:
    """``(case, option)`` pairs: every pair in the extended tier; in the fast tier each case once,
    the options taken in turn, so that every case and every option still runs."""
    if EXTENDED:
        return [(c, o) for c in cases for o in options]
    return [(c, options[i % len(options)]) for i, c in enumerate(cases)]


def one_per_family(names: Sequence[str]) -> List[str]:
    """Fixture names ``FAMILY-VARIANT`` (``mistral-fullcache-int4``): all of them in the extended
    tier; in the fast tier one per family, the variants taken in turn across the families."""
    if EXTENDED:
        return list(names)
    families: Dict[str, List[str]] = {}
    for name in sorted(names):
        families.setdefault(name.rsplit("-", 1)[0], []).append(name)
    return [members[i % len(members)] for i, members in enumerate(families.values())]
