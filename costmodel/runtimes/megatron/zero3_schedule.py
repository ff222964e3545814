"""DeepSpeed's ZeRO stage-3 engine of 2021 (`ExecutionOptions.param_gather_engine`
``deepspeed_zero3``): what its parameter-gather schedule changes in the Megatron-FSDP
``optim_grads_params`` pricing (`costmodel.runtimes.megatron.megatron_fsdp`).

Source: microsoft/DeepSpeed, tags v0.3.13 to v0.5.x (``deepspeed/runtime/zero/stage3.py``,
``partition_parameters.py``, ``constants.py``; quoted at v0.3.16, 2021-04). Both shard the
fp16 weights, the fp16 gradients and the fp32 master weights with Adam's moments over the
data-parallel group (Rajbhandari et al. 2020, arXiv 1910.02054, §5.3: P_os+g+p), so these
are priced as Megatron-FSDP prices them:

- the fp32 master weights and Adam moments on the 1/DP shard, stepped there
  (``_create_fp32_partitions``; the step makes an fp32 copy of the shard's gradients,
  ``_prepare_fp32_grad_for_sub_group``, `ExecutionOptions.step_gradient_copy`);
- the gradients reduce-scattered in fp16 (``allreduce_always_fp32`` False) in every
  backward, on a reduction stream that overlaps the backward (``overlap_comm``, True by
  default for stage 3: ``ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT``), per parameter
  (``_reduce_scatter_gradients``), as the per-layer reduce-scatters of
  `costmodel.runtimes.megatron.grad_reduction` (`ExecutionOptions.main_grad_bytes` 2);
- each gather is a flat fp16 all-gather of the module's shards over the data-parallel
  group (``_allgather_params``: ``torch.distributed.all_gather`` of ``param.dtype``), 2
  bytes per parameter, prefetched while the previous module computes
  (``prefetch_next_sub_modules``, called after ``fetch_sub_module`` in every pre-forward
  and pre-backward hook), so a pass exposes its first gather and whatever the gathers take
  beyond the compute (`costmodel.runtimes.megatron.megatron_fsdp.fsdp_param_gather_exposed_s`).

What differs, and is priced here:

- **Gathers in the recompute forward.** Hooks are registered on every submodule
  (``_register_hooks_recursively``), and the recompute forward of activation checkpointing
  runs the modules' forward again, so their pre-forward hooks gather the parameters again
  (``pre_sub_module_forward_function`` -> ``fetch_sub_module``). After that forward a
  module is released unless its next use lies within ``stage3_max_reuse_distance``
  parameters (``release_sub_module`` -> ``_keep_for_later``: the parameters of the modules
  traced between the two uses, ``get_reuse_distance_in_numel``). Under full recompute the
  next use is the module's own backward, after the recompute forward and the backward of
  every later module of its layer: twice the layer's parameters after it. A module released
  there is gathered a third time by its pre-backward hook (``pre_sub_module_backward_
  function``). Megatron-FSDP's pricing counts one gather per backward pass;
  `backward_gather_sweeps` counts DeepSpeed's.
- **The working set.** The unit is the module holding parameters (a linear layer), not the
  transformer layer: the one computing and the one prefetched are resident
  (`gathered_layers`), against Megatron-FSDP's two whole layers (``GATHERED_LAYERS``).
- **No resident non-layer modules.** The word embedding and the output layer are gathered
  and released like every module, so nothing is held whole outside the working set.

Priced for dense decoders of standard attention (the models DeepSpeed's 2021 Megatron
examples ran); `zero3_layer_modules` refuses the others. Every fetch that waits for a
gather also calls ``torch.cuda.synchronize()`` (``_synchronize_communication``), a host
wait per module that is not priced (a launch latency per linear layer pass).
"""

from __future__ import annotations

from itertools import pairwise

from specs.errors import SpecError
from specs.model import ModelSpec
from specs.params import count_params
from specs.plan import ParallelPlan

ZERO3_MAX_REUSE_DISTANCE_PARAMS = 1_000_000_000
"""``stage3_max_reuse_distance``'s default, in parameters
(``ZERO_OPTIMIZATION_MAX_REUSE_DISTANCE_DEFAULT = 1000000000``,
``deepspeed/runtime/zero/constants.py``, v0.3.13 to v0.5.x): a module whose next use is
this many parameters away or more is released after use (``_keep_for_later``)."""


def zero3_layer_modules(model: ModelSpec, plan: ParallelPlan) -> tuple[float, float, float, float]:
    """Parameters of one decoder layer's modules that hold weights, as one rank holds them
    (over tp), in forward order: the QKV projection, the attention output projection, FC1
    and FC2 (biases with their weights; the layer norms fall under
    ``stage3_param_persistence_threshold``, 1e5 parameters, and are never released). The
    attention's parameters split as (heads + 2 key/value groups) to heads, the MLP's as
    FC1 (two matrices when gated) to FC2. `SpecError` for a model that is not a dense
    decoder of standard attention."""
    if model.is_moe or model.is_hybrid or model.uses_mla:
        raise SpecError(
            f"param_gather_engine 'deepspeed_zero3' prices dense decoders of standard "
            f"attention only; {model.name} has experts, a hybrid pattern or latent attention: "
            "use param_gather_engine='megatron_fsdp'"
        )
    layer = count_params(model).layers[0]
    heads = model.num_attention_heads
    groups = model.num_query_groups or heads
    qkv = layer.attention * (heads + 2 * groups) / (2 * heads + 2 * groups)
    fc1_share = 2.0 / 3.0 if model.activation == "swiglu" else 0.5
    fc1 = layer.mlp * fc1_share
    return (
        qkv / plan.tp,
        (layer.attention - qkv) / plan.tp,
        fc1 / plan.tp,
        (layer.mlp - fc1) / plan.tp,
    )


def backward_regather_share(model: ModelSpec, plan: ParallelPlan) -> float:
    """Share of a layer's gathered parameters that the pre-backward hook gathers again after
    full recompute's forward has gathered them (module docstring): the modules whose reuse
    distance, twice the parameters of the layer's later modules, is at least
    `ZERO3_MAX_REUSE_DISTANCE_PARAMS`. 0 without full recompute (no recompute forward)."""
    if plan.recompute != "full":
        return 0.0
    modules = zero3_layer_modules(model, plan)
    released = sum(
        params
        for i, params in enumerate(modules)
        if 2 * sum(modules[i + 1 :]) >= ZERO3_MAX_REUSE_DISTANCE_PARAMS
    )
    return released / sum(modules)


def backward_gather_sweeps(model: ModelSpec, plan: ParallelPlan) -> float:
    """Gathers of a chunk's parameters per backward pass, in units of the whole chunk: 1
    (the pre-backward hooks); under full recompute the recompute forward gathers the whole
    chunk and the pre-backward hooks only what it released (`backward_regather_share`):
    1 + share."""
    if plan.recompute != "full":
        return 1.0
    return 1.0 + backward_regather_share(model, plan)


def gathered_layers(model: ModelSpec, plan: ParallelPlan) -> float:
    """Full parameters (and gradients) resident at once, in units of the largest layer:
    the largest two modules adjacent in the gather order (forward, recompute forward and
    backward visit them in the orders QKV, proj, FC1, FC2 and back, and FC2 of one layer
    meets QKV of the next), over the layer's parameters."""
    modules = zero3_layer_modules(model, plan)
    cyclic = (*modules, modules[0])
    pair = max(a + b for a, b in pairwise(cyclic))
    return pair / sum(modules)
