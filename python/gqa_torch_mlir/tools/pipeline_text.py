"""Splitting textual pass pipelines so our Python passes can stand anywhere in them.

A Python pass can only be added to a PassManager as a callable, not by name
in a pipeline string.  These helpers cut ``builtin.module(a, func.func(b,
convert-onnx-gqa-to-torch, c), d)`` into elements added one at a time:
``a``, ``func.func(b)``, <our pass>, ``func.func(c)``, ``d``.  Our passes are
module-level passes that act on every function, so taking one out of a
``func.func(...)`` nest does not change what it does.
"""

from __future__ import annotations

from typing import Collection, List, Tuple, Union

TEXT = "text"


class PipelineSyntaxError(ValueError):
    pass


def split_top_level(text: str) -> List[str]:
    """Split on commas outside (), {} and quotes."""
    parts, depth, current, quote = [], 0, [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise PipelineSyntaxError(f"unbalanced ')' or '}}' in '{text}'")
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    if depth != 0:
        raise PipelineSyntaxError(f"unbalanced '(' or '{{' in '{text}'")
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def element_name(element: str) -> str:
    for i, ch in enumerate(element):
        if ch in "({":
            return element[:i].strip()
    return element.strip()


def _nest_body(element: str) -> Union[str, None]:
    """The body of ``anchor(body)``; None for a pass (``name`` or ``name{opts}``)."""
    name = element_name(element)
    rest = element[len(name) :].strip()
    if rest.startswith("(") and rest.endswith(")"):
        return rest[1:-1]
    return None


Element = Tuple[str, str]  # (our pass's argument, its options) or (TEXT, pipeline element)


def flatten_pipeline(text: str, ours: Collection[str]) -> List[Element]:
    """Elements of a (possibly ``builtin.module(...)``-wrapped) pipeline, our passes (by argument) split out."""
    text = text.strip()
    body = _nest_body(text) if element_name(text) == "builtin.module" else None
    return _flatten(split_top_level(body if body is not None else text), ours, [])


def _flatten(elements: List[str], ours: Collection[str], anchors: List[str]) -> List[Element]:
    out: List[Element] = []
    for el in elements:
        name = element_name(el)
        body = _nest_body(el)
        if name in ours:
            out.append((name, el[len(name) :].strip().strip("{}")))
        elif body is not None and any(argument in body for argument in ours):
            out.extend(_flatten(split_top_level(body), ours, anchors + [name]))
        else:
            out.append((TEXT, _wrap(el, anchors)))
    return out


def _wrap(element: str, anchors: List[str]) -> str:
    for anchor in reversed(anchors):
        element = f"{anchor}({element})"
    return element
