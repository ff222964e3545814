"""The host-bound time a MoE layer adds to its forward and backward on one rank: its kernel
launches priced at the fitted host times (`costmodel.runtimes.megatron.moe_launches`), less
those CUDA graphs capture, against the layer's kernels and exposed communication, with the
token-count synchronization of dropless routing (`moe_host_floor`). Read by
`costmodel.runtimes.megatron.layer_costs.layer_passes`."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute import LOW_PRECISION_GEMM_DTYPES
from costmodel.execution import ExecutionOptions
from costmodel.passes import PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape
from costmodel.runtimes.megatron.moe_costs import moe_shape
from costmodel.runtimes.megatron.moe_experts import (
    expert_dgrad_launches,
    forward_host_floor_s,
    merged_host_floor_s,
)
from costmodel.runtimes.megatron.moe_latent import latent_launches
from costmodel.runtimes.megatron.moe_launches import (
    WHOLE_MOE_SCOPES,
    captured_moe_launches,
    host_bound_s,
    moe_host_launches,
    pre_sync_launches,
)
from specs.model import ModelSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class FloorPasses:
    """A MoE layer's forward and backward on the device as one kind of step runs them (alone,
    or merged by the 1F1B all-to-all overlap), the currency of `moe_host_floor`."""

    forward: PassCost
    """The forward with the EP seconds this kind of step exposes."""
    backward: PassCost
    """The backward with the EP seconds this kind of step exposes."""
    routed_forward_s: float
    """Seconds of the routed experts' forward within ``forward`` (dispatch, experts,
    combine), with the same exposed EP seconds."""


def moe_host_floor(
    model: ModelSpec,
    plan: ParallelPlan,
    x: LayerShape,
    single: FloorPasses,
    options: ExecutionOptions,
    merged: FloorPasses | None = None,
    paired: float = 0.0,
) -> tuple[PassCost, PassCost]:
    """Host-bound time a MoE layer adds per pass: its launches
    (`moe_launches.moe_host_launches`), the Python-level ones at
    `ExecutionOptions.moe_host_launch_s` each and those Transformer Engine issues per local
    expert from C++ at `ExecutionOptions.moe_expert_launch_s` each
    (`moe_launches.MoeLaunches.host_s`), against the whole layer's kernels and exposed
    communication. Launches inside CUDA-graph-captured scopes
    (`ExecutionOptions.cuda_graph_scopes`, `moe_launches.captured_moe_launches`) cost no
    host time. Dropless routing (no capacity factor) synchronizes the stream once per
    forward on the received token counts: the device then waits one Python-level launch for
    the next kernel, and the launches after the router and the dispatch preprocessing
    (`moe_launches.pre_sync_launches`, by `ExecutionOptions.moe_dispatcher`) hide only
    behind the routed experts' forward (dispatch, experts, combine; its router kernels,
    which run before the synchronization, are a small part:
    `moe_experts.forward_host_floor_s`). The backward reuses the forward's split sizes and
    does not synchronize (`moe_launches.host_bound_s`). A latent MoE layer adds its
    projections' launches (`moe_latent.latent_launches`, Python-level). ``single`` holds
    the passes as they run alone, with all their EP seconds exposed.

    Under the 1F1B all-to-all overlap a share ``paired`` of the passes
    (`moe_a2a_overlap.a2a_paired_fraction`) runs as one merged step of a forward and
    another microbatch's backward: the host issues both passes' launches in one sequence
    with the synchronization in the forward's dispatch, and the device runs the backward's
    kernels beside and after it (Megatron-LM
    megatron/core/models/common/model_chunk_schedule_plan.py,
    ``TransformerLayerSchedulePlan.run``). Those passes take the merged step's floor
    (`merged_host_floor_s`) over the ``merged`` passes (the EP seconds a merged step
    exposes), the rest the floors of single passes over ``single``; each floor is weighed
    by its share."""
    launches = _host_launches(model, plan, x, options)
    python_s = options.moe_host_launch_s
    dropless = model.moe_capacity_factor is None and not (
        options.cuda_graph_scopes & WHOLE_MOE_SCOPES
    )
    sync_s = python_s if dropless else 0.0

    def post_sync_gpu_s(passes: FloorPasses) -> float:
        forward_s = passes.forward.duration_s
        return min(passes.routed_forward_s, forward_s) if dropless else forward_s

    post_sync = launches.post_sync_s if dropless else launches.forward_s
    extra_f = sync_s + forward_host_floor_s(
        layer_gpu_s=single.forward.duration_s,
        post_sync_gpu_s=post_sync_gpu_s(single),
        host_s=launches.forward_s,
        post_sync_host_s=post_sync,
    )
    extra_b = host_bound_s(single.backward.duration_s, launches.backward_s)
    if merged is None or paired <= 0.0:
        return PassCost(compute_s=extra_f), PassCost(compute_s=extra_b)
    step = sync_s + merged_host_floor_s(
        forward_gpu_s=merged.forward.duration_s,
        backward_gpu_s=merged.backward.duration_s,
        post_sync_gpu_s=post_sync_gpu_s(merged),
        forward_host_s=launches.forward_s,
        backward_host_s=launches.backward_s,
        post_sync_host_s=post_sync,
        backward_pre_sync_host_s=min(launches.backward_s, launches.dgrad_s),
    )
    extra_f = (1.0 - paired) * extra_f + paired * step
    return PassCost(compute_s=extra_f), PassCost(compute_s=(1.0 - paired) * extra_b)


@dataclass(frozen=True, kw_only=True, slots=True)
class _HostSeconds:
    """Host seconds of one MoE layer's eager launches (`_host_launches`)."""

    forward_s: float
    backward_s: float
    post_sync_s: float
    """Forward launches after the token-count synchronization of dropless routing."""
    dgrad_s: float
    """The experts' input-gradient launches of the backward
    (`moe_experts.expert_dgrad_launches`)."""


def _host_launches(
    model: ModelSpec, plan: ParallelPlan, x: LayerShape, options: ExecutionOptions
) -> _HostSeconds:
    """Host seconds of the layer's launches (`moe_host_floor`), less those CUDA graphs
    replay, with a latent MoE layer's projections."""
    python_s, expert_s = options.moe_host_launch_s, options.moe_expert_launch_s
    local = moe_shape(model, plan, x.norm_tokens).local_experts
    fused = options.moe_fused_grouped_mlp
    scopes, disp = options.cuda_graph_scopes, options.moe_dispatcher
    quantized = x.dtype in LOW_PRECISION_GEMM_DTYPES  # NVFP4 experts launch what FP8 ones do
    launches = {
        d: moe_host_launches(
            local, quantized, d, fused_mlp=fused, dispatcher=disp, biased=model.add_bias_linear
        )
        for d in ("forward", "backward")
    }
    eager = {d: n.minus(captured_moe_launches(scopes, n, disp)) for d, n in launches.items()}
    latent = latent_launches(model, quantized, scopes)
    host_f = eager["forward"].host_s(python_s, expert_s)
    host_f += (latent.forward - latent.captured_forward) * python_s
    host_b = eager["backward"].host_s(python_s, expert_s)
    host_b += (latent.backward - latent.captured_backward) * python_s
    after = launches["forward"]
    post_sync = max(after.python - pre_sync_launches(disp), 0) * python_s
    post_sync += after.expert * expert_s + (latent.forward - latent.pre_sync) * python_s
    dgrad_python, dgrad_expert = expert_dgrad_launches(local, quantized, fused=fused)
    return _HostSeconds(
        forward_s=host_f,
        backward_s=host_b,
        post_sync_s=post_sync,
        dgrad_s=dgrad_python * python_s + dgrad_expert * expert_s,
    )
