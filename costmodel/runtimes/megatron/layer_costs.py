"""Per-microbatch costs of one transformer layer on one rank: the attention block
(`costmodel.runtimes.megatron.attention_costs`), the dense MLP
(`costmodel.runtimes.megatron.mlp_costs`) or the MoE block, and the norm and residual of
the MLP block (`costmodel.runtimes.megatron.layer_shape`; a parallel attention+MLP block's
MLP part, its FC2 output left for the attention pair's one reduction:
`layer_shape.block_elementwise_s`, `linear_pairs.tp_pair`), summed into the layer's
forward and backward passes (`layer_passes`), then the recompute and offloading terms of
the plan (`layer_cost_from_passes`). The embedding and the output layer:
`costmodel.runtimes.megatron.vocab_costs`; the TP communication and FP8 quantization of
each linear pair: `costmodel.runtimes.megatron.linear_pairs`.

EP (MoE layers, alltoall dispatcher): dispatch and combine all-to-alls over the EP
group, forward 2 and backward 2, each of top_k·tokens·h·e bytes per rank (x capacity
factor), the probs all-to-all, the token-count all-gather, plus an all-gather /
reduce-scatter over expert TP when etp > 1; all exposed. Router, permutations and the
expert GEMMs: `costmodel.runtimes.megatron.moe_costs`; the host floor of a MoE layer
pass (`ExecutionOptions.moe_host_launch_s`, `ExecutionOptions.moe_expert_launch_s`):
`costmodel.runtimes.megatron.moe_host_floor`, from `costmodel.runtimes.megatron.moe_launches`;
the fitted device time per token no priced kernel accounts for
(`ExecutionOptions.moe_token_device_s`): `moe_experts.unattributed_device_s`;
a LoRA job's adapters (its base blocks frozen):
`costmodel.runtimes.megatron.lora_costs`;
with `ExecutionOptions.moe_a2a_overlap`, the part of the EP time the 1F1B overlap leaves
exposed: `costmodel.runtimes.megatron.moe_a2a_overlap`.

Recompute: selective reruns the forward of its modules in backward (the attention core and
its CP exchange by default; per module: `costmodel.runtimes.megatron.saver_costs`); full
reruns the whole layer forward including its collectives. CPU activation offloading adds
the copy time its layer's compute does not hide (`saver_costs.offload_exposed_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.attention_costs import attention_block
from costmodel.runtimes.megatron.gdn_costs import gdn_block
from costmodel.runtimes.megatron.layer_shape import (
    LayerShape,
    block_elementwise_s,
    intra_groups,
    layer_shape,
    norm_and_residual,
)
from costmodel.runtimes.megatron.lora_costs import adapter_costs
from costmodel.runtimes.megatron.mamba_costs import mamba_block
from costmodel.runtimes.megatron.mlp_costs import mlp_block
from costmodel.runtimes.megatron.moe_a2a_overlap import (
    a2a_overlap_applies,
    a2a_overlapped_passes,
    a2a_paired_fraction,
    flex_comm_sm_share,
)
from costmodel.runtimes.megatron.moe_costs import routed_experts
from costmodel.runtimes.megatron.moe_experts import unattributed_device_s
from costmodel.runtimes.megatron.moe_host_floor import FloorPasses, moe_host_floor
from costmodel.runtimes.megatron.saved_input_terms import (
    SavedInputTerms,
    saved_input_s,
    saved_input_terms,
)
from costmodel.runtimes.megatron.saver_costs import layer_offload_exposed_s, selective_rerun
from costmodel.runtimes.megatron.shared_gate_costs import shared_expert_gate_s
from costmodel.runtimes.megatron.userbuffers import sm_count
from profiles.schema import HardwareProfile
from specs.block_checks import is_parallel_block
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerCost:
    """One transformer layer, one microbatch, one rank."""

    forward: PassCost
    """Forward pass."""
    backward: PassCost
    """Backward pass (compute = dgrad + wgrad + backward element-wise ops)."""
    recompute: PassCost
    """Extra forward work the backward pass reruns under the plan's recompute mode
    (selective: the attention core; full: the whole forward; none: zero). The caller
    applies it only to layers that are recomputed."""
    dgrad_s: float
    """Input-gradient GEMMs and backward element-wise ops (part of backward.compute_s)."""
    wgrad_s: float
    """Weight-gradient GEMMs (part of backward.compute_s)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerPasses:
    """One layer's forward and backward on one rank for one microbatch, before the plan's
    recompute and activation offloading are applied: what every per-module recompute set
    of the same layer shares (`layer_cost_from_passes` adds each set's rerun)."""

    forward: PassCost
    """Forward pass."""
    backward: PassCost
    """Backward pass without recompute."""
    rerun: dict[str, PassCost]
    """Forward passes of the modules selective recompute can rerun, by module name."""
    dgrad_s: float
    """As `LayerCost.dgrad_s`."""
    wgrad_s: float
    """As `LayerCost.wgrad_s`."""
    norm_tokens: float
    """Token rows of the layer's norms and element-wise ops on this rank."""
    elem: int
    """Bytes per activation element."""
    saved_inputs: SavedInputTerms
    """The time of the inputs the layer saves in 16 bits under some recompute modules
    (`saved_input_terms.saved_input_s` picks the plan's)."""


def layer_passes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    kind: LayerKind,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> LayerPasses:
    """The passes of one layer of ``kind`` (`layer_cost` without the recompute and
    offloading terms): its token mixer (`_mixer_passes`), then its MLP or routed experts
    with their pre-norm and residual (`_ffn_passes`), and a LoRA job's adapters on the
    targets the layer holds (`adapter_costs`; a MoE layer is refused by
    `specs.rules_lora.lora_not_on_experts`); none of them depends on ``plan.recompute_modules``."""
    comm = groups or intra_groups(plan)
    x = layer_shape(job, plan)
    att_f, att_b, rerun, dgrad, wgrad = _mixer_passes(
        model, job, plan, profile, x, comm, options, kind
    )
    ffn = _ffn_passes(model, job, plan, profile, x, comm, options, kind)
    rerun.update(ffn.rerun)
    if kind.mlp != "moe":  # a LoRA job's adapters on the targets the layer holds
        adapters = adapter_costs(model, job, plan, profile, x, comm, kind)
        att_f, att_b = att_f.plus(adapters.forward), att_b.plus(adapters.backward)
        dgrad, wgrad = dgrad + adapters.dgrad_s, wgrad + adapters.wgrad_s
        if kind.mlp == "dense":
            rerun["mlp"] = rerun["mlp"].plus(adapters.mlp_forward)
    forward = att_f.plus(ffn.forward).plus(PassCost(compute_s=ffn.norm_forward_s))
    backward = att_b.plus(ffn.backward).plus(PassCost(compute_s=ffn.norm_backward_s))
    extra_b = ffn.norm_backward_s
    single = FloorPasses(forward=forward, backward=backward, routed_forward_s=ffn.routed_forward_s)
    merged, paired = None, 0.0
    if kind.is_moe and a2a_overlap_applies(plan, options):
        paired = a2a_paired_fraction(
            plan.pp, plan.vpp, plan.num_microbatches(job.global_batch_size)
        )
        experts, share = (
            (ffn.forward, ffn.backward, ffn.wgrad_s),
            flex_comm_sm_share(sm_count(profile), options),
        )
        merged_f, merged_b = a2a_overlapped_passes(forward, backward, experts, 1.0, share)
        hidden_s = max(0.0, forward.ep_exposed_s - merged_f.ep_exposed_s)
        merged = FloorPasses(
            forward=merged_f,
            backward=merged_b,
            routed_forward_s=ffn.routed_forward_s - hidden_s,
        )
        forward, backward = a2a_overlapped_passes(forward, backward, experts, paired, share)
    if kind.is_moe:
        host_f, host_b = moe_host_floor(model, plan, x, single, options, merged, paired)
        forward, backward = forward.plus(host_f), backward.plus(host_b)
        extra_b += host_b.compute_s
    return LayerPasses(
        forward=forward,
        backward=backward,
        rerun=rerun,
        dgrad_s=dgrad + ffn.dgrad_s + extra_b,
        wgrad_s=wgrad + ffn.wgrad_s,
        norm_tokens=x.norm_tokens,
        elem=x.elem,
        saved_inputs=saved_input_terms(model, job, plan, profile, x, comm, options, kind),
    )


def _mixer_passes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    comm: CommGroups,
    options: ExecutionOptions,
    kind: LayerKind,
) -> tuple[PassCost, PassCost, dict[str, PassCost], float, float]:
    """(forward, backward, rerun by module, dgrad_s, wgrad_s) of the layer's token mixer
    with its pre-norm and residual: the attention block (`attention_block`), the Mamba-2
    mixer (`mamba_block`), the gated DeltaNet (`gdn_block`), or nothing."""
    if kind.mixer == "attention":
        return attention_block(model, job, plan, profile, x, comm, options)
    if kind.mixer == "mamba":
        return mamba_block(model, job, plan, profile, x, comm, options)
    if kind.mixer == "gdn":
        return gdn_block(model, job, plan, profile, x, comm, options)
    return ZERO, ZERO, {}, 0.0, 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class _FfnPasses:
    """The feed-forward part of one layer (`_ffn_passes`)."""

    forward: PassCost
    backward: PassCost
    dgrad_s: float
    wgrad_s: float
    norm_forward_s: float
    """The part's pre-norm and residual, forward."""
    norm_backward_s: float
    rerun: dict[str, PassCost]
    routed_forward_s: float = 0.0
    """Forward seconds of the routed experts alone (MoE)."""


def _ffn_passes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    comm: CommGroups,
    options: ExecutionOptions,
    kind: LayerKind,
) -> _FfnPasses:
    """The layer's dense MLP (its FC1/FC2 GEMMs with a LoRA job's frozen base) or routed experts
    with the shared expert (and its gate, `shared_gate_costs.shared_expert_gate_s`) and the
    fitted per-token device time
    (`moe_experts.unattributed_device_s`), each with its pre-norm and residual; nothing for a
    hybrid model's mixer-only layer."""
    if kind.mlp == "none":
        return _FfnPasses(
            forward=ZERO,
            backward=ZERO,
            dgrad_s=0.0,
            wgrad_s=0.0,
            norm_forward_s=0.0,
            norm_backward_s=0.0,
            rerun={},
        )
    if kind.is_moe:  # a sequential block (`specs.block_checks.check_layer_block`)
        norm_f, norm_b = norm_and_residual(profile, x, model.hidden_size, options)
        mlp_f, mlp_b, mlp_d, mlp_w = routed_experts(
            model, plan, profile, x.norm_tokens, x.elem, x.dtype, comm, options
        )
        token_f, token_b = unattributed_device_s(profile, x.norm_tokens, options.moe_token_device_s)
        mlp_f = mlp_f.plus(PassCost(compute_s=token_f))
        mlp_b, mlp_d = mlp_b.plus(PassCost(compute_s=token_b)), mlp_d + token_b
        routed_forward_s = mlp_f.duration_s
        shared = model.moe_shared_expert_size
        sh_f, sh_b, sh_d, sh_w = mlp_block(model, plan, profile, x, comm, shared, options)
        if model.moe_shared_expert_gate:
            gate_f, gate_d, gate_w = shared_expert_gate_s(
                profile, x.norm_tokens, model.hidden_size, x.elem
            )
            sh_f = sh_f.plus(PassCost(compute_s=gate_f))
            sh_b = sh_b.plus(PassCost(compute_s=gate_d + gate_w))
            sh_d, sh_w = sh_d + gate_d, sh_w + gate_w
        mlp_f, mlp_b = mlp_f.plus(sh_f), mlp_b.plus(sh_b)
        return _FfnPasses(
            forward=mlp_f,
            backward=mlp_b,
            dgrad_s=mlp_d + sh_d,
            wgrad_s=mlp_w + sh_w,
            norm_forward_s=norm_f,
            norm_backward_s=norm_b,
            rerun={"shared_experts": sh_f, "moe": mlp_f},
            routed_forward_s=routed_forward_s,
        )
    norm_f, norm_b = block_elementwise_s(profile, x, model, options, "mlp")
    ffn, parallel = model.ffn_hidden_size, is_parallel_block(model.layer_block)
    mlp_f, mlp_b, mlp_d, mlp_w = mlp_block(
        model, plan, profile, x, comm, ffn, options, lora=job.lora, row_reduction=not parallel
    )
    return _FfnPasses(
        forward=mlp_f,
        backward=mlp_b,
        dgrad_s=mlp_d,
        wgrad_s=mlp_w,
        norm_forward_s=norm_f,
        norm_backward_s=norm_b,
        rerun={"mlp": mlp_f},
    )


def layer_cost_from_passes(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    passes: LayerPasses,
    *,
    kind: LayerKind,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> LayerCost:
    """`LayerCost` of a layer from its `layer_passes`: the rerun of the plan's recompute
    mode (selective: its modules, `saver_costs.selective_rerun`; full: the whole forward)
    and the copy time activation offloading leaves exposed
    (`saver_costs.layer_offload_exposed_s`), with the inputs its recompute modules make
    the layer save in 16 bits (`saved_input_terms.saved_input_s`; offload modules too)."""
    saved_f, saved_b = saved_input_s(passes.saved_inputs, model, job, plan, options)
    forward = passes.forward.plus(PassCost(compute_s=saved_f))
    backward = passes.backward.plus(PassCost(compute_s=saved_b))
    recompute = ZERO if plan.recompute == "none" else forward
    if plan.recompute == "selective":
        recompute = selective_rerun(
            model,
            job,
            plan,
            profile,
            kind=kind,
            rerun=passes.rerun,
            norm_tokens=passes.norm_tokens,
            elem=passes.elem,
        )
    if plan.offloads_activations:
        off_f, off_b = layer_offload_exposed_s(
            model,
            job,
            plan,
            profile,
            kind=kind,
            forward=forward,
            backward=backward,
            fp8_recipe=options.fp8_recipe,
            fp8_attention=options.fp8_attention,
        )
        forward = forward.plus(PassCost(compute_s=off_f))
        backward = backward.plus(PassCost(compute_s=off_b))
    return LayerCost(
        forward=forward,
        backward=backward,
        recompute=recompute,
        dgrad_s=passes.dgrad_s + saved_b,
        wgrad_s=passes.wgrad_s,
    )


def layer_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    kind: LayerKind,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> LayerCost:
    """Costs of one layer of ``kind`` (`specs.layer_kinds.LayerKind`) for one microbatch on
    one rank.

    ``groups`` places the TP/CP/EP groups (default: every group inside one scale-up
    domain); ``options`` are the framework's kernels (attention implementation, bias
    fusion: `costmodel.execution`).
    """
    passes = layer_passes(model, job, plan, profile, kind=kind, groups=groups, options=options)
    return layer_cost_from_passes(model, job, plan, profile, passes, kind=kind, options=options)
