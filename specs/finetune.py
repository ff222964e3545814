"""`LoraSpec`: a LoRA fine-tuning job, the base model frozen and low-rank adapters trained.

Field names and defaults follow Megatron-Bridge's ``LoRA`` PEFT transform
(``src/megatron/bridge/peft/lora.py``, tag v0.5.0 = NeMo 26.06): ``dim`` (here `rank`,
default 32), ``alpha`` (32) and ``target_modules`` (here `targets`, default the four
linear layers of a transformer layer, `DEFAULT_LORA_TARGETS`). Each targeted linear
layer ``W: in -> out`` keeps its weight frozen and gains an adapter of two matrices,
``linear_in`` (A: in -> rank) and ``linear_out`` (B: rank -> out), whose output, times
alpha/rank, is added to the layer's (``LoRALinear``,
``src/megatron/bridge/peft/lora_layers.py``; ``ParallelLinearAdapter``,
``src/megatron/bridge/peft/utils.py``). ``PEFT.freeze_model`` (``peft/base.py``) freezes
every parameter of the model before the adapters are added, so the embedding, the norms and
the output layer are frozen too.

Bridge's other fields (dropout, default 0; initialisation; ``lora_dtype``, default the
model's dtype) change nothing that is priced; a wildcard or per-layer target list has no
form here: every layer gets the adapters of the targets it holds.

Bridge matches ``target_modules`` against module names (``ModuleMatcher.match``,
``peft/module_matcher.py``): a target absent from a layer is not matched there and the
layer keeps no adapter for it. A hybrid model's layers (`specs.layer_kinds.LayerKind`)
hold one part each, so an attention (``*``) layer takes ``linear_qkv`` and
``linear_proj``, an MLP (``-``) layer ``linear_fc1`` and ``linear_fc2``, and a Mamba-2
(``M``) layer the mixer's ``in_proj`` (``TELayerNormColumnParallelLinear``, column-parallel,
h -> 2·d_inner + 2·G·N + H) and ``out_proj`` (``TERowParallelLinear``, row-parallel,
d_inner -> h), as Megatron-core's ``MambaMixer.__init__`` builds them; Bridge's Nemotron-H
PEFT recipes (``recipes/nemotronh/``) list all six targets (`layer_targets`).

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
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec

LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "in_proj", "out_proj"]
LORA_TARGETS: tuple[LoraTarget, ...] = get_args(LoraTarget)
"""Megatron-core's names of the linear layers an adapter can wrap, in forward order: a
transformer layer's four, then a Mamba-2 mixer's input and output projections."""

DEFAULT_LORA_TARGETS: tuple[LoraTarget, ...] = LORA_TARGETS[:4]
"""Megatron-Bridge's default ``target_modules``: the four linear layers of a transformer
layer."""

COLUMN_PARALLEL_TARGETS: frozenset[str] = frozenset({"linear_qkv", "linear_fc1", "in_proj"})
"""Targets whose base layer is column-parallel (Transformer Engine's
``LayerNormColumnParallelLinear``); the others are row-parallel."""

_MIXER_TARGETS: dict[str, tuple[str, ...]] = {
    "attention": ("linear_qkv", "linear_proj"),
    "mamba": ("in_proj", "out_proj"),
    "gdn": (),
    "none": (),
}
_MLP_TARGETS: dict[str, tuple[str, ...]] = {
    "dense": ("linear_fc1", "linear_fc2"),
    "moe": (),
    "none": (),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class LoraSpec:
    """LoRA adapters of a fine-tuning job (Megatron-Bridge ``LoRA``, module docstring)."""

    rank: int
    """Rank r of every adapter (Bridge ``dim``): A is in x r, B is r x out."""
    alpha: int = 32
    """Bridge ``alpha``: the adapter output is scaled by alpha / rank (a multiply priced
    the same whatever its value)."""
    targets: tuple[LoraTarget, ...] = DEFAULT_LORA_TARGETS
    """The linear layers that get adapters (Bridge ``target_modules``), distinct names of
    `LORA_TARGETS`; each layer adapts those it holds (`layer_targets`)."""

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


def layer_targets(lora: LoraSpec | None, kind: LayerKind) -> tuple[str, ...]:
    """The targets of ``lora`` that a layer of ``kind`` holds, in ``lora.targets`` order:
    its mixer's (attention: ``linear_qkv``, ``linear_proj``; Mamba-2: ``in_proj``,
    ``out_proj``) and its dense MLP's (``linear_fc1``, ``linear_fc2``); routed experts
    hold none that the cost model prices (`specs.rules_lora.lora_not_on_experts`). A
    target the layer does not hold is not matched there (module docstring); () without
    LoRA."""
    if lora is None:
        return ()
    held = _MIXER_TARGETS[kind.mixer] + _MLP_TARGETS[kind.mlp]
    return tuple(t for t in lora.targets if t in held)


def model_targets(model: ModelSpec, lora: LoraSpec) -> tuple[str, ...]:
    """The targets of ``lora`` that at least one layer of ``model`` holds
    (`layer_targets`), in ``lora.targets`` order."""
    held = {t for kind in set(model.layer_kinds()) for t in layer_targets(lora, kind)}
    return tuple(t for t in lora.targets if t in held)


def lora_target_features(model: ModelSpec, target: str) -> tuple[int, int, bool]:
    """(in_features, out_features, column_parallel) of the base linear layer ``target`` of
    ``model``, unsharded: QKV h -> q + 2·kv (q = a·d, kv = g·d), output projection q -> h,
    FC1 h -> F (2·F gated), FC2 F -> h, a Mamba-2 mixer's in_proj h -> 2·d_inner + 2·G·N + H
    and out_proj d_inner -> h (``MambaMixer.__init__``: d_inner = H·P), as Bridge's
    ``get_adapter_attributes_from_linear`` reads them (column-parallel layers' out and
    row-parallel layers' in times tp). The Mamba-2 shapes exist for hybrid models only."""
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
    if model.is_hybrid:
        inner, heads = model.mamba_inner_size, model.mamba_heads
        groups_state = model.mamba_num_groups * model.mamba_state_dim
        shapes["in_proj"] = (h, 2 * inner + 2 * groups_state + heads)
        shapes["out_proj"] = (inner, h)
    if target not in shapes:
        raise SpecError(
            f"LoRA target {target!r} is not a linear layer of {model.name!r}; choose from "
            f"{', '.join(shapes)}"
        )
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
