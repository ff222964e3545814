"""Time of per-module selective recompute and of CPU activation offloading in a
Megatron-core layer, one microbatch on one rank.

Recompute (`ParallelPlan.recompute_modules`, Megatron-core ``recompute_modules``): the
backward pass reruns the forward of each named module (`costmodel.activation_savers`
lists what each frees): ``core_attn`` the attention core (with its CP exchange), ``mlp``
the dense MLP block (a MoE layer has no ``mlp`` pass: Megatron-core recomputes ``mlp`` in
dense layers only) and ``moe`` the MoE block (with their collectives), ``shared_experts``
the shared expert, ``layernorm`` the two pre-norms, ``moe_act`` the experts' activation
function (read the FC1 output, write its activation: memory-bound), ``mla_up_proj`` MLA's
query and key/value up projections (their share of the projection FLOPs, timed at the
projections' rate) and RoPE.

Offloading (`ParallelPlan.cpu_offloading_num_layers`, `ParallelPlan.offload_modules`):
each offloaded byte crosses the host link twice, device to host in forward and host to
device in backward (`costmodel.host_link`), on its own stream, overlapped with the
layer's compute (Transformer Engine ``get_cpu_offload_context``; Megatron-core
``fine_grained_activation_offload.py``: a D2H stream and an H2D stream beside the compute
stream); only the copy time beyond the layer's compute in that pass is exposed.
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.activation_savers import offloaded_bytes
from costmodel.activation_shard import projection_saves_original_input
from costmodel.flops import FMA_FLOPS, attention_projection_forward_flops_per_token
from costmodel.host_link import host_link_Bps
from costmodel.layer_activations import kind_activations
from costmodel.passes import ZERO, PassCost
from costmodel.saved_inputs import expert_fc1_saves_input
from profiles.schema import HardwareProfile
from specs.attention_params import mla_head_dims
from specs.block_checks import block_norms
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def mla_up_projection_share(model: ModelSpec) -> float:
    """MLA's query and key/value up projections over all its projection FLOPs per token
    (`costmodel.flops.attention_projection_forward_flops_per_token` terms: q_lora·a·(d_qk +
    d_rope) with query compression, kv_lora·a·(d_qk + d_v)); 0 without MLA."""
    if not model.uses_mla:
        return 0.0
    d_qk, d_rope, d_v = mla_head_dims(model)
    a = model.num_attention_heads
    q_up = (model.q_lora_rank or 0) * a * (d_qk + d_rope)
    kv_up = (model.kv_lora_rank or 0) * a * (d_qk + d_v)
    return FMA_FLOPS * (q_up + kv_up) / attention_projection_forward_flops_per_token(model)


def selective_recompute(parts: dict[str, PassCost], modules: tuple[str, ...]) -> PassCost:
    """The rerun forward of the recomputed ``modules``: the sum of their entries in
    ``parts`` (module -> forward pass; modules absent from ``parts`` have no work in this
    layer). ``moe`` covers ``moe_act`` and ``shared_experts``."""
    chosen = set(modules)
    if "moe" in chosen:
        chosen -= {"moe_act", "shared_experts"}
    total = ZERO
    for module in sorted(chosen):
        total = total.plus(parts.get(module, ZERO))
    return total


def elementwise_recompute_s(
    profile: HardwareProfile,
    *,
    norm_tokens: float,
    hidden: int,
    elem: int,
    expert_act_bytes: float,
    norms: int = 2,
) -> dict[str, float]:
    """Seconds of the memory-bound reruns: ``layernorm`` (the layer's ``norms`` pre-norms
    forward: two in a transformer layer, one in a hybrid model's single-part layer) and
    ``moe_act`` (read and write ``expert_act_bytes``, the experts' FC1 output and
    activation output)."""
    norm = ops.norm_time_s(profile, norm_tokens, hidden, elem, "forward")
    return {
        "layernorm": norms * norm,
        "moe_act": ops.memory_bound_time_s(profile, expert_act_bytes) if expert_act_bytes else 0.0,
    }


def offload_exposed_s(
    profile: HardwareProfile, offloaded_bytes: float, forward_s: float, backward_s: float
) -> tuple[float, float]:
    """(forward, backward) seconds the compute stream waits for the offload copies of one
    layer: ``offloaded_bytes`` over the host link each way, less the layer's compute in
    that pass."""
    if offloaded_bytes <= 0:
        return 0.0, 0.0
    copy_s = offloaded_bytes / host_link_Bps(profile)
    return max(copy_s - forward_s, 0.0), max(copy_s - backward_s, 0.0)


def _pre_norms(model: ModelSpec, kind: LayerKind) -> int:
    """Pre-norms of a layer of ``kind``: one per part it holds, the layer block's
    (`specs.block_checks.block_norms`) for a layer with both parts."""
    if kind.mixer != "none" and kind.mlp != "none":
        return block_norms(model.layer_block)
    return (kind.mixer != "none") + (kind.mlp != "none")


def selective_rerun(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    kind: LayerKind,
    rerun: dict[str, PassCost],
    norm_tokens: float,
    elem: int,
) -> PassCost:
    """The forward work selective recompute reruns for ``plan.selective_modules`` in one
    layer of ``kind``: the layer's module passes in ``rerun`` (`layer_costs`) plus the
    memory-bound norm and expert-activation reruns on ``norm_tokens`` rows of ``elem``-byte
    elements."""
    is_moe = kind.is_moe
    layer = kind_activations(model, job, plan, kind)
    tensors = dict(layer.tensors)
    act_bytes = tensors.get("expert_fc1_output", 0.0) + tensors.get("expert_act_output", 0.0)
    elementwise = elementwise_recompute_s(
        profile,
        norm_tokens=norm_tokens,
        hidden=model.hidden_size,
        elem=elem,
        expert_act_bytes=act_bytes if is_moe else 0.0,
        norms=_pre_norms(model, kind),
    )
    parts = dict(rerun)
    for module, seconds in elementwise.items():
        parts.setdefault(module, PassCost(compute_s=seconds))
    if not is_moe:
        parts.pop("moe_act", None)
    return selective_recompute(parts, plan.selective_modules)


def layer_offload_exposed_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    kind: LayerKind,
    forward: PassCost,
    backward: PassCost,
    fp8_recipe: str = "delayed",
    fp8_attention: bool = False,
) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's offload copies not hidden under its
    compute (`offload_exposed_s`); layer-level offloading moves every saved tensor of the
    first ``cpu_offloading_num_layers`` layers, priced as that fraction of each layer's
    copies. ``fp8_recipe``: the run's FP8 recipe, which sets whether the attention output
    projection saves an FP8 copy (`projection_saves_original_input`); ``fp8_attention``: the
    attention core saves its tensors in that recipe's FP8 form
    (`costmodel.fp8_attention.core_saved_bytes`)."""
    layer = kind_activations(
        model,
        job,
        plan,
        kind,
        proj_saves_input=projection_saves_original_input(fp8_recipe),
        fp8_attention_recipe=fp8_recipe if fp8_attention else None,
        expert_fc1_saves_input=expert_fc1_saves_input(plan, job.precision, fp8_recipe),
    )
    if plan.cpu_offloading_num_layers:
        moved, share = layer.full_bytes, plan.cpu_offloading_num_layers / model.num_layers
    else:
        moved = offloaded_bytes(layer.tensors, plan.offload_modules, plan.selective_modules)
        share = 1.0
    off_f, off_b = offload_exposed_s(profile, moved, forward.compute_s, backward.compute_s)
    return share * off_f, share * off_b
