"""A model compiled again with some symbolic dims fixed, and each call run on the function it fits.

``InferenceSession(model, backend="iree-cpu", specialize=[{"batch_size": 1, "sequence_length": 1}])``
compiles the graph as declared and, into the same IREE module, a copy whose
dims of those names have those sizes (preimport/dims.py).  IREE shares the
weights between the two functions.  A call whose feeds have every fixed size
runs the copy; any other call runs the general function.

Why: a builder's decoder lowers each layer's GroupQueryAttention with run-time
branches on B == 1 and S == 1, and IREE submits the work on each side of a
branch separately.  With both fixed, a decode step is one submission
(benchmarks/README.md, "CPU, round 26").
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

import onnx

from .errors import GqaTorchMlirError
from .preimport.dims import input_dims


def function_name(main: str, index: int) -> str:
    """The entry point compiled for the ``index``-th specialization of ``main``."""
    return f"{main}_fixed_{index}"


def checked(proto: onnx.ModelProto, specialize) -> List[Dict[str, int]]:
    """``specialize`` (one mapping of dim name -> size, or a sequence of them) checked against the
    symbolic dims of ``proto``'s inputs; refused by name where a dim or size is not one."""
    if specialize is None:
        return []
    specs = [specialize] if isinstance(specialize, Mapping) else specialize
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence):
        raise GqaTorchMlirError(f"specialize must be a dict of dim name -> size, or a list of them; got {specialize!r}")
    known = input_dims(proto)
    out: List[Dict[str, int]] = []
    for spec in specs:
        if not isinstance(spec, Mapping) or not spec:
            raise GqaTorchMlirError(f"specialize: each entry must be a non-empty dict of dim name -> size, got {spec!r}")
        for name, size in spec.items():
            if name not in known:
                listed = ", ".join(sorted(known)) or "none"
                raise GqaTorchMlirError(f"specialize: {name!r} is not a symbolic dim of the model's inputs (they have: {listed})")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise GqaTorchMlirError(f"specialize: dim {name!r} must be fixed to a positive integer, got {size!r}")
        if dict(spec) in out:
            raise GqaTorchMlirError(f"specialize: {dict(spec)!r} is given twice")
        out.append(dict(spec))
    return out


def parse(text: str) -> Dict[str, int]:
    """``"batch_size=1,sequence_length=1"`` (the command line's ``--specialize``) as a dict; sizes
    are checked against the model by :func:`checked`."""
    sizes: Dict[str, int] = {}
    for item in text.split(","):
        name, eq, size = item.strip().partition("=")
        if not eq or not name.strip() or not size.strip().lstrip("-").isdigit():
            raise GqaTorchMlirError(f"--specialize takes NAME=SIZE[,NAME=SIZE...] (e.g. batch_size=1,sequence_length=1); got {text!r}")
        sizes[name.strip()] = int(size)
    return sizes


def general_function(functions: Sequence[str], count: int) -> str:
    """Of a module's entry points, the general one of ``count`` specializations (a vmfb compiled
    elsewhere); refused where the module does not hold exactly those."""
    for main in functions:
        if sorted(functions) == sorted([main, *(function_name(main, k) for k in range(count))]):
            return main
    expected = "one entry point" + (f" and its {count} specialization(s)" if count else "")
    raise GqaTorchMlirError(f"the vmfb has {len(functions)} entry points ({', '.join(functions)}); expected {expected}: "
                            "pass specialize= as the module was compiled (gqa-torch-mlir compile --specialize)")


class EntryPoints:
    """Which compiled function a call runs: the first specialization whose sizes every feed has, else
    the general function.  A check is (input position, axis, size) over the feeds in input order."""

    def __init__(self, general: str, specialized: Sequence[Tuple[str, Mapping[str, int]]], input_shapes: Sequence) -> None:
        self.general = general
        self._choices: List[Tuple[str, Tuple[Tuple[int, int, int], ...]]] = []
        for name, sizes in specialized:
            checks = tuple((i, axis, sizes[d]) for i, shape in enumerate(input_shapes)
                           for axis, d in enumerate(shape or ()) if isinstance(d, str) and d in sizes)
            self._choices.append((name, checks))

    def pick(self, args: Sequence) -> str:
        for name, checks in self._choices:
            if all(args[i].shape[axis] == size for i, axis, size in checks):
                return name
        return self.general
