"""Greedy generation through an onnxruntime-genai builder decoder, step by step.

A builder graph takes ``input_ids``, ``attention_mask`` and one
``past_key_values.<layer>.key|value`` pair per layer, and returns ``logits``
and the ``present.*`` caches that the next step feeds back.  Full-attention
layers grow their cache; layers with ``sliding_window_cache = 1`` keep a fixed
window-sized buffer, as onnxruntime-genai runs them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import onnx
from onnx import helper

EMBEDDED_DECODER = Path(__file__).resolve().parents[1] / "data" / "tiny-mistral"

Run = Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]


class Decoder:
    """A builder decoder directory (model.onnx, external data, genai_config.json)."""

    def __init__(self, directory) -> None:
        directory = Path(directory)
        self.path = directory / "model.onnx"
        graph = onnx.load(str(self.path), load_external_data=False).graph
        config = json.loads((directory / "genai_config.json").read_text())["model"]["decoder"]
        self.layers, self.kv_heads, self.head_size = config["num_hidden_layers"], config["num_key_value_heads"], config["head_size"]
        past = next(i for i in graph.input if i.name == "past_key_values.0.key")
        self.kv_dtype = helper.tensor_dtype_to_np_dtype(past.type.tensor_type.elem_type)
        self.capacity: Dict[int, int] = {}  # layer -> fixed capacity of a window-sized cache
        self.window = -1
        for node in graph.node:
            if node.op_type == "GroupQueryAttention":
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                layer = int(node.input[3].split(".")[1])  # past_key_values.<layer>.key
                self.window = max(self.window, attrs.get("local_window_size", -1))
                if attrs.get("sliding_window_cache", 0) == 1:
                    self.capacity[layer] = attrs["local_window_size"]

    def empty_cache(self, shared_capacity: int = 0) -> Dict[str, np.ndarray]:
        """Zero past caches: window-sized buffers for window layers; full-attention
        layers start empty (a growing cache) or, with ``shared_capacity``, as
        fixed buffers of that many rows (onnxruntime-genai's past_present_share_buffer)."""
        shape = lambda layer: (1, self.kv_heads, self.capacity.get(layer, shared_capacity), self.head_size)  # noqa: E731
        return {f"past_key_values.{l}.{kv}": np.zeros(shape(l), self.kv_dtype) for l in range(self.layers) for kv in ("key", "value")}

    def generate(self, run: Run, prompt: List[int], steps: int, tokens: Optional[List[int]] = None, on_step=None, shared_capacity: int = 0):
        """Prefill ``prompt``, then ``steps`` greedy decode steps.

        ``tokens`` forces the fed-back tokens (to compare two runs on the
        same path); ``on_step(step, token, logits)`` sees each step.
        Returns (tokens, logits per step, last presents).
        """
        past, context, new, chosen, logits = self.empty_cache(shared_capacity), list(prompt), list(prompt), [], []
        for step in range(steps + 1):
            feeds = {"input_ids": np.array([new], np.int64), "attention_mask": np.ones((1, len(context)), np.int64), **past}
            out = run(feeds)
            logits.append(out["logits"])
            past = {k: out[k.replace("past_key_values", "present")] for k in past}
            token = int(np.argmax(out["logits"][0, -1])) if tokens is None else tokens[step]
            chosen.append(token)
            context.append(token)
            new = [token]
            if on_step:
                on_step(step, token, out["logits"])
        return chosen, logits, past
