"""`LoraSpec`: a LoRA fine-tuning job, the base model frozen and low-rank adapters trained.

Field names and defaults follow Megatron-Bridge's ``LoRA`` PEFT transform
(``src/megatron/bridge/peft/lora.py``, tag v0.5.0 = NeMo 26.06): ``dim`` (here `rank`,
default 32), ``alpha`` (32) and ``target_modules`` (here `targets`, default the four
linear layers of a transformer layer). Each targeted linear layer ``W: in -> out`` keeps its
weight frozen and gains an adapter of two matrices, ``linear_in`` (A: in -> rank) and
``linear_out`` (B: rank -> out), whose output, times alpha/rank, is added to the layer's
(``LoRALinear``, ``src/megatron/bridge/peft/lora_layers.py``; ``ParallelLinearAdapter``,
``src/megatron/bridge/peft/utils.py``). ``PEFT.freeze_model`` (``peft/base.py``) freezes
every parameter of the model before the adapters are added, so the embedding, the norms and
the output layer are frozen too.

Bridge's other fields (dropout, default 0; initialisation; ``lora_dtype``, default the
model's dtype) change nothing that is priced; a wildcard or per-layer target list has no
form here: every transformer layer gets the same adapters.

`lora_target_features` gives each target's ``(in, out)`` width and whether the base layer
is column-parallel; `specs.params.lora_layer_params` counts the adapters' parameters.
Only the ``megatron`` runtime prices LoRA: paraplan's executor, and the ``torch`` runtime
that prices it, train every weight (`executor_lora_refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from specs.errors import SpecError
from specs.fieldcheck import require_choices, require_positive
from specs.model import ModelSpec

LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
LORA_TARGETS: tuple[LoraTarget, ...] = get_args(LoraTarget)
"""Megatron-core's names of a transformer layer's linear layers, in forward order; all four
are Megatron-Bridge's default ``target_modules``."""

COLUMN_PARALLEL_TARGETS: frozenset[str] = frozenset({"linear_qkv", "linear_fc1"})
"""Targets whose base layer is column-parallel (Transformer Engine's
``LayerNormColumnParallelLinear``); the others are row-parallel."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoraSpec:
    """LoRA adapters of a fine-tuning job (Megatron-Bridge ``LoRA``, module docstring)."""

    rank: int
    """Rank r of every adapter (Bridge ``dim``): A is in x r, B is r x out."""
    alpha: int = 32
    """Bridge ``alpha``: the adapter output is scaled by alpha / rank (a multiply priced
    the same whatever its value)."""
    targets: tuple[LoraTarget, ...] = LORA_TARGETS
    """The linear layers that get adapters (Bridge ``target_modules``), distinct names of
    `LORA_TARGETS`."""

    def __post_init__(self) -> None:
        require_positive(self, "rank", "alpha")
        require_choices(self, "targets", LoraTarget)
        if not self.targets:
            raise SpecError(
                "LoraSpec.targets must name at least one linear layer, got (); choose from "
                f"{', '.join(LORA_TARGETS)} (Megatron-Bridge target_modules)"
            )

    def label(self) -> str:
        """Short text, e.g. ``LoRA r16 a32 linear_qkv``."""
        return f"LoRA r{self.rank} a{self.alpha} {','.join(self.targets)}"


def has_adapter(lora: LoraSpec | None, target: str) -> bool:
    """True when a job with ``lora`` (None: full training) adapts the linear layer
    ``target``."""
    return lora is not None and target in lora.targets


def lora_target_features(model: ModelSpec, target: str) -> tuple[int, int, bool]:
    """(in_features, out_features, column_parallel) of the base linear layer ``target`` of
    ``model``, unsharded: QKV h -> q + 2·kv (q = a·d, kv = g·d), output projection q -> h,
    FC1 h -> F (2·F gated), FC2 F -> h, as Bridge's ``get_adapter_attributes_from_linear``
    reads them (column-parallel layers' out and row-parallel layers' in times tp)."""
    h, d = model.hidden_size, model.head_dim
    q, kv = model.num_attention_heads * d, model.query_groups * d
    ffn = model.ffn_hidden_size
    up = 2 * ffn if model.activation == "swiglu" else ffn
    shapes = {
        "linear_qkv": (h, q + 2 * kv),
        "linear_proj": (q, h),
        "linear_fc1": (h, up),
        "linear_fc2": (ffn, h),
    }
    if target not in shapes:
        raise SpecError(f"unknown LoRA target {target!r}; choose from {', '.join(LORA_TARGETS)}")
    fan_in, fan_out = shapes[target]
    return fan_in, fan_out, target in COLUMN_PARALLEL_TARGETS


EXECUTOR_LORA_RULE = "lora_not_in_executor"
"""Rule id of `executor_lora_refusal`."""


def executor_lora_refusal(lora: LoraSpec | None) -> str | None:
    """Why paraplan's executor (and the ``torch`` runtime, which prices it) cannot run a
    LoRA job, or None without LoRA: it trains every weight and builds no adapters."""
    if lora is None:
        return None
    return (
        f"[{EXECUTOR_LORA_RULE}] {lora.label()} is priced for Megatron-Bridge's peft "
        "transform on Megatron-core (the megatron runtime); paraplan's executor, which the "
        "torch runtime prices, trains every weight and has no adapters: use --runtime "
        "megatron and run the plan with Megatron-Bridge, or drop --lora-rank"
    )
