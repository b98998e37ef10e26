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

from ..errors import GqaTorchMlirError

EMBEDDED_DECODER = Path(__file__).resolve().parents[1] / "data" / "tiny-mistral"

Run = Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]


class Decoder:
    """A builder decoder directory (genai_config.json, the model file it names, external data),
    or a decoder ONNX file (or a directory holding one) with the same I/O and no genai_config.json,
    as PyTorch's exporter writes them (testing/hf_decoders.py): its layers, KV heads and head
    size are then read from the graph's past inputs, and ``position_ids`` is fed when it takes them.

    A path that is neither raises :class:`GqaTorchMlirError` naming the file and what is missing.
    """

    def __init__(self, directory) -> None:
        directory = Path(directory)
        self.vocab_size = self.context_length = None
        if directory.is_file() or (directory.is_dir() and not (directory / "genai_config.json").exists()):
            self.path = _model_file(directory)
            graph = _load_graph(self.path)
            self.layers, self.kv_heads, self.head_size = _cache_geometry(self.path, graph)
            self.vocab_size = _logits_width(graph)
        elif not directory.is_dir():
            raise GqaTorchMlirError(f"'{directory}' is not a directory (an onnxruntime-genai model builder output) nor a decoder .onnx file")
        else:
            model = _read_config(directory / "genai_config.json")
            config = _section(model, "decoder", "model")
            self.path = directory / str(config.get("filename", "model.onnx"))
            if not self.path.is_file():
                raise GqaTorchMlirError(f"no ONNX model at '{self.path}' (genai_config.json's decoder.filename)")
            self.layers, self.kv_heads, self.head_size = (_positive(config, k) for k in ("num_hidden_layers", "num_key_value_heads", "head_size"))
            self.vocab_size = _optional_positive(model, "vocab_size")  # token ids outside it are refused before a run
            self.context_length = _optional_positive(model, "context_length")
            graph = _load_graph(self.path)
        self._check_io(graph)
        self.position_ids = any(i.name == "position_ids" for i in graph.input)
        past = next(i for i in graph.input if i.name == "past_key_values.0.key")
        self.kv_dtype = helper.tensor_dtype_to_np_dtype(past.type.tensor_type.elem_type)
        self.capacity: Dict[int, int] = {}  # layer -> fixed capacity of a window-sized cache
        self.window = -1
        for node in graph.node:
            if node.op_type == "GroupQueryAttention" and len(node.input) > 3 and node.input[3].startswith("past_key_values."):
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                layer = int(node.input[3].split(".")[1])  # past_key_values.<layer>.key
                self.window = max(self.window, attrs.get("local_window_size", -1))
                if attrs.get("sliding_window_cache", 0) == 1:
                    self.capacity[layer] = attrs["local_window_size"]

    def _check_io(self, graph) -> None:
        """The builder's input and output names, one cache pair per configured layer."""
        inputs, outputs = {i.name for i in graph.input}, {o.name for o in graph.output}
        want_in = ["input_ids", "attention_mask"] + [f"past_key_values.{l}.{kv}" for l in range(self.layers) for kv in ("key", "value")]
        want_out = ["logits"] + [f"present.{l}.{kv}" for l in range(self.layers) for kv in ("key", "value")]
        missing = [n for n in want_in if n not in inputs] + [n for n in want_out if n not in outputs]
        extra = sorted(n for n in inputs if n.startswith("past_key_values.") and n not in want_in)
        if extra and not missing:
            raise GqaTorchMlirError(
                f"'{self.path}' has more layers than genai_config.json's decoder.num_hidden_layers ({self.layers}): "
                f"{', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}"
            )
        if missing:
            raise GqaTorchMlirError(
                f"'{self.path}' is not an onnxruntime-genai decoder of {self.layers} layers (genai_config.json): "
                f"it has no {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
            )
        past = next(i for i in graph.input if i.name == "past_key_values.0.key").type.tensor_type.shape.dim
        for axis, key, want in ((1, "num_key_value_heads", self.kv_heads), (3, "head_size", self.head_size)):
            if len(past) == 4 and past[axis].HasField("dim_value") and past[axis].dim_value != want:
                raise GqaTorchMlirError(
                    f"genai_config.json: decoder.{key} is {want} but '{self.path}' has past_key_values.0.key "
                    f"dimension {axis} = {past[axis].dim_value}"
                )

    def check_tokens(self, tokens: List[int], steps: int) -> None:
        """Refuse token ids outside the vocabulary and a generation longer than the context."""
        if self.vocab_size is not None:
            bad = [t for t in tokens if not 0 <= t < self.vocab_size]
            if bad:
                raise GqaTorchMlirError(f"token ids {bad} are outside the vocabulary [0, {self.vocab_size}) of '{self.path}'")
        if self.context_length is not None and len(tokens) + steps > self.context_length:
            raise GqaTorchMlirError(
                f"a prompt of {len(tokens)} tokens and {steps} steps exceed the model's context_length ({self.context_length})"
            )

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
            if self.position_ids:
                feeds["position_ids"] = np.arange(len(context) - len(new), len(context), dtype=np.int64)[None]
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


def _model_file(path: Path) -> Path:
    """The ONNX file itself, or the one .onnx file of a directory."""
    if path.is_file():
        return path
    found = sorted(path.glob("*.onnx"))
    if len(found) != 1:
        raise GqaTorchMlirError(f"'{path}' has no genai_config.json and {len(found)} .onnx files; give the decoder's .onnx file")
    return found[0]


def _load_graph(path: Path):
    try:
        return onnx.load(str(path), load_external_data=False).graph
    except Exception as e:  # protobuf decode errors
        raise GqaTorchMlirError(f"cannot load ONNX model '{path}': {e}") from None


def _cache_geometry(path: Path, graph):
    """(layers, KV heads, head size) from the past_key_values.<layer>.key inputs [B,Hkv,P,Dh] (static Hkv, Dh)."""
    past = [i for i in graph.input if i.name.startswith("past_key_values.") and i.name.endswith(".key")]
    if not past:
        raise GqaTorchMlirError(f"'{path}' has no genai_config.json and no past_key_values.<layer>.key inputs: not a decoder with a KV cache")
    dims = past[0].type.tensor_type.shape.dim
    if len(dims) != 4 or not all(dims[i].HasField("dim_value") for i in (1, 3)):
        raise GqaTorchMlirError(f"'{path}' comes with no genai_config.json, and its {past[0].name} has no static kv_heads and head_size "
                                "(dims 1 and 3 of [batch, kv_heads, past, head_size]) to read them from")
    return len(past), dims[1].dim_value, dims[3].dim_value


def _logits_width(graph) -> Optional[int]:
    """The vocabulary size: the static last dim of the ``logits`` output, if it has one."""
    logits = [o for o in graph.output if o.name == "logits"]
    dims = logits[0].type.tensor_type.shape.dim if logits else []
    return dims[-1].dim_value if dims and dims[-1].HasField("dim_value") else None


def _read_config(path: Path) -> dict:
    """genai_config.json's "model" section."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GqaTorchMlirError(f"no '{path}' (an onnxruntime-genai model builder output is expected)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GqaTorchMlirError(f"cannot read '{path}': {e}") from None
    return _section(config, "model", path.name)


def _section(config, key: str, where: str) -> dict:
    value = config.get(key) if isinstance(config, dict) else None
    if not isinstance(value, dict):
        raise GqaTorchMlirError(f"genai_config.json: '{where}' has no \"{key}\" object")
    return value


def _optional_positive(model: dict, key: str) -> Optional[int]:
    """model.<key>, a positive integer when given."""
    if model.get(key) is None:
        return None
    value = model[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise GqaTorchMlirError(f"genai_config.json: model.{key} must be a positive integer, got {value!r}")
    return value


def _positive(config: dict, key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise GqaTorchMlirError(f"genai_config.json: decoder.{key} must be a positive integer, got {value!r}")
    return value
