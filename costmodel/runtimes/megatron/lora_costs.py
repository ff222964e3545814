"""Per-microbatch costs of a LoRA job's adapters on one rank (`adapter_costs`): the GEMMs of
each target's A and B, the scaling and add of the adapter output, and the adapters'
tensor-parallel collectives. The frozen base layers are priced by their blocks without
weight-gradient GEMMs (`costmodel.runtimes.megatron.attention_costs`, `mlp_costs`,
`vocab_costs`).

Sources: Megatron-Bridge v0.5.0 ``src/megatron/bridge/peft/lora_layers.py``
(``LoRALinear.forward``: the base output plus the adapter's), ``peft/utils.py``
(``ParallelLinearAdapter``, ``get_adapter_attributes_from_linear``); Megatron-core d0b3b775
(the Megatron-LM of Bridge v0.5.0) ``tensor_parallel/layers.py`` and ``mappings.py``.

Each layer prices the adapters of the targets it holds (`specs.finetune.layer_targets`: a
transformer layer its four, a hybrid model's ``*`` layer QKV and output projection, ``-``
layer FC1 and FC2, ``M`` layer the Mamba-2 mixer's in_proj, column-parallel and fed the
returned norm output like QKV, and out_proj, row-parallel like the output projection).

Per target, base W: in -> out (`specs.finetune.lora_target_features`), rank r, tp ranks,
T = b·s/cp tokens; every adapter sees the whole sequence (with SP a column-parallel base
returns its norm output gathered, ``return_layernorm_output_gathered``, and a row-parallel
base's input is the whole sequence):

- GEMMs, 16-bit (Megatron-core's own ``ColumnParallelLinear``/``RowParallelLinear``, plain
  ``torch.matmul`` outside Transformer Engine's FP8 and FP4 autocast), each forward, dgrad
  and wgrad (`layer_shape.gemm3`): column-parallel base, A (T x in) @ (in x r/tp) and B
  (T x r) @ (r x out/tp); row-parallel base, A (T x in/tp) @ (in/tp x r), B the same.
- Element-wise: the adapter output times alpha/r (read and write) and its add to the base
  output (read 2, write 1) forward, the gradient times alpha/r backward, over the base
  output's elements on the rank: T·out/tp (column), T·out, /tp with SP (row).
- TP collectives (tp > 1), exposed (Megatron-core's mapping functions on the compute
  stream): column-parallel base, forward all-gather of A's output (``gather_output``),
  backward all-reduce of B's input gradient (``allreduce_dgrad``) and, without SP, of A's
  input gradient (T·in; with SP ``disable_grad_reduce`` leaves it to TE); with SP and TP
  overlap Bridge leaves ``return_layernorm_output_gathered`` unset (the base reports
  ``ub_overlap_ag_fprop``), so the adapter gathers its input itself through NCCL (forward
  all-gather, backward reduce-scatter, T·in); the base layer, which returns its norm
  output, gathers through NCCL as well (TE turns its userbuffers all-gather off:
  `costmodel.runtimes.megatron.linear_pairs.tp_pair` ``norm_returned``). Row-parallel base, forward
  all-reduce of A's output and all-gather of B's (``gather_output``, T·out), backward
  all-reduce of B's input gradient and, with SP, the all-gather of the output gradient
  (the backward of ``scatter_to_sequence_parallel_region``, T·out). A's output and B's input
  are T·r.

Not modelled (each below one layer's adapters): the first layer's skipped input gradients
(the frozen embedding's output needs none), and Bridge's fused ``TEFusedLoRALinear`` (only
with ``use_transformer_engine_op_fuser``, off by default).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel import compute as ops
from costmodel.collectives import collective_time_s
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3
from profiles.schema import HardwareProfile
from specs.finetune import layer_targets, lora_target_features
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER, LayerKind
from specs.model import ModelSpec
from specs.plan import ParallelPlan

MLP_TARGETS = frozenset({"linear_fc1", "linear_fc2"})
"""Targets inside the MLP block, rerun with it by selective recompute's ``mlp`` module."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoraCosts:
    """One layer's adapters, one microbatch, one rank."""

    forward: PassCost
    """Every adapter's forward."""
    backward: PassCost
    """Every adapter's backward (dgrad, wgrad, element-wise, collectives)."""
    mlp_forward: PassCost
    """The forward of the FC1 and FC2 adapters (part of ``forward``)."""
    dgrad_s: float
    """Input-gradient GEMMs and backward element-wise ops (part of backward.compute_s)."""
    wgrad_s: float
    """Weight-gradient GEMMs (part of backward.compute_s)."""


NO_ADAPTERS = LoraCosts(forward=ZERO, backward=ZERO, mlp_forward=ZERO, dgrad_s=0.0, wgrad_s=0.0)
"""The adapters of a job without LoRA."""


def adapter_costs(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    groups: CommGroups,
    kind: LayerKind = DENSE_LAYER,
) -> LoraCosts:
    """The `LoraCosts` of the adapters of one layer of ``kind`` (module docstring);
    `NO_ADAPTERS` without LoRA or when the layer holds none of the targets."""
    lora = job.lora
    targets = layer_targets(lora, kind)
    if lora is None or not targets:
        return NO_ADAPTERS
    x16 = replace(x, dtype=ops.activation_dtype(job.precision))
    forward = backward = mlp = ZERO
    dgrad = wgrad = 0.0
    for target in targets:
        fwd, bwd, d, w = _target_costs(model, plan, profile, x16, groups, lora.rank, target)
        forward, backward = forward.plus(fwd), backward.plus(bwd)
        dgrad, wgrad = dgrad + d, wgrad + w
        if target in MLP_TARGETS:
            mlp = mlp.plus(fwd)
    return LoraCosts(
        forward=forward, backward=backward, mlp_forward=mlp, dgrad_s=dgrad, wgrad_s=wgrad
    )


def _target_costs(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    groups: CommGroups,
    rank: int,
    target: str,
) -> tuple[PassCost, PassCost, float, float]:
    """(forward, backward, dgrad_s, wgrad_s) of the adapter of ``target``."""
    fan_in, fan_out, column = lora_target_features(model, target)
    t, n = x.tp, x.tokens
    if column:
        first, out_elements = gemm3(profile, x, n, rank / t, fan_in), n * fan_out / t
    else:
        first, out_elements = gemm3(profile, x, n, rank, fan_in / t), x.norm_tokens * fan_out
    second = gemm3(profile, x, n, fan_out / t, rank)
    scale_s = ops.memory_bound_time_s(profile, 2 * x.elem * out_elements)
    add_s = ops.memory_bound_time_s(profile, 3 * x.elem * out_elements)
    comm_f, comm_b = _adapter_tp(plan, profile, x, groups, rank, fan_in, fan_out, column)
    dgrad = first[1] + second[1] + scale_s
    wgrad = first[2] + second[2]
    forward = PassCost(compute_s=first[0] + second[0] + scale_s + add_s).plus(comm_f)
    return forward, PassCost(compute_s=dgrad + wgrad).plus(comm_b), dgrad, wgrad


def _adapter_tp(
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    groups: CommGroups,
    rank: int,
    fan_in: int,
    fan_out: int,
    column: bool,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) TP collectives of one adapter (module docstring)."""
    if x.tp < 2:
        return ZERO, ZERO

    def op(name: str, elements: float) -> PassCost:
        size = x.elem * elements
        seconds = collective_time_s(profile, name, size, groups.tp)
        return PassCost(tp_s=seconds, tp_exposed_s=seconds, tp_bytes=size)

    low = x.tokens * rank
    if column:
        forward, backward = op("all_gather", low), op("all_reduce", low)
        if not x.sp:
            backward = backward.plus(op("all_reduce", x.tokens * fan_in))
        elif plan.tp_comm_overlap:
            forward = forward.plus(op("all_gather", x.tokens * fan_in))
            backward = backward.plus(op("reduce_scatter", x.tokens * fan_in))
        return forward, backward
    forward = op("all_reduce", low).plus(op("all_gather", x.tokens * fan_out))
    backward = op("all_reduce", low)
    if x.sp:
        backward = backward.plus(op("all_gather", x.tokens * fan_out))
    return forward, backward
