"""Tiny random-weight Hugging Face decoders, exported by PyTorch's ONNX exporter.

``torch.onnx.export(..., dynamo=True, opset_version=23)`` turns a transformers
decoder (``attn_implementation="sdpa"``) into a graph of the standard
``Attention``, ``RotaryEmbedding`` and ``RMSNormalization`` ops.  The models
are built in code from :data:`TINY_CONFIGS` with a fixed seed (no hub
downloads), so a fixture is reproducible for one torch/transformers version.

Graph interface (the same names as an onnxruntime-genai builder decoder):

- inputs ``input_ids`` [batch, sequence_length] int64,
  ``attention_mask`` [batch, total_sequence_length] int64,
  ``position_ids`` [batch, sequence_length] int64 (unless exported with
  ``position_ids=False``) and, with a cache,
  ``past_key_values.<layer>.key|value`` [batch, kv_heads, past_sequence_length, head_dim];
- outputs ``logits`` [batch, sequence_length, vocab] and, with a cache,
  ``present.<layer>.key|value`` [batch, kv_heads, total_sequence_length, head_dim].

torch and transformers are imported inside the functions that need them: the
module itself imports with numpy and onnx alone.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx import helper

SEED = 0
ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma2_sdpa")

_COMMON = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=128,
    intermediate_size=128,
    max_position_embeddings=256,
    # A wider init than the default 0.02 keeps greedy top-1 margins far above float32 rounding.
    initializer_range=0.2,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

# Window 8 < prompt + steps in the tests, so the sliding layers' mask matters; untied embeddings, because a tied
# random gemma2 (inputs scaled by sqrt(hidden)) just repeats its last input token under greedy decoding.
_GEMMA2 = dict(_COMMON, sliding_window=8, query_pre_attn_scalar=256, tie_word_embeddings=False)

# arch -> (model_type, config keyword arguments, attention implementation).
# gemma2's modeling class refuses "sdpa" (_supports_sdpa = False: SDPA has no logit softcapping), so "gemma2" runs
# eager attention with the real softcapping; "gemma2_sdpa" drops attention softcapping and forces SDPA onto it.
TINY_CONFIGS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    "llama": ("llama", dict(_COMMON), "sdpa"),
    "qwen2": ("qwen2", dict(_COMMON), "sdpa"),
    "qwen3": ("qwen3", dict(_COMMON), "sdpa"),
    "mistral": ("mistral", dict(_COMMON, sliding_window=None), "sdpa"),
    "gemma2": ("gemma2", dict(_GEMMA2), "eager"),
    "gemma2_sdpa": ("gemma2", dict(_GEMMA2, attn_logit_softcapping=None), "sdpa-forced"),
}


def tiny_config(arch: str):
    """The transformers config of ``arch`` (a key of :data:`TINY_CONFIGS`)."""
    from transformers import AutoConfig

    model_type, kwargs, attn = _entry(arch)
    config = AutoConfig.for_model(model_type, **kwargs)
    config._attn_implementation = "eager" if attn == "eager" else "sdpa"
    return config


def tiny_model(arch: str, *, seed: int = SEED):
    """A float32 ``*ForCausalLM`` of ``arch`` with weights drawn after ``torch.manual_seed(seed)``, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    _, _, attn = _entry(arch)
    config = tiny_config(arch)
    torch.manual_seed(seed)
    if attn == "sdpa-forced":
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
        # Bypasses the class's _supports_sdpa check; valid here because attention softcapping is off.
        model.config._attn_implementation = "sdpa"
    else:
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=torch.float32)
    return model.eval()


def _entry(arch: str):
    if arch not in TINY_CONFIGS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(TINY_CONFIGS)}")
    return TINY_CONFIGS[arch]


def _cache_keyword(model) -> str:
    """Recent transformers 5 releases name the cache argument ``cache`` (``past_key_values`` is deprecated)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_layers(output) -> List[Tuple[Any, Any]]:
    cache = getattr(output, "cache", None)
    if cache is None:
        cache = output.past_key_values
    return [(layer.keys, layer.values) for layer in cache.layers]


def _wrapper(model, num_layers: int, with_cache: bool, with_position_ids: bool):
    """An nn.Module over flat tensors: (input_ids, attention_mask[, position_ids], *past) -> (logits, *present)."""
    import torch
    from transformers import DynamicCache

    cache_keyword = _cache_keyword(model)

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *rest):
            if with_position_ids:
                position_ids, past = rest[0], rest[1:]
            else:
                # generate's positions, computed in the graph. Left to itself, transformers uses
                # cache_position[None] ([1, S]), whose cos/sin of batch 1 the fused RotaryEmbedding (which wants
                # [batch, S, rotary_dim/2]) refuses in onnxruntime for batch > 1.
                positions = attention_mask.long().cumsum(-1) - 1
                positions = positions.masked_fill(attention_mask == 0, 1)
                position_ids, past = positions[:, -input_ids.shape[1]:], rest
            kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
            if not with_cache:
                return self.model(**kwargs, use_cache=False).logits
            # Without a config every layer is a plain DynamicLayer: sliding layers keep the whole cache and the
            # sliding-window mask restricts them (a traced DynamicSlidingWindowLayer would bake in its cut).
            cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(num_layers)])
            out = self.model(**kwargs, use_cache=True, **{cache_keyword: cache})
            return (out.logits, *(t for kv in _cache_layers(out) for t in kv))

    return Decoder().eval()


def io_names(num_layers: int, *, with_cache: bool, position_ids: bool = True) -> Tuple[List[str], List[str]]:
    """The graph's input and output names."""
    inputs = ["input_ids", "attention_mask"] + (["position_ids"] if position_ids else [])
    outputs = ["logits"]
    if with_cache:
        inputs += [f"past_key_values.{l}.{kv}" for l in range(num_layers) for kv in ("key", "value")]
        outputs += [f"present.{l}.{kv}" for l in range(num_layers) for kv in ("key", "value")]
    return inputs, outputs


GQA_FORMS = ("repeat_kv", "enable_gqa", "fused")


def export_decoder(
    arch: str,
    path,
    *,
    with_cache: bool,
    opset: int = 23,
    position_ids: bool = True,
    gqa: str = "repeat_kv",
    seed: int = SEED,
    model=None,
) -> onnx.ModelProto:
    """Export the tiny ``arch`` decoder with ``torch.onnx.export(dynamo=True)`` to the single file ``path``.

    Batch, sequence, past and total lengths are dynamic (named ``batch``,
    ``sequence_length``, ``past_sequence_length``, ``total_sequence_length``);
    a past of length 0 is accepted, so one graph runs prefill and decode.

    ``gqa`` picks how grouped key/value heads reach ``Attention``:

    - ``"repeat_kv"``: transformers' own SDPA path with a mask; K/V are repeated
      to the query heads (Unsqueeze/Expand/Reshape) before ``Attention``;
    - ``"enable_gqa"``: transformers' ``TRANSFORMERS_SDPA_FORCE_GQA=1`` during the
      export, so SDPA gets ``enable_gqa=True`` and ``Attention`` takes K/V with
      the key/value heads;
    - ``"fused"`` (needs ``with_cache``): ``"enable_gqa"``, then each
      ``Attention(q, Concat(past_k, k), Concat(past_v, v), mask)`` becomes
      ``Attention(q, k, v, mask, past_k, past_v)`` whose present_key/present_value
      outputs are the graph's ``present.*`` outputs.

    ``model`` overrides :func:`tiny_model` (it must match ``arch``'s config).
    Returns the saved model.
    """
    import torch

    if gqa not in GQA_FORMS:
        raise ValueError(f"gqa must be one of {GQA_FORMS}, got {gqa!r}")
    if gqa == "fused" and not with_cache:
        raise ValueError("gqa='fused' moves the cache Concat into Attention: it needs with_cache=True")
    if model is None:
        model = tiny_model(arch, seed=seed)
    config = model.config
    layers, kv_heads = config.num_hidden_layers, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    batch, seq = 2, 5
    past_len = 3 if with_cache else 0  # sample sizes: none 0 or 1, no two alike (torch.export specializes those)
    gen = torch.Generator().manual_seed(seed)
    # One Dim object per meaning: all past inputs share one symbol, so present.* shapes agree.
    Dim = torch.export.Dim
    B, S = Dim("batch"), Dim("sequence_length")
    P, T = Dim("past_sequence_length"), Dim("total_sequence_length")
    args = [
        torch.randint(3, config.vocab_size, (batch, seq), generator=gen),
        torch.ones(batch, past_len + seq, dtype=torch.int64),
    ]
    shapes: List[Any] = [{0: B, 1: S}, {0: B, 1: T if with_cache else S}]
    rest: List[Any] = []  # forward's *rest: position_ids, then the past tensors
    if position_ids:
        args.append(torch.arange(past_len, past_len + seq).expand(batch, seq).contiguous())
        rest.append({0: B, 1: S})
    if with_cache:
        args += [torch.randn(batch, kv_heads, past_len, head_dim, generator=gen) for _ in range(2 * layers)]
        rest += [{0: B, 2: P} for _ in range(2 * layers)]
    if rest:  # torch.export sees an empty *rest as no argument at all
        shapes.append(tuple(rest))
    input_names, output_names = io_names(layers, with_cache=with_cache, position_ids=position_ids)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with _force_sdpa_gqa(gqa != "repeat_kv"):
        program = torch.onnx.export(
            _wrapper(model, layers, with_cache, position_ids),
            tuple(args),
            dynamo=True,
            opset_version=opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=tuple(shapes),
            optimize=True,
            verbose=False,
        )
    proto = program.model_proto
    if gqa == "fused":
        if fuse_attention_cache(proto) != layers:
            raise RuntimeError(f"gqa='fused': expected {layers} Attention nodes over a cache Concat")
    onnx.save_model(proto, str(path), save_as_external_data=False)
    return proto


class _force_sdpa_gqa:
    """Set transformers' TRANSFORMERS_SDPA_FORCE_GQA=1 for the block (it is read at each SDPA call)."""

    def __init__(self, on: bool):
        self.on, self.saved = on, None

    def __enter__(self):
        import os

        if self.on:
            self.saved = os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA")
            os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1"

    def __exit__(self, *exc):
        import os

        if self.on:
            if self.saved is None:
                os.environ.pop("TRANSFORMERS_SDPA_FORCE_GQA", None)
            else:
                os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = self.saved


def fuse_attention_cache(model: onnx.ModelProto) -> int:
    """Rewrite, in place, each ``Attention(q, Concat(past_k, k, axis=2|-2), Concat(past_v, v, axis=2|-2)[, mask])``
    whose past operands are graph inputs into ``Attention(q, k, v, mask, past_k, past_v)`` with the Concat outputs
    as its present_key/present_value outputs. Returns the number of nodes rewritten."""
    graph = model.graph
    graph_inputs = {i.name for i in graph.input}
    producer = {o: n for n in graph.node for o in n.output}

    def cache_concat(name):
        node = producer.get(name)
        if node is None or node.op_type != "Concat" or len(node.input) != 2 or node.input[0] not in graph_inputs:
            return None
        axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), None)
        return node if axis in (2, -2) else None

    rewritten, drop = 0, set()
    nodes = list(graph.node)
    for index, node in enumerate(nodes):
        if node.op_type != "Attention" or len(node.input) > 4 or len(node.output) != 1:
            continue
        k_cat, v_cat = cache_concat(node.input[1]), cache_concat(node.input[2])
        if k_cat is None or v_cat is None:
            continue
        mask = node.input[3] if len(node.input) > 3 else ""
        fused = helper.make_node(
            "Attention",
            [node.input[0], k_cat.input[1], v_cat.input[1], mask, k_cat.input[0], v_cat.input[0]],
            [node.output[0], k_cat.output[0], v_cat.output[0]],
            name=node.name,
        )
        fused.attribute.extend(node.attribute)
        nodes[index] = fused
        drop.update((id(k_cat), id(v_cat)))
        rewritten += 1
    kept = [n for n in nodes if id(n) not in drop]
    del graph.node[:]
    graph.node.extend(_topological(kept, {i.name for i in graph.input} | {i.name for i in graph.initializer}))
    return rewritten


def _topological(nodes, available) -> list:
    """``nodes`` reordered so that each comes after the producers of its inputs (stable otherwise)."""
    available, pending, ordered = set(available) | {""}, list(nodes), []
    while pending:
        progress = []
        for node in pending:
            if all(i in available for i in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                progress.append(node)
        if len(progress) == len(pending):
            raise RuntimeError(f"graph has a cycle or a dangling input at {progress[0].name}")
        pending = progress
    return ordered


# ---------------------------------------------------------------------------
# Running an exported decoder step by step (any runner with onnxruntime's ``run(output_names, feeds)``)


@dataclass(frozen=True)
class DecoderSignature:
    """What a step's feeds need, read from an exported graph."""

    input_names: Tuple[str, ...]
    output_names: Tuple[str, ...]
    num_layers: int  # 0 without a cache
    kv_heads: Optional[int]
    head_dim: Optional[int]
    kv_dtype: Any = field(default=np.float32)

    @property
    def with_cache(self) -> bool:
        return self.num_layers > 0

    @property
    def position_ids(self) -> bool:
        return "position_ids" in self.input_names

    def empty_past(self, batch: int) -> Dict[str, np.ndarray]:
        """Zero-length ``past_key_values.*`` feeds (prefill)."""
        shape = (batch, self.kv_heads, 0, self.head_dim)
        return {n: np.zeros(shape, self.kv_dtype) for n in self.input_names if n.startswith("past_key_values.")}


def decoder_signature(model: Union[str, Path, onnx.ModelProto]) -> DecoderSignature:
    """The :class:`DecoderSignature` of an exported decoder (a path or a loaded model)."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    inputs = tuple(i.name for i in graph.input if i.name not in inits)
    past = [i for i in graph.input if i.name.startswith("past_key_values.")]
    kv_heads = head_dim = None
    dtype = np.float32
    if past:
        dims = past[0].type.tensor_type.shape.dim
        kv_heads = dims[1].dim_value or None
        head_dim = dims[3].dim_value or None
        dtype = helper.tensor_dtype_to_np_dtype(past[0].type.tensor_type.elem_type)
    layers = len({n.split(".")[1] for n in (p.name for p in past)})
    return DecoderSignature(inputs, tuple(o.name for o in graph.output), layers, kv_heads, head_dim, dtype)


def positions_from_mask(attention_mask: np.ndarray) -> np.ndarray:
    """transformers' generate positions: cumsum(mask) - 1, with 1 at padded slots."""
    mask = np.asarray(attention_mask, np.int64)
    positions = np.cumsum(mask, axis=-1) - 1
    return np.where(mask == 0, 1, positions).astype(np.int64)


def make_step_feeds(
    signature: DecoderSignature,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    past: Optional[Dict[str, np.ndarray]] = None,
) -> Dict[str, np.ndarray]:
    """Feeds of one step: ``input_ids`` [B, S] are the new tokens, ``attention_mask`` [B, past + S] covers
    the whole context, ``past`` the ``past_key_values.*`` arrays (None: an empty cache)."""
    input_ids = np.asarray(input_ids, np.int64)
    attention_mask = np.asarray(attention_mask, np.int64)
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
    if signature.position_ids:
        feeds["position_ids"] = np.ascontiguousarray(positions_from_mask(attention_mask)[:, -input_ids.shape[1]:])
    if signature.with_cache:
        feeds.update(signature.empty_past(input_ids.shape[0]) if past is None else past)
    return feeds


def present_to_past(output_names: Sequence[str], outputs: Sequence[np.ndarray]) -> Dict[str, np.ndarray]:
    """The next step's ``past_key_values.*`` feeds from a step's ``present.*`` outputs."""
    return {n.replace("present.", "past_key_values.", 1): v for n, v in zip(output_names, outputs) if n.startswith("present.")}


def onnxruntime_session(model_path):
    """The default session factory: onnxruntime on the CPU."""
    import onnxruntime

    return onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])


def greedy_generate_onnxruntime(
    model_path,
    prompt_ids,
    steps: int,
    *,
    attention_mask=None,
    session_factory: Optional[Callable[[str], Any]] = None,
) -> Tuple[np.ndarray, List[np.ndarray]]:
    """Greedy generation: a prefill of ``prompt_ids`` [B, S] (left-padded rows marked by ``attention_mask``),
    then decode steps that feed back ``present.*`` as ``past_key_values.*``. A model without a cache reruns the
    whole context each step.

    ``session_factory(path)`` makes the runner (default :func:`onnxruntime_session`); it needs only
    ``run(output_names, feeds)``.  Returns the ``steps`` chosen tokens [B, steps] and the last-position logits of
    each step (``steps`` arrays [B, vocab]).
    """
    signature = decoder_signature(model_path)
    session = (session_factory or onnxruntime_session)(str(model_path))
    context = np.asarray(prompt_ids, np.int64)
    if context.ndim == 1:
        context = context[None]
    mask = np.ones_like(context) if attention_mask is None else np.asarray(attention_mask, np.int64).reshape(context.shape)
    outputs = list(signature.output_names)
    new, past, tokens, logits = context, None, [], []
    for _ in range(steps):
        if signature.with_cache:
            feeds = make_step_feeds(signature, new, mask, past)
        else:
            feeds = make_step_feeds(signature, context, mask)
        result = session.run(outputs, feeds)
        step_logits = np.asarray(result[outputs.index("logits")])[:, -1, :]
        token = np.argmax(step_logits, axis=-1).astype(np.int64)[:, None]
        logits.append(step_logits)
        tokens.append(token)
        past = present_to_past(outputs, result)
        context = np.concatenate([context, token], axis=1)
        mask = np.concatenate([mask, np.ones_like(token)], axis=1)
        new = token
    return np.concatenate(tokens, axis=1), logits


def greedy_generate_torch(model_or_arch, prompt_ids, steps: int, *, attention_mask=None) -> Tuple[np.ndarray, List[np.ndarray]]:
    """The reference: transformers' ``generate`` (greedy, no stopping at EOS) on the PyTorch model.

    Returns the same as :func:`greedy_generate_onnxruntime`.
    """
    import torch

    model = tiny_model(model_or_arch) if isinstance(model_or_arch, str) else model_or_arch
    ids = torch.as_tensor(np.asarray(prompt_ids, np.int64))
    if ids.ndim == 1:
        ids = ids[None]
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(np.asarray(attention_mask, np.int64)).reshape(ids.shape)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=steps,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=model.config.pad_token_id if model.config.pad_token_id is not None else 0,
            output_logits=True,
            return_dict_in_generate=True,
        )
    tokens = out.sequences[:, ids.shape[1]:].numpy()
    return tokens, [l.float().numpy() for l in out.logits]


def torch_logits(model, feeds: Dict[str, np.ndarray], *, with_cache: bool) -> List[np.ndarray]:
    """The PyTorch model's outputs for an exported graph's feeds, in the graph's output order."""
    import torch

    config = model.config
    layers = config.num_hidden_layers
    position_ids = "position_ids" in feeds
    names, _ = io_names(layers, with_cache=with_cache, position_ids=position_ids)
    wrapper = _wrapper(model, layers, with_cache, position_ids)
    with torch.no_grad():
        out = wrapper(*(torch.as_tensor(feeds[n]) for n in names))
    out = out if isinstance(out, tuple) else (out,)
    return [t.numpy() for t in out]
