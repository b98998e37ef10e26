"""One-node ONNX models of ``com.microsoft.GroupQueryAttention`` and an oracle.

Builds a single-node ONNX model from a :class:`GQAConfig`, makes random inputs
for it, runs onnxruntime's CPU provider as the reference ("oracle") and
compares another implementation's outputs against onnxruntime's.

Dimension letters used in names and docstrings:

* ``B``   batch size
* ``S``   new tokens this step (query / new key / new value sequence length)
* ``P``   sequence length of the ``past_key``/``past_value`` inputs (may be 0)
* ``T``   total sequence length after the step, ``P + S`` (present length)
* ``H``   number of query heads (``num_heads``)
* ``Hkv`` number of key/value heads (``kv_num_heads``)
* ``G``   query heads per kv head, ``H // Hkv``
* ``Dh``  head size
* ``M``   rows of the rotary cos/sin caches (``rotary_cache_len``)

Layouts (onnxruntime's): query ``[B,S,H*Dh]`` or packed QKV
``[B,S,(H+2*Hkv)*Dh]``; key/value ``[B,S,Hkv*Dh]``; past/present key/value
``[B,Hkv,P|T,Dh]``; cos/sin caches ``[M,Dh/2]``; ``seqlens_k`` int32 ``[B]``
holding ``T_b - 1``; ``total_sequence_length`` an int32 scalar holding
``max_b T_b``.

Per batch row ``b`` only ``past_lens[b] <= P`` past rows are valid; the rest
of the past buffer is filled with large random junk so an implementation that
attends (or copies) them is caught by :func:`compare`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

__all__ = [
    "GQAConfig",
    "make_model",
    "make_inputs",
    "run_onnxruntime",
    "OnnxruntimeOracle",
    "compare",
    "INPUT_SLOTS",
]

#: Input slot names of the op, in slot order (the first 12 slots).
INPUT_SLOTS: tuple[str, ...] = (
    "query",
    "key",
    "value",
    "past_key",
    "past_value",
    "seqlens_k",
    "total_sequence_length",
    "cos_cache",
    "sin_cache",
    "position_ids",
    "attention_bias",
    "head_sink",
    "k_scale",
    "v_scale",
    "q_norm_weight",
    "k_norm_weight",
    "query_seqlens",
)
_CACHE_OUTPUTS = ("present_key", "present_value")
_DTYPES = {"float32": np.float32, "float16": np.float16}
_DEFAULT_TOL = {"float32": (1e-4, 1e-4), "float16": (2e-2, 2e-2)}
_OPSET_DEFAULT = 21
_BUILDER_SLOTS = 12
_OPSET_MS = 1
_IR_VERSION = 10  # the IR version of opset 21; onnxruntime 1.32 accepts it
_JUNK_SCALE = 100.0  # std-dev of the junk written into invalid past rows
_ROPE_BASE = 10000.0
POSITION_SHIFT = 3  # explicit position_ids differ from the default ones by this much

Dim = int | str


@dataclass(frozen=True)
class GQAConfig:
    """Shape and feature choices for one GroupQueryAttention test case."""

    batch: int = 1
    seq: int = 1
    past: int = 0
    num_heads: int = 4
    kv_num_heads: int = 2
    head_size: int = 16
    packed: bool = False
    rotary: bool = False
    rotary_cache_len: int | None = None
    dtype: str = "float32"
    dynamic: bool = False
    past_lens: tuple[int, ...] | None = None
    trailing_empty: bool = True
    # Fixed-capacity cache: past/present both have ``past`` rows (the capacity),
    # total_sequence_length = max(past_lens) + S <= past; default past_lens = past - S.
    fixed_capacity: bool = False
    rotary_interleaved: bool = False
    rotary_dim: int | None = None  # partial rotary: cos/sin have rotary_dim / 2 columns
    position_ids: bool = False  # feed explicit position ids (shifted by POSITION_SHIFT from the default)
    attention_bias: str = ""  # "", or the broadcast form of its first two dims: "BH", "B1", "1H", "11"
    head_sink: bool = False
    # Right-padded chunks: valid query rows per batch row (feeds the query_seqlens input).
    query_lens: tuple[int, ...] | None = None
    # Quantized cache: 0 (float), 8 (int8) or 4 (uint8, two values a byte); scales PER_TENSOR or PER_CHANNEL.
    kv_bits: int = 0
    quant_type: str = "PER_TENSOR"
    # Window-sized cache (sliding_window_cache=1): past/present hold `past` rows (the capacity C);
    # `past_lens` then give each row's absolute token count before the step (T_prev), and the
    # past buffer holds the resident range L(T_prev) of onnxruntime's eviction rule.
    window: int = 0  # W = local_window_size, with window_cache
    window_cache: bool = False
    # seqlens_k and total_sequence_length computed from an ``attention_mask`` input [B, total]
    # int64 (ones on each row's valid tokens), as onnxruntime-genai's model builder computes them:
    # Cast(ReduceSum(mask, 1) - 1) and Cast(Gather(Shape(mask), 1)), both int32.
    mask: bool = False

    def __post_init__(self) -> None:
        if self.past_lens is not None and not isinstance(self.past_lens, tuple):
            object.__setattr__(self, "past_lens", tuple(int(n) for n in self.past_lens))
        if self.query_lens is not None:
            object.__setattr__(self, "query_lens", tuple(int(n) for n in self.query_lens))
            if len(self.query_lens) != self.batch or not all(0 <= q <= self.seq for q in self.query_lens):
                raise ValueError(f"query_lens needs {self.batch} entries in [0, seq={self.seq}], got {self.query_lens}")
        self._check_sizes()
        self._check_past_lens()
        self._check_rotary()
        self._check_onnxruntime_case()

    # -- validation --------------------------------------------------------

    def _check_sizes(self) -> None:
        for field in ("batch", "seq", "num_heads", "kv_num_heads", "head_size"):
            if getattr(self, field) < 1:
                raise ValueError(f"GQAConfig.{field} must be >= 1, got {getattr(self, field)}")
        if self.past < 0:
            raise ValueError(f"GQAConfig.past must be >= 0, got {self.past}")
        if self.num_heads % self.kv_num_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of kv_num_heads ({self.kv_num_heads})"
            )
        if self.head_size % 2:
            raise ValueError(f"head_size must be even, got {self.head_size}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")

    def _check_past_lens(self) -> None:
        if self.past_lens is None:
            return
        if len(self.past_lens) != self.batch:
            raise ValueError(
                f"past_lens has {len(self.past_lens)} entries, expected batch={self.batch}"
            )
        bad = [n for n in self.past_lens if not 0 <= n <= (10**9 if self.window_cache else self.past)]
        if bad:
            raise ValueError(f"past_lens entries must lie in [0, past={self.past}], got {bad}")
        if self.query_lens is not None or self.window_cache:  # lengths are not bounded by the buffer
            return
        if self.fixed_capacity:
            if max(self.past_lens) + self.seq > self.past:
                raise ValueError(f"fixed capacity {self.past} cannot hold past_lens {self.past_lens} + seq {self.seq}")
            return
        if max(self.past_lens) != self.past:
            raise ValueError(
                f"at least one past_lens entry must equal past={self.past} "
                f"(so total_sequence_length == past + seq), got {self.past_lens}"
            )

    def _check_rotary(self) -> None:
        if self.rotary_dim is not None and not (0 < self.rotary_dim <= self.head_size and self.rotary_dim % 16 == 0):
            raise ValueError(f"rotary_dim must be a positive multiple of 16 <= head_size, got {self.rotary_dim}")
        if self.rotary and self.max_seq < self.total + (POSITION_SHIFT if self.position_ids else 0):
            raise ValueError(
                f"rotary_cache_len ({self.max_seq}) must be >= past + seq ({self.total})"
            )

    def _check_onnxruntime_case(self) -> None:
        # onnxruntime (without the query_seqlens input) treats S > 1 with past
        # context as an interactive "subsequent prompt", which it only allows
        # for batch 1 ("batch_size must be 1 when sequence_length > 1 and past
        # context is given"); the oracle cannot run such configs.
        if self.window_cache and not 0 < self.window <= self.past:
            raise ValueError(f"window_cache needs 0 < window ({self.window}) <= capacity past ({self.past})")
        if self.fixed_capacity and self.seq > self.past:
            raise ValueError(f"fixed capacity {self.past} is smaller than seq {self.seq}")
        first_prompt = self.fixed_capacity and max(self.lens) == 0
        if self.seq > 1 and self.past > 0 and self.batch > 1 and not first_prompt and self.query_lens is None:
            raise ValueError(
                f"seq={self.seq} > 1 with past={self.past} > 0 needs batch == 1 "
                f"(got batch={self.batch}): onnxruntime rejects multi-token steps "
                "with past context for batch > 1"
            )

    # -- derived sizes -----------------------------------------------------

    @property
    def total(self) -> int:
        """total_sequence_length: P + S, or max(past_lens) + S with a fixed capacity."""
        if self.window_cache:  # the batch maximum of T
            return max(self.lens) + self.seq
        if self.query_lens is not None:  # the longest row, kept in the buffer when it fits (else a growing P + S)
            longest = max(n + q for n, q in zip(self.lens, self.query_lens))
            return longest if longest <= self.past else self.past + self.seq
        return max(self.lens) + self.seq if self.fixed_capacity else self.past + self.seq

    @property
    def present_len(self) -> int:
        """Rows of present_key/value: max(total, P), or the capacity P of a window cache."""
        return self.past if self.window_cache else max(self.total, self.past)

    @property
    def max_seq(self) -> int:
        """M: rows of the cos/sin caches."""
        if self.rotary_cache_len is not None:
            return self.rotary_cache_len
        return self.past + self.seq + 8

    @property
    def group(self) -> int:
        """G = H // Hkv."""
        return self.num_heads // self.kv_num_heads

    @property
    def lens(self) -> tuple[int, ...]:
        """Valid past rows per batch row (``past_lens`` with its default filled in)."""
        if self.past_lens is not None:
            return self.past_lens
        return ((self.past - self.seq) if self.fixed_capacity else self.past,) * self.batch

    @property
    def new_lens(self) -> tuple[int, ...]:
        """Tokens each batch row adds this step: query_lens, or S."""
        return self.query_lens if self.query_lens is not None else (self.seq,) * self.batch

    @property
    def seqlens_k(self) -> np.ndarray:
        """int32 [B]: past_lens[b] + new tokens - 1."""
        return np.asarray([n + q - 1 for n, q in zip(self.lens, self.new_lens)], dtype=np.int32)

    @property
    def np_dtype(self) -> type:
        return _DTYPES[self.dtype]

    @property
    def query_width(self) -> int:
        """Last dim of the query input: H*Dh, or (H+2*Hkv)*Dh when packed."""
        heads = self.num_heads + (2 * self.kv_num_heads if self.packed else 0)
        return heads * self.head_size

    @property
    def name(self) -> str:
        """Short id for pytest, e.g. ``b2_s3_p5_h4kv2_d16_packed_rot_f16_dyn``."""
        parts = [
            f"b{self.batch}_s{self.seq}_p{self.past}"
            f"_h{self.num_heads}kv{self.kv_num_heads}_d{self.head_size}"
        ]
        if self.past_lens is not None and len(set(self.past_lens)) > 1:
            parts.append("pl" + "-".join(map(str, self.past_lens)))
        if self.packed:
            parts.append("packed")
        if self.rotary:
            parts.append("rot" if self.rotary_cache_len is None else f"rot{self.max_seq}")
        if self.dtype == "float16":
            parts.append("f16")
        if self.dynamic:
            parts.append("dyn")
        if not self.trailing_empty:
            parts.append("notrail")
        flags = {
            "cap": self.fixed_capacity,
            "inter": self.rotary_interleaved,
            f"rdim{self.rotary_dim}": self.rotary_dim is not None,
            "pos": self.position_ids,
            f"bias{self.attention_bias}": bool(self.attention_bias),
            "sink": self.head_sink,
            "ql" + "-".join(map(str, self.query_lens or ())): self.query_lens is not None,
            f"q{self.kv_bits}{self.quant_type[4].lower()}": self.kv_bits != 0,
            f"wc{self.window}": self.window_cache,
            "mask": self.mask,
        }
        parts += [k for k, on in flags.items() if on]
        return "_".join(parts)

    @property
    def cache_width(self) -> int:
        """Last dim of past/present: Dh, or Dh/2 for a 4-bit cache."""
        return self.head_size // 2 if self.kv_bits == 4 else self.head_size

    @property
    def scale_shape(self) -> list[int]:
        return [1, self.kv_num_heads, 1, self.head_size] if self.quant_type == "PER_CHANNEL" else [1]

    @property
    def rotary_half(self) -> int:
        """Columns of the cos/sin caches."""
        return (self.rotary_dim or self.head_size) // 2


# ---------------------------------------------------------------------------
# Model construction
# ---------------------------------------------------------------------------


def _dims(cfg: GQAConfig) -> dict[str, Dim]:
    """Graph I/O dims: numbers, or symbolic names when ``cfg.dynamic``."""
    if cfg.dynamic:
        # A fixed-capacity cache keeps one length for past and present.
        present = "past" if cfg.fixed_capacity or cfg.window_cache or cfg.total <= cfg.past else "total"
        return {"B": "batch", "S": "seq", "P": "past", "T": present, "M": "max_seq", "TT": "total"}
    return {"B": cfg.batch, "S": cfg.seq, "P": cfg.past, "T": cfg.present_len, "M": cfg.max_seq, "TT": cfg.total}


def _graph_inputs(cfg: GQAConfig) -> list[onnx.ValueInfoProto]:
    d = _dims(cfg)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(cfg.np_dtype))
    kv_width = cfg.kv_num_heads * cfg.head_size
    cache_BHkvPDh = [d["B"], cfg.kv_num_heads, d["P"], cfg.cache_width]
    shapes: list[tuple[str, int, list[Dim]]] = [("query", elem, [d["B"], d["S"], cfg.query_width])]
    if not cfg.packed:
        shapes += [("key", elem, [d["B"], d["S"], kv_width]), ("value", elem, [d["B"], d["S"], kv_width])]
    shapes += [
        ("past_key", _cache_elem(cfg), cache_BHkvPDh),
        ("past_value", _cache_elem(cfg), cache_BHkvPDh),
    ]
    if cfg.mask:
        shapes.append(("attention_mask", TensorProto.INT64, [d["B"], d["TT"]]))
    else:
        shapes += [("seqlens_k", TensorProto.INT32, [d["B"]]), ("total_sequence_length", TensorProto.INT32, [])]
    if cfg.rotary:
        rot = [d["M"], cfg.rotary_half]
        shapes += [("cos_cache", elem, rot), ("sin_cache", elem, rot)]
    if cfg.position_ids:
        shapes.append(("position_ids", TensorProto.INT64, [d["B"], d["S"]]))
    if cfg.attention_bias:
        b0 = d["B"] if cfg.attention_bias[0] == "B" else 1
        b1 = cfg.num_heads if cfg.attention_bias[1] == "H" else 1
        shapes.append(("attention_bias", elem, [b0, b1, d["S"], d["TT"]]))
    if cfg.head_sink:
        shapes.append(("head_sink", elem, [cfg.num_heads]))
    if cfg.kv_bits:
        shapes += [("k_scale", TensorProto.FLOAT, cfg.scale_shape), ("v_scale", TensorProto.FLOAT, cfg.scale_shape)]
    if cfg.query_lens is not None:
        shapes.append(("query_seqlens", TensorProto.INT32, [d["B"]]))
    return [helper.make_tensor_value_info(n, t, s) for n, t, s in shapes]


def _graph_outputs(cfg: GQAConfig, with_qk: bool) -> list[onnx.ValueInfoProto]:
    d = _dims(cfg)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(cfg.np_dtype))
    cache_BHkvTDh = [d["B"], cfg.kv_num_heads, d["T"], cfg.cache_width]
    outs = [
        helper.make_tensor_value_info("output", elem, [d["B"], d["S"], cfg.num_heads * cfg.head_size]),
        helper.make_tensor_value_info("present_key", _cache_elem(cfg), cache_BHkvTDh),
        helper.make_tensor_value_info("present_value", _cache_elem(cfg), cache_BHkvTDh),
    ]
    if with_qk:
        qk_BHST = [d["B"], cfg.num_heads, d["S"], d["TT"]]
        outs.append(helper.make_tensor_value_info("output_qk", elem, qk_BHST))
    return outs


def _node_input_names(cfg: GQAConfig) -> list[str]:
    """The node's 12 input slots, unused optional ones as "" (trailing ones dropped
    unless ``cfg.trailing_empty``)."""
    present = {"query", "past_key", "past_value", "seqlens_k", "total_sequence_length"}
    if not cfg.packed:
        present |= {"key", "value"}
    if cfg.rotary:
        present |= {"cos_cache", "sin_cache"}
    present |= {name for name, on in (("position_ids", cfg.position_ids), ("attention_bias", cfg.attention_bias), ("head_sink", cfg.head_sink)) if on}
    if cfg.query_lens is not None:
        present.add("query_seqlens")
    if cfg.kv_bits:
        present |= {"k_scale", "v_scale"}
    names = [slot if slot in present else "" for slot in INPUT_SLOTS]
    while len(names) > _BUILDER_SLOTS and names[-1] == "":  # onnxruntime-genai's builder emits 12
        names.pop()
    if not cfg.trailing_empty:
        while names and names[-1] == "":
            names.pop()
    return names


def make_model(cfg: GQAConfig, extra_attrs: dict | None = None) -> onnx.ModelProto:
    """A one-node model: graph inputs/outputs named after the op's slots.

    ``extra_attrs`` are added to (and override) the node attributes
    ``num_heads``, ``kv_num_heads``, ``do_rotary`` (and ``rotary_interleaved=0``
    when rotary). A non-zero ``qk_output`` attribute adds an ``output_qk`` output.
    """
    attrs: dict = {"num_heads": cfg.num_heads, "kv_num_heads": cfg.kv_num_heads, "do_rotary": int(cfg.rotary)}
    if cfg.rotary:
        attrs["rotary_interleaved"] = int(cfg.rotary_interleaved)
    if cfg.kv_bits:
        attrs.update(k_quant_type=cfg.quant_type, v_quant_type=cfg.quant_type, kv_cache_bit_width=cfg.kv_bits)
    if cfg.window_cache:
        attrs.update(sliding_window_cache=1, local_window_size=cfg.window)
    attrs.update(extra_attrs or {})
    with_qk = bool(attrs.get("qk_output", 0))
    out_names = ["output", "present_key", "present_value"] + (["output_qk"] if with_qk else [])
    node = helper.make_node(
        "GroupQueryAttention",
        _node_input_names(cfg),
        out_names,
        name="gqa",
        domain="com.microsoft",
        **attrs,
    )
    nodes, initializers = _mask_lengths() if cfg.mask else ([], [])
    graph = helper.make_graph(nodes + [node], f"gqa_{cfg.name}", _graph_inputs(cfg), _graph_outputs(cfg, with_qk), initializers)
    opsets = [helper.make_opsetid("", _OPSET_DEFAULT), helper.make_opsetid("com.microsoft", _OPSET_MS)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="gqa_torch_mlir.testing")
    model.ir_version = _IR_VERSION
    return model


def _mask_lengths() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The builder's nodes from attention_mask to seqlens_k and total_sequence_length, and their constants."""
    one = helper.make_tensor("mask_one", TensorProto.INT64, [], [1])
    axes = helper.make_tensor("mask_axes", TensorProto.INT64, [1], [1])
    nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "mask_axes"], ["mask_sum"], name="mask_sum", keepdims=0),  # [B]
        helper.make_node("Sub", ["mask_sum", "mask_one"], ["mask_last"], name="mask_last"),
        helper.make_node("Cast", ["mask_last"], ["seqlens_k"], name="seqlens_cast", to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], name="mask_shape"),  # [2]
        helper.make_node("Gather", ["mask_shape", "mask_one"], ["mask_width"], name="mask_width", axis=0),  # []
        helper.make_node("Cast", ["mask_width"], ["total_sequence_length"], name="total_cast", to=TensorProto.INT32),
    ]
    return nodes, [one, axes]


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def rotary_caches(cfg: GQAConfig) -> tuple[np.ndarray, np.ndarray]:
    """Real rotary tables ``cos_MDh2``/``sin_MDh2``: angle = pos / 10000^(2i/Dh)."""
    half = cfg.rotary_half
    inv_freq = 1.0 / _ROPE_BASE ** (2.0 * np.arange(half, dtype=np.float64) / (2 * half))
    angle_MDh2 = np.outer(np.arange(cfg.max_seq, dtype=np.float64), inv_freq)
    return np.cos(angle_MDh2).astype(cfg.np_dtype), np.sin(angle_MDh2).astype(cfg.np_dtype)


def _cache_elem(cfg: GQAConfig) -> int:
    if cfg.kv_bits == 8:
        return TensorProto.INT8
    if cfg.kv_bits == 4:
        return TensorProto.UINT8
    return helper.np_dtype_to_tensor_dtype(np.dtype(cfg.np_dtype))


def _past_cache(cfg: GQAConfig, rng: np.random.Generator) -> np.ndarray:
    """past_BHkvPDh: normal values in rows [0, past_lens[b]), large junk after
    (random integers of the cache type when quantized)."""
    if cfg.kv_bits == 8:
        return rng.integers(-128, 128, (cfg.batch, cfg.kv_num_heads, cfg.past, cfg.cache_width)).astype(np.int8)
    if cfg.kv_bits == 4:
        return rng.integers(0, 256, (cfg.batch, cfg.kv_num_heads, cfg.past, cfg.cache_width)).astype(np.uint8)
    shape = (cfg.batch, cfg.kv_num_heads, cfg.past, cfg.head_size)
    past_BHkvPDh = rng.standard_normal(shape, dtype=np.float32)
    junk_BHkvPDh = rng.standard_normal(shape, dtype=np.float32) * _JUNK_SCALE
    for b, n in enumerate(cfg.lens):
        valid = window_resident(n, cfg.past, cfg.window) if cfg.window_cache else n
        past_BHkvPDh[b, :, valid:] = junk_BHkvPDh[b, :, valid:]
    return past_BHkvPDh.astype(cfg.np_dtype)


def make_inputs(cfg: GQAConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Feeds for :func:`make_model` keyed by graph input name.

    A packed config gets the same logical q/k/v values as its unpacked twin
    (same seed): the packed query is their concatenation along the last axis.
    """
    rng = np.random.default_rng(seed)
    B, S, Dh = cfg.batch, cfg.seq, cfg.head_size
    query_BSHDh = rng.standard_normal((B, S, cfg.num_heads * Dh), dtype=np.float32)
    key_BSHkvDh = rng.standard_normal((B, S, cfg.kv_num_heads * Dh), dtype=np.float32)
    value_BSHkvDh = rng.standard_normal((B, S, cfg.kv_num_heads * Dh), dtype=np.float32)
    feeds: dict[str, np.ndarray] = {}
    if cfg.packed:
        feeds["query"] = np.concatenate([query_BSHDh, key_BSHkvDh, value_BSHkvDh], axis=-1)
    else:
        feeds.update(query=query_BSHDh, key=key_BSHkvDh, value=value_BSHkvDh)
    feeds = {k: v.astype(cfg.np_dtype) for k, v in feeds.items()}
    feeds["past_key"] = _past_cache(cfg, rng)
    feeds["past_value"] = _past_cache(cfg, rng)
    if cfg.mask:
        feeds["attention_mask"] = (np.arange(cfg.total)[None, :] <= cfg.seqlens_k[:, None]).astype(np.int64)  # [B, total]
    else:
        feeds["seqlens_k"] = cfg.seqlens_k
        feeds["total_sequence_length"] = np.asarray(cfg.total, dtype=np.int32)
    if cfg.rotary:
        feeds["cos_cache"], feeds["sin_cache"] = rotary_caches(cfg)
    if cfg.position_ids:
        feeds["position_ids"] = default_positions(cfg) + POSITION_SHIFT
    if cfg.attention_bias:
        b0 = B if cfg.attention_bias[0] == "B" else 1
        b1 = cfg.num_heads if cfg.attention_bias[1] == "H" else 1
        feeds["attention_bias"] = rng.standard_normal((b0, b1, S, cfg.total), dtype=np.float32).astype(cfg.np_dtype)
    if cfg.head_sink:
        feeds["head_sink"] = rng.standard_normal((cfg.num_heads,), dtype=np.float32).astype(cfg.np_dtype)
    if cfg.kv_bits:  # scales that put the new rows well inside the quantized range
        top = 127.0 if cfg.kv_bits == 8 else 7.0
        for name in ("k_scale", "v_scale"):
            feeds[name] = (rng.uniform(3.0, 4.0, cfg.scale_shape) / top).astype(np.float32)
    if cfg.query_lens is not None:
        feeds["query_seqlens"] = np.asarray(cfg.query_lens, dtype=np.int32)
    return feeds


def default_positions(cfg: GQAConfig) -> np.ndarray:
    """int64 [B,S]: the positions onnxruntime uses without position_ids (past_len[b] + s)."""
    first_prompt = cfg.total == cfg.seq
    past_BS1 = np.asarray([0 if first_prompt else n for n in cfg.lens], dtype=np.int64)[:, None]
    return past_BS1 + np.arange(cfg.seq, dtype=np.int64)[None, :]


# ---------------------------------------------------------------------------
# Oracle
# ---------------------------------------------------------------------------


#: How the oracle runs onnxruntime: its CPU provider, 1 intra-op thread, no graph optimizations.
ORACLE_SETTINGS = "onnxruntime CPU provider, 1 thread, graph optimizations off"


class OnnxruntimeOracle:
    """One onnxruntime session of ``model`` (created once); ``run(feeds)`` returns outputs by name.
    Feeds not named by the graph are ignored."""

    def __init__(self, model: onnx.ModelProto) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 4  # fatal only: its errors reach the caller as exceptions, not as stderr lines
        self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        results = self.session.run(self.outputs, {k: np.asarray(v) for k, v in feeds.items() if k in self.inputs})
        return dict(zip(self.outputs, results))


def run_onnxruntime(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    """Run ``model`` once on the oracle (:class:`OnnxruntimeOracle`); returns outputs by name."""
    return OnnxruntimeOracle(model).run(feeds)


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------


def _fmt_index(idx: tuple[int, ...]) -> str:
    return "(" + ",".join(str(int(i)) for i in idx) + ")"


def _mismatch(got: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> tuple[int, float, tuple[int, ...]] | None:
    """None when close; else (number of bad elements, max |diff|, its index)."""
    got32, want32 = got.astype(np.float32), want.astype(np.float32)
    close = np.isclose(got32, want32, atol=atol, rtol=rtol, equal_nan=True)
    if close.all():
        return None
    diff = np.abs(got32 - want32)
    diff = np.where(np.isnan(diff) & ~close, np.inf, np.nan_to_num(diff, nan=0.0))
    where = np.unravel_index(int(np.argmax(diff)), diff.shape)
    worst = float(np.abs(got32[where] - want32[where]))
    return int((~close).sum()), worst, tuple(int(i) for i in where)


def _describe(prefix: str, found: tuple[int, float, tuple[int, ...]], b: int, size: int) -> str:
    """``found`` indexes the slice of batch row b; the message gives the full index."""
    count, worst, where = found
    return f"{prefix} max |diff| {worst:.4g} at {_fmt_index((b,) + where)} ({count} of {size} elements out of tolerance)"


def _compare_output(name: str, got: np.ndarray, want: np.ndarray, atol: float, rtol: float) -> list[str]:
    """All [B,S,...] rows, reported per batch row b."""
    if got.shape != want.shape:
        return [f"{name}: shape {tuple(got.shape)} != onnxruntime's {tuple(want.shape)}"]
    msgs = []
    for b in range(want.shape[0]):
        found = _mismatch(got[b], want[b], atol, rtol)
        if found:
            msgs.append(_describe(f"{name}[b={b}]:", found, b, want[b].size))
    return msgs


def _compare_cache(name: str, got: np.ndarray, want: np.ndarray, seqlens_k: np.ndarray, atol: float, rtol: float) -> list[str]:
    """onnxruntime's shape [B,Hkv,max(P,total),Dh] exactly (fed back, a cache with other rows
    would be another cache mode); values per batch row b on rows [0, seqlens_k[b]+1) only."""
    if got.shape != want.shape:
        return [f"{name}: shape {tuple(got.shape)} != onnxruntime's {tuple(want.shape)} ([B,Hkv,T,Dh])"]
    msgs = []
    for b, last in enumerate(seqlens_k):
        rows = int(last) + 1
        found = _mismatch(got[b, :, :rows], want[b, :, :rows], atol, rtol)
        if found:
            size = want.shape[1] * rows * want.shape[3]
            head = found[2][0]
            msgs.append(_describe(f"{name}[b={b}]: rows [0,{rows}) head {head}", found, b, size))
    return msgs


def _compare_qk(got: np.ndarray, want: np.ndarray, seqlens_k: np.ndarray, query_lens, atol: float, rtol: float) -> list[str]:
    """output_qk [B,H,S,total]: per batch row b, only key columns [0, seqlens_k[b]+1)
    (onnxruntime leaves the others unwritten); with query_seqlens, padding rows
    s >= query_seqlens[b] whole (onnxruntime writes 0 there)."""
    if got.shape != want.shape:
        return [f"output_qk: shape {tuple(got.shape)} != onnxruntime's {tuple(want.shape)}"]
    msgs = []
    for b, last in enumerate(seqlens_k):
        cols = int(last) + 1
        found = _mismatch(got[b, ..., :cols], want[b, ..., :cols], atol, rtol)
        if found:
            msgs.append(_describe(f"output_qk[b={b}]: columns [0,{cols})", found, b, want[b, ..., :cols].size))
        rows = slice(int(query_lens[b]), None) if query_lens is not None else slice(0, 0)
        found = _mismatch(got[b, :, rows], want[b, :, rows], atol, rtol)
        if found:
            msgs.append(_describe(f"output_qk[b={b}]: padding rows [{rows.start},S)", found, b, want[b, :, rows].size))
    return msgs


def window_resident(T: int, capacity: int, window: int) -> int:
    """L(T): rows a window cache keeps after T tokens (onnxruntime's eviction rule)."""
    if T <= capacity:
        return T
    g = capacity - window + 1
    return T - g * -(-(T - capacity) // g)


def compare(
    cfg: GQAConfig,
    got: dict,
    want: dict,
    feeds: dict,
    atol: float | None = None,
    rtol: float | None = None,
) -> list[str]:
    """Human-readable mismatches of ``got`` against onnxruntime's ``want``; [] when matching.

    ``output`` (and ``output_qk``) are compared whole, per batch row;
    ``present_key``/``present_value`` only in rows [0, seqlens_k[b]+1) of each
    batch row b, so ``got`` caches may be longer along axis 2 and hold anything
    past the valid rows. Values are cast to float32 before comparing.
    """
    default_atol, default_rtol = _DEFAULT_TOL[cfg.dtype]
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    seqlens_k = np.asarray(feeds["seqlens_k"]).reshape(-1) if "seqlens_k" in feeds else feeds["attention_mask"].sum(1) - 1
    msgs: list[str] = []
    for name, want_arr in want.items():
        if name not in got or got[name] is None:
            msgs.append(f"{name}: missing from the outputs (have {sorted(got)})")
            continue
        got_arr, want_arr = np.asarray(got[name]), np.asarray(want_arr)
        if name in _CACHE_OUTPUTS and cfg.window_cache:  # resident rows [0, L(T_b))
            resident = np.asarray([window_resident(int(k) + 1, cfg.past, cfg.window) - 1 for k in seqlens_k])
            msgs += _compare_cache(name, got_arr, want_arr, resident, atol, rtol)
        elif name in _CACHE_OUTPUTS:
            msgs += _compare_cache(name, got_arr, want_arr, seqlens_k, atol, rtol)
        elif name == "output_qk":
            query_lens = np.asarray(feeds["query_seqlens"]).reshape(-1) if "query_seqlens" in feeds else None
            msgs += _compare_qk(got_arr, want_arr, seqlens_k, query_lens, atol, rtol)
        elif "query_seqlens" in feeds:  # rows past query_seqlens[b] are padding: unspecified
            for b, q in enumerate(np.asarray(feeds["query_seqlens"]).reshape(-1)):
                msgs += [m.replace("[b=0]", f"[b={b}]") for m in _compare_output(name, got_arr[b : b + 1, : int(q)], want_arr[b : b + 1, : int(q)], atol, rtol)]
        else:
            msgs += _compare_output(name, got_arr, want_arr, atol, rtol)
    return msgs
