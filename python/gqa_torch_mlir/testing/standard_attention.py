"""One-node ONNX models of the standard (``ai.onnx``) LLM ops, their inputs, and onnxruntime runs.

Covers ``Attention`` (opset 23 and 24), ``RotaryEmbedding`` (23),
``RMSNormalization`` (23) and ``TensorScatter`` (24).  For each op there is a
frozen config dataclass, ``make_*_model(cfg)`` building a one-node model whose
graph inputs/outputs are named after the op's slots, ``make_*_inputs(cfg, rng)``
making random feeds; onnxruntime's CPU provider is the oracle
(docs/standard_attention.md says what its kernels compute).

The Attention entry points keep the short names ``make_model`` and
``make_inputs``.  :func:`run_onnxruntime` runs any of the
models on onnxruntime's CPU provider (one thread, no graph optimisation).

Attention dimension letters:

* ``B``   batch size
* ``S``   query sequence length
* ``L``   kv sequence length (new keys/values of this step)
* ``P``   past sequence length (0: no ``past_key``/``past_value`` inputs)
* ``T``   total sequence length, ``P + L``
* ``H``   query heads, ``Hkv`` key/value heads (``H % Hkv == 0`` is *not*
  enforced here, so refusals can be probed)
* ``Dh``  query/key head size, ``Dv`` value head size

Layouts: 4-D ``Q (B,H,S,Dh)``, ``K (B,Hkv,L,Dh)``, ``V (B,Hkv,L,Dv)``; 3-D
(``rank3=True``, with ``q_num_heads``/``kv_num_heads`` attributes)
``Q (B,S,H*Dh)``, ``K (B,L,Hkv*Dh)``, ``V (B,L,Hkv*Dv)``; ``past_*``/``present_*``
are always 4-D ``(B,Hkv,P|T,D)``; ``qk_matmul_output (B,H,S,T)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

__all__ = [
    # Attention
    "MaskSpec",
    "AttentionConfig",
    "ATTENTION_INPUTS",
    "ATTENTION_OUTPUTS",
    "make_model",
    "make_inputs",
    "with_symbolic_dims",
    # RotaryEmbedding
    "RotaryConfig",
    "make_rotary_model",
    "make_rotary_inputs",
    # RMSNormalization
    "RMSNormConfig",
    "make_rmsnorm_model",
    "make_simplified_layernorm_model",
    "make_rmsnorm_inputs",
    # TensorScatter
    "TensorScatterConfig",
    "make_tensorscatter_model",
    "make_tensorscatter_inputs",
    # running
    "run_onnxruntime",
    "onnx_elem_type",
]

#: Graph input names of the Attention model, in slot order.
ATTENTION_INPUTS: tuple[str, ...] = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
#: Graph output names of the Attention model, in slot order.
ATTENTION_OUTPUTS: tuple[str, ...] = ("Y", "present_key", "present_value", "qk_matmul_output")

_IR_FOR_OPSET = {23: 11, 24: 12}


def onnx_elem_type(dtype) -> int:
    """The ``TensorProto`` element type of a numpy dtype (bfloat16 via ``ml_dtypes``)."""
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":
        return TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(dt)


def _finalize(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="gqa_torch_mlir.testing"
    )
    model.ir_version = _IR_FOR_OPSET.get(opset, 11 if opset <= 23 else 12)
    return model


def _vi(name: str, dtype, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx_elem_type(dtype), shape)


def _randn(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


# ---------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskSpec:
    """An ``attn_mask`` description.

    ``shape`` is a string over ``B H S T 1`` naming the mask's dims (right-aligned
    against ``(B,H,S,T)``), e.g. ``"ST"`` (2-D), ``"1ST"``/``"HST"`` (3-D),
    ``"BHST"``/``"11ST"``/``"B1ST"``/``"1HST"``/``"B11T"`` (4-D), ``"T"`` (1-D).
    The ``T`` dim is ``P + L - short`` (``short > 0``: last dim shorter than the
    total length, opset-24 padding with -inf).

    ``kind`` ``"bool"``: True = attend.  ``"float"``: added to the scores;
    ``float_fill`` ``"mixed"`` (normal values, ~20% ``-inf``), ``"normal"`` (no
    ``-inf``), ``"neginf"`` (0 / ``-inf`` pattern), ``"lowest"`` (0 / dtype's
    lowest finite value).  Column 0 is always attendable unless
    ``full_rows``, which makes query row ``S-1`` of every mask slice fully
    masked (all False / ``-inf`` / lowest).  ``dtype`` of a float mask defaults
    to the config's dtype.
    """

    kind: str = "bool"
    shape: str = "BHST"
    short: int = 0
    full_rows: bool = False
    float_fill: str = "mixed"
    dtype: object = None

    def dims(self, cfg: "AttentionConfig") -> tuple[int, ...]:
        sizes = {"B": cfg.B, "H": cfg.H, "S": cfg.S, "T": cfg.T - self.short, "1": 1}
        return tuple(sizes[c] for c in self.shape)

    def np_dtype(self, cfg: "AttentionConfig"):
        if self.kind == "bool":
            return np.bool_
        return np.dtype(self.dtype if self.dtype is not None else cfg.dtype)


@dataclass(frozen=True)
class AttentionConfig:
    """One ``ai.onnx.Attention`` node configuration (see the module docstring for letters).

    ``scale`` None: attribute absent.  ``softcap`` 0: absent.
    ``softmax_precision`` None: absent, else a ``TensorProto`` enum int.
    ``qk_matmul_output_mode`` None: no 4th output; else its value (the attribute
    is written, and the ``qk_matmul_output`` output requested).
    ``present``: request ``present_key``/``present_value`` (independent of ``P``
    so that past-without-present and present-without-past can be probed).
    ``nonpad_kv_seqlen`` (opset 24): feed that input; ``nonpad_lens`` pins its
    values (default: random in ``[1, L]``, the last batch row at ``L``).
    ``attrs`` are extra/overriding node attributes (e.g. ``q_num_heads`` on 4-D).
    """

    B: int = 1
    S: int = 4
    L: int = 4
    P: int = 0
    H: int = 4
    Hkv: int = 2
    Dh: int = 8
    Dv: int | None = None
    rank3: bool = False
    dtype: object = np.float32
    scale: float | None = None
    is_causal: bool = False
    softcap: float = 0.0
    softmax_precision: int | None = None
    qk_matmul_output_mode: int | None = None
    mask: MaskSpec | None = None
    present: bool = False
    opset: int = 23
    nonpad_kv_seqlen: bool = False
    nonpad_lens: tuple[int, ...] | None = None
    attrs: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def T(self) -> int:
        return self.P + self.L

    @property
    def dv(self) -> int:
        return self.Dh if self.Dv is None else self.Dv

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def name(self) -> str:
        parts = [
            f"b{self.B}s{self.S}l{self.L}p{self.P}h{self.H}kv{self.Hkv}d{self.Dh}",
            f"dv{self.dv}" if self.Dv is not None else "",
            "r3" if self.rank3 else "r4",
            self.np_dtype.name,
            f"op{self.opset}",
            "causal" if self.is_causal else "",
            f"sc{self.scale:g}" if self.scale is not None else "",
            f"cap{self.softcap:g}" if self.softcap else "",
            f"sp{self.softmax_precision}" if self.softmax_precision is not None else "",
            f"qk{self.qk_matmul_output_mode}" if self.qk_matmul_output_mode is not None else "",
            f"m{self.mask.kind}{self.mask.shape}{'-' + str(self.mask.short) if self.mask.short else ''}"
            f"{'F' if self.mask.full_rows else ''}"
            if self.mask
            else "",
            "pres" if self.present else "",
            "nonpad" if self.nonpad_kv_seqlen else "",
        ]
        return "_".join(p for p in parts if p)

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        B, S, L, P, H, Hkv, Dh, Dv = self.B, self.S, self.L, self.P, self.H, self.Hkv, self.Dh, self.dv
        if self.rank3:
            shapes = {"Q": (B, S, H * Dh), "K": (B, L, Hkv * Dh), "V": (B, L, Hkv * Dv)}
        else:
            shapes = {"Q": (B, H, S, Dh), "K": (B, Hkv, L, Dh), "V": (B, Hkv, L, Dv)}
        if self.mask is not None:
            shapes["attn_mask"] = self.mask.dims(self)
        if P:
            shapes["past_key"] = (B, Hkv, P, Dh)
            shapes["past_value"] = (B, Hkv, P, Dv)
        if self.nonpad_kv_seqlen:
            shapes["nonpad_kv_seqlen"] = (B,)
        return shapes

    def output_shapes(self) -> dict[str, tuple[int, ...]]:
        B, S, T, H, Hkv, Dh, Dv = self.B, self.S, self.T, self.H, self.Hkv, self.Dh, self.dv
        shapes = {"Y": (B, S, H * Dv) if self.rank3 else (B, H, S, Dv)}
        if self.present:
            shapes["present_key"] = (B, Hkv, T, Dh)
            shapes["present_value"] = (B, Hkv, T, Dv)
        if self.qk_matmul_output_mode is not None:
            shapes["qk_matmul_output"] = (B, H, S, T)
        return shapes


def make_model(cfg: AttentionConfig) -> onnx.ModelProto:
    """A one-node ``Attention`` model; graph I/O named after :data:`ATTENTION_INPUTS`/:data:`ATTENTION_OUTPUTS`.

    Output shapes are left unspecified in the graph (onnxruntime infers them),
    so that refused configurations fail in onnxruntime, not in graph building.
    """
    in_shapes = cfg.input_shapes()
    slots = list(ATTENTION_INPUTS)
    node_inputs = [n if n in in_shapes else "" for n in slots]
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    graph_inputs = []
    for n in slots:
        if n not in in_shapes:
            continue
        if n == "attn_mask":
            dt = cfg.mask.np_dtype(cfg)
        elif n == "nonpad_kv_seqlen":
            dt = np.int64
        else:
            dt = cfg.dtype
        graph_inputs.append(_vi(n, dt, list(in_shapes[n])))
    out_names = cfg.output_shapes()
    node_outputs = [n if n in out_names else "" for n in ATTENTION_OUTPUTS]
    while node_outputs and node_outputs[-1] == "":
        node_outputs.pop()
    graph_outputs = [_vi(n, cfg.dtype, None) for n in ATTENTION_OUTPUTS if n in out_names]

    attrs: dict = {}
    if cfg.rank3:
        attrs["q_num_heads"] = cfg.H
        attrs["kv_num_heads"] = cfg.Hkv
    if cfg.scale is not None:
        attrs["scale"] = float(cfg.scale)
    if cfg.is_causal:
        attrs["is_causal"] = 1
    if cfg.softcap:
        attrs["softcap"] = float(cfg.softcap)
    if cfg.softmax_precision is not None:
        attrs["softmax_precision"] = int(cfg.softmax_precision)
    if cfg.qk_matmul_output_mode is not None:
        attrs["qk_matmul_output_mode"] = int(cfg.qk_matmul_output_mode)
    attrs.update(cfg.attrs)
    node = helper.make_node("Attention", node_inputs, node_outputs, name="attention", **attrs)
    graph = helper.make_graph([node], f"attention_{cfg.name}", graph_inputs, graph_outputs)
    return _finalize(graph, cfg.opset)


def with_symbolic_dims(model: onnx.ModelProto, dims: dict) -> onnx.ModelProto:
    """A copy of ``model`` with its graph inputs' and outputs' ``dims`` ({size: name}) made
    symbolic: the exporters' dynamic axes."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for value in list(model.graph.input) + list(model.graph.output):
        for d in value.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value in dims:
                d.dim_param = dims[d.dim_value]
    return model


def _nonpad_lens(cfg: AttentionConfig, rng: np.random.Generator) -> np.ndarray:
    if cfg.nonpad_lens is not None:
        lens = np.asarray(cfg.nonpad_lens, dtype=np.int64)
        assert lens.shape == (cfg.B,), lens.shape
        return lens
    lens = rng.integers(1, cfg.L + 1, size=cfg.B).astype(np.int64)
    lens[-1] = cfg.L
    return lens


def _make_mask(cfg: AttentionConfig, rng: np.random.Generator) -> np.ndarray:
    spec = cfg.mask
    shape = spec.dims(cfg)
    allowed = rng.random(shape) < 0.75
    if shape[-1] > 0:
        allowed[..., 0] = True
    if spec.full_rows and len(shape) >= 2:
        allowed[..., -1, :] = False
    if spec.kind == "bool":
        return allowed
    if spec.kind != "float":
        raise ValueError(f"unknown mask kind {spec.kind!r}")
    dt = spec.np_dtype(cfg)
    lowest = np.finfo(dt).min if dt.kind == "f" else np.iinfo(dt).min
    if spec.float_fill == "normal":
        vals = rng.standard_normal(shape)
        if spec.full_rows and len(shape) >= 2:
            vals[..., -1, :] = -np.inf
    elif spec.float_fill == "mixed":
        vals = np.where(allowed, rng.standard_normal(shape), -np.inf)
    elif spec.float_fill == "neginf":
        vals = np.where(allowed, 0.0, -np.inf)
    elif spec.float_fill == "lowest":
        vals = np.where(allowed, 0.0, float(lowest))
    else:
        raise ValueError(f"unknown float_fill {spec.float_fill!r}")
    if dt.kind != "f":
        return np.where(np.isinf(vals), lowest, np.round(vals)).astype(dt)
    return vals.astype(np.float32).astype(dt) if dt.itemsize < 4 else vals.astype(dt)


def make_inputs(cfg: AttentionConfig, rng: np.random.Generator | int | None = None) -> dict[str, np.ndarray]:
    """Random feeds for :func:`make_model` (standard normal Q/K/V/past; see :class:`MaskSpec`)."""
    rng = np.random.default_rng(rng if rng is not None else 0)
    shapes = cfg.input_shapes()
    feeds: dict[str, np.ndarray] = {}
    for n in ("Q", "K", "V", "past_key", "past_value"):
        if n in shapes:
            feeds[n] = _randn(rng, shapes[n], cfg.np_dtype)
    if cfg.mask is not None:
        feeds["attn_mask"] = _make_mask(cfg, rng)
    if cfg.nonpad_kv_seqlen:
        feeds["nonpad_kv_seqlen"] = _nonpad_lens(cfg, rng)
    return feeds


# ---------------------------------------------------------------------------
# RotaryEmbedding (opset 23)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RotaryConfig:
    """One ``ai.onnx.RotaryEmbedding`` node.

    ``rank3``: X is ``(B,S,H*Dh)`` (else ``(B,H,S,Dh)``).  ``num_heads_attr``:
    write ``num_heads`` (None: only for ``rank3``).  ``position_ids``: feed
    ``position_ids (B,S)`` int64 with caches ``(M, R/2)``; else the caches are
    3-D ``(B,S,R/2)``.  ``rotary_embedding_dim`` 0: attribute absent (full,
    ``R = Dh``).  ``interleaved`` None: attribute absent.
    """

    B: int = 2
    S: int = 3
    H: int = 2
    Dh: int = 8
    rank3: bool = False
    num_heads_attr: bool | None = None
    position_ids: bool = True
    interleaved: bool | None = None
    rotary_embedding_dim: int = 0
    dtype: object = np.float32
    M: int = 16
    opset: int = 23
    attrs: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def R(self) -> int:
        return self.rotary_embedding_dim or self.Dh

    @property
    def x_shape(self) -> tuple[int, ...]:
        return (self.B, self.S, self.H * self.Dh) if self.rank3 else (self.B, self.H, self.S, self.Dh)

    @property
    def cache_shape(self) -> tuple[int, ...]:
        return (self.M, self.R // 2) if self.position_ids else (self.B, self.S, self.R // 2)


def make_rotary_model(cfg: RotaryConfig) -> onnx.ModelProto:
    ins = [_vi("X", cfg.dtype, list(cfg.x_shape))]
    ins += [_vi(n, cfg.dtype, list(cfg.cache_shape)) for n in ("cos_cache", "sin_cache")]
    node_in = ["X", "cos_cache", "sin_cache"]
    if cfg.position_ids:
        ins.append(_vi("position_ids", np.int64, [cfg.B, cfg.S]))
        node_in.append("position_ids")
    attrs: dict = {}
    if cfg.num_heads_attr or (cfg.num_heads_attr is None and cfg.rank3):
        attrs["num_heads"] = cfg.H
    if cfg.interleaved is not None:
        attrs["interleaved"] = int(cfg.interleaved)
    if cfg.rotary_embedding_dim:
        attrs["rotary_embedding_dim"] = cfg.rotary_embedding_dim
    attrs.update(cfg.attrs)
    node = helper.make_node("RotaryEmbedding", node_in, ["Y"], name="rotary", **attrs)
    graph = helper.make_graph([node], "rotary", ins, [_vi("Y", cfg.dtype, None)])
    return _finalize(graph, cfg.opset)


def make_rotary_inputs(cfg: RotaryConfig, rng: np.random.Generator | int | None = None) -> dict[str, np.ndarray]:
    """X standard normal; real cos/sin tables (angle = pos / 10000^(2i/R)); random positions in ``[0, M)``."""
    rng = np.random.default_rng(rng if rng is not None else 0)
    half = cfg.R // 2
    inv = 1.0 / (10000.0 ** (np.arange(half) * 2.0 / cfg.R))
    feeds = {"X": _randn(rng, cfg.x_shape, cfg.dtype)}
    if cfg.position_ids:
        pos = rng.integers(0, cfg.M, size=(cfg.B, cfg.S)).astype(np.int64)
        ang = np.arange(cfg.M)[:, None] * inv[None, :]
        feeds["position_ids"] = pos
    else:
        pos = rng.integers(0, cfg.M, size=(cfg.B, cfg.S))
        ang = pos[..., None] * inv
    feeds["cos_cache"] = np.cos(ang).astype(cfg.dtype)
    feeds["sin_cache"] = np.sin(ang).astype(cfg.dtype)
    return {k: feeds[k] for k in ("X", "cos_cache", "sin_cache", "position_ids") if k in feeds}


# ---------------------------------------------------------------------------
# RMSNormalization (opset 23)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RMSNormConfig:
    """One ``ai.onnx.RMSNormalization`` node.

    ``axis``/``stash_type``/``epsilon`` None: attribute absent (defaults -1, 1,
    1e-5).  ``scale_shape`` None: ``x_shape[axis:]``.  ``scale_dtype`` None:
    same as ``dtype``.
    """

    x_shape: tuple[int, ...] = (2, 3, 16)
    axis: int | None = None
    stash_type: int | None = None
    epsilon: float | None = None
    scale_shape: tuple[int, ...] | None = None
    dtype: object = np.float32
    scale_dtype: object = None
    opset: int = 23

    @property
    def norm_axis(self) -> int:
        a = -1 if self.axis is None else self.axis
        return a + len(self.x_shape) if a < 0 else a

    @property
    def eps(self) -> float:
        return 1e-5 if self.epsilon is None else self.epsilon

    @property
    def s_shape(self) -> tuple[int, ...]:
        return tuple(self.x_shape[self.norm_axis :]) if self.scale_shape is None else tuple(self.scale_shape)

    @property
    def s_dtype(self):
        return self.dtype if self.scale_dtype is None else self.scale_dtype


def _rms_attrs(cfg: RMSNormConfig) -> dict:
    attrs: dict = {}
    if cfg.axis is not None:
        attrs["axis"] = cfg.axis
    if cfg.stash_type is not None:
        attrs["stash_type"] = cfg.stash_type
    if cfg.epsilon is not None:
        attrs["epsilon"] = float(cfg.epsilon)
    return attrs


def make_rmsnorm_model(cfg: RMSNormConfig) -> onnx.ModelProto:
    ins = [_vi("X", cfg.dtype, list(cfg.x_shape)), _vi("scale", cfg.s_dtype, list(cfg.s_shape))]
    node = helper.make_node("RMSNormalization", ["X", "scale"], ["Y"], name="rmsnorm", **_rms_attrs(cfg))
    graph = helper.make_graph([node], "rmsnorm", ins, [_vi("Y", cfg.s_dtype, None)])
    return _finalize(graph, cfg.opset)


def make_simplified_layernorm_model(cfg: RMSNormConfig, opset: int = 23) -> onnx.ModelProto:
    """The same computation as onnxruntime's ``SimplifiedLayerNormalization`` (default domain, its opset 1)."""
    ins = [_vi("X", cfg.dtype, list(cfg.x_shape)), _vi("scale", cfg.s_dtype, list(cfg.s_shape))]
    attrs = {"axis": -1 if cfg.axis is None else cfg.axis, "epsilon": float(cfg.eps)}
    if cfg.stash_type is not None:
        attrs["stash_type"] = cfg.stash_type
    node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"], ["Y"], name="sln", **attrs)
    graph = helper.make_graph([node], "sln", ins, [_vi("Y", cfg.s_dtype, None)])
    return _finalize(graph, opset)


def make_rmsnorm_inputs(cfg: RMSNormConfig, rng: np.random.Generator | int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rng if rng is not None else 0)
    x = _randn(rng, cfg.x_shape, cfg.dtype)
    scale = (1.0 + 0.5 * rng.standard_normal(cfg.s_shape)).astype(np.float32).astype(cfg.s_dtype)
    return {"X": x, "scale": scale}


# ---------------------------------------------------------------------------
# TensorScatter (opset 24)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorScatterConfig:
    """One ``ai.onnx.TensorScatter`` node.

    ``cache_shape`` is ``past_cache``'s shape; ``update`` has ``update_len``
    on ``axis``.  ``axis``/``mode`` None: attribute absent (-2, "linear").
    ``write_indices`` None: input absent; else its values (length ``B``).
    """

    cache_shape: tuple[int, ...] = (2, 3, 8, 4)
    update_len: int = 2
    axis: int | None = None
    mode: str | None = None
    write_indices: tuple[int, ...] | None = (0, 3)
    dtype: object = np.float32
    opset: int = 24

    @property
    def norm_axis(self) -> int:
        a = -2 if self.axis is None else self.axis
        return a + len(self.cache_shape) if a < 0 else a

    @property
    def update_shape(self) -> tuple[int, ...]:
        s = list(self.cache_shape)
        if 0 <= self.norm_axis < len(s):  # an invalid axis leaves the shape alone (for refusal probes)
            s[self.norm_axis] = self.update_len
        return tuple(s)


def make_tensorscatter_model(cfg: TensorScatterConfig) -> onnx.ModelProto:
    ins = [_vi("past_cache", cfg.dtype, list(cfg.cache_shape)), _vi("update", cfg.dtype, list(cfg.update_shape))]
    node_in = ["past_cache", "update"]
    if cfg.write_indices is not None:
        ins.append(_vi("write_indices", np.int64, [cfg.cache_shape[0]]))
        node_in.append("write_indices")
    attrs: dict = {}
    if cfg.axis is not None:
        attrs["axis"] = cfg.axis
    if cfg.mode is not None:
        attrs["mode"] = cfg.mode
    node = helper.make_node("TensorScatter", node_in, ["present_cache"], name="tensorscatter", **attrs)
    graph = helper.make_graph([node], "tensorscatter", ins, [_vi("present_cache", cfg.dtype, None)])
    return _finalize(graph, cfg.opset)


def make_tensorscatter_inputs(
    cfg: TensorScatterConfig, rng: np.random.Generator | int | None = None
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rng if rng is not None else 0)
    dt = np.dtype(cfg.dtype)

    def rand(shape):
        if dt.kind == "f" or dt.name == "bfloat16":
            return _randn(rng, shape, dt)
        if dt.kind == "b":
            return rng.random(shape) < 0.5
        return rng.integers(0, 100, size=shape).astype(dt)

    feeds = {"past_cache": rand(cfg.cache_shape), "update": rand(cfg.update_shape)}
    if cfg.write_indices is not None:
        feeds["write_indices"] = np.asarray(cfg.write_indices, dtype=np.int64)
    return feeds


# ---------------------------------------------------------------------------
# onnxruntime
# ---------------------------------------------------------------------------


def run_onnxruntime(model: onnx.ModelProto, feeds: dict, **session_config: str) -> dict[str, np.ndarray]:
    """Run ``model`` once on onnxruntime's CPU provider (1 thread, no graph optimisation).

    Returns outputs by name.  Feeds not named by the graph are ignored.
    ``session_config`` entries are passed to ``SessionOptions.add_session_config_entry``.
    Refusals surface as onnxruntime exceptions (at session creation or run).
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    for k, v in session_config.items():
        opts.add_session_config_entry(k, v)
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    feeds = {k: np.asarray(v) for k, v in feeds.items() if k in names}
    if not any(v.dtype.name == "bfloat16" for v in feeds.values()) and not any(
        o.type == "tensor(bfloat16)" for o in session.get_outputs()
    ):
        return dict(zip(outputs, session.run(outputs, feeds)))
    # bfloat16 crosses the python binding only as OrtValues (numpy has no bfloat16 type for it)
    bf16 = TensorProto.BFLOAT16
    values = {
        k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(v).view(np.uint16), bf16)
        if v.dtype.name == "bfloat16"
        else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v))
        for k, v in feeds.items()
    }
    results = session.run_with_ort_values(outputs, values)
    return dict(zip(outputs, (_ortvalue_to_numpy(r) for r in results)))


def _ortvalue_to_numpy(value) -> np.ndarray:
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    import ctypes

    import ml_dtypes

    out = np.empty(value.shape(), dtype=np.uint16)
    ctypes.memmove(out.ctypes.data, value.data_ptr(), out.nbytes)
    return out.view(ml_dtypes.bfloat16)
