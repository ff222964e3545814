"""Priced columns of the closed-form screen (`costmodel.runtimes.megatron.screen`): per
distinct layer shape the layer costs from `costmodel.runtimes.megatron.layer_costs` and the
embedding and output costs from `costmodel.runtimes.megatron.vocab_costs`; per distinct
degrees the (latency, seconds per byte) pairs of the gradient, parameter and pipeline
groups (collective times are affine in bytes for a fixed group placement, each group the
slowest instance of its axes, `costmodel.topology.ClusterShape.place`); per distinct
pipeline split the stages' layers and parameters. The per-microbatch activation columns of
the memory estimate are `costmodel.runtimes.megatron.screen_activations`'s."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from costmodel.bf16_layers import (
    bf16_layer_job,
    bf16_layer_options,
    bf16_layers,
    bf16_linear_params,
    bf16_tag,
)
from costmodel.collectives import collective_time_s, p2p_time_s
from costmodel.execution import ExecutionOptions
from costmodel.passes import CommGroups
from costmodel.plan_frame import SPLIT_COLUMNS, per_distinct_row, row_plan
from costmodel.rank_params import (
    non_unit_params,
    stage_layer_indices,
    stage_lora_adapters,
    stage_outside_tensors,
    stage_params,
    stage_weight_layers,
)
from costmodel.runtimes.megatron.layer_costs import (
    LayerPasses,
    layer_cost_from_passes,
    layer_passes,
)
from costmodel.runtimes.megatron.megatron_fsdp import (
    largest_layer_params,
    largest_layer_weight_bytes,
)
from costmodel.runtimes.megatron.mtp_costs import mtp_depth_cost
from costmodel.runtimes.megatron.vocab_costs import embedding_cost, logits_cost
from costmodel.schedules import plan_split
from costmodel.topology import ClusterShape, end_stages_pair, pipeline_hops
from profiles.schema import HardwareProfile
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.params import count_params, padded_vocab_size
from specs.pipeline_split_checks import split_problem
from specs.plan import ParallelPlan

SAVER_KEY = ["recompute_modules", "cpu_offloading_num_layers", "offload_modules"]
"""The memory savers a layer's selective rerun, its activations and its offload copies
depend on (`costmodel.runtimes.megatron.saver_costs`, `costmodel.activation_savers`)."""
_LAYER_KEY = [
    "tp",
    "cp",
    "micro_batch_size",
    "sequence_parallel",
    "ep",
    "etp",
    "tp_comm_overlap",
    "cp_comm_type",
    *SAVER_KEY,
]


def _groups(row: Mapping[str, Any], shape: ClusterShape) -> CommGroups:
    """The layer groups of a row's degrees, each its slowest instance
    (`costmodel.topology.ClusterShape.place`, as `costmodel.topology.plan_placements`)."""

    def place(axes: str, size: int, stride: int):
        return shape.place(int(size), int(stride), axes)

    tp, etp = int(row["tp"]), int(row["etp"])
    return CommGroups(
        tp=place("tp", tp, 1),
        cp=place("cp", row["cp"], tp),
        ep=place("ep", row["ep"], etp),
        etp=place("etp", etp, 1),
    )


def _layer_columns(
    model: ModelSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    topo: ClusterShape,
    options: ExecutionOptions,
):
    """Per distinct layer shape: microbatch durations of dense/MoE layers, the embedding,
    the output layer and an MTP depth's work outside its layers (``depth_*``,
    `costmodel.runtimes.megatron.mtp_costs.mtp_depth_cost`; ``depth_r`` and ``depth_rc``
    what full recompute reruns of it), with compute and exposed communication kept apart;
    the kinds of the layers kept in bf16 again as a bf16 job's, under their `bf16_tag`. The
    dense layer, the embedding, the output layer and the MTP depth's work do not depend on
    ep and etp: they are priced once per distinct (tp, cp, micro-batch, SP, TP overlap, CP
    exchange, memory savers) of one call."""
    mask = model.layer_kinds()
    priced = [(kind, False) for kind in sorted(priced_kinds(model))]
    priced += [(kind, True) for kind in sorted({mask[i] for i in bf16_layers(model, job, options)})]
    dense_parts: dict[tuple, dict[str, float]] = {}
    passes: dict[tuple, LayerPasses] = {}
    as_bf16 = (bf16_layer_job(job), bf16_layer_options(options))

    def layer(
        plan: ParallelPlan, groups: CommGroups, kind: LayerKind, bf16: bool
    ) -> dict[str, float]:
        key = (kind, bf16, *(getattr(plan, k) for k in _LAYER_KEY if k != "recompute_modules"))
        run_job, run_options = as_bf16 if bf16 else (job, options)
        if key not in passes:
            passes[key] = layer_passes(
                model, run_job, plan, profile, kind=kind, groups=groups, options=run_options
            )
        cost = layer_cost_from_passes(
            model, run_job, plan, profile, passes[key], kind=kind, options=run_options
        )
        tag = bf16_tag(kind.tag) if bf16 else kind.tag
        out: dict[str, float] = {}
        for name, p in (("f", cost.forward), ("b", cost.backward), ("r", cost.recompute)):
            out[f"{name}_{tag}"] = p.duration_s
            out[f"{name}c_{tag}"] = p.compute_s
        return out

    def dense(plan: ParallelPlan, groups: CommGroups) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, bf16 in priced:
            if not kind.is_moe:
                out.update(layer(plan, groups, kind, bf16))
        for name, (fwd, bwd) in (
            ("emb", embedding_cost(model, job, plan, profile, groups, options)),
            ("log", logits_cost(model, job, plan, profile, groups, options)),
        ):
            out[f"{name}_f"], out[f"{name}_b"] = fwd.duration_s, bwd.duration_s
            out[f"{name}_c"] = fwd.compute_s + bwd.compute_s
        depth = mtp_depth_cost(model, job, plan, profile, groups, options)
        out["depth_f"], out["depth_b"] = depth.forward.duration_s, depth.backward.duration_s
        out["depth_c"] = depth.forward.compute_s + depth.backward.compute_s
        out["depth_r"] = depth.projection_forward.duration_s
        out["depth_rc"] = depth.projection_forward.compute_s
        return out

    placed: dict[tuple, CommGroups] = {}

    def fn(row: Mapping[str, Any]) -> dict[str, float]:
        plan = row_plan(row, recompute="selective")
        degrees = tuple(row[k] for k in ("tp", "cp", "ep", "etp"))
        if degrees not in placed:
            placed[degrees] = _groups(row, topo)
        groups = placed[degrees]
        key = tuple(row[k] for k in _LAYER_KEY if k not in ("ep", "etp"))
        if key not in dense_parts:
            dense_parts[key] = dense(plan, groups)
        out = dict(dense_parts[key])
        for kind, bf16 in priced:
            if kind.is_moe:
                out.update(layer(plan, groups, kind, bf16))
        return out

    return fn


def _linear_cost(profile: HardwareProfile, op: str, group) -> tuple[float, float]:
    """(latency, seconds per byte) of ``op`` over ``group``: collective times are affine in
    bytes for a fixed group (`costmodel.collectives`)."""
    if group.size < 2:
        return 0.0, 0.0
    one, two = (collective_time_s(profile, op, size, group) for size in (1e9, 2e9))
    per_byte = (two - one) / 1e9
    return one - per_byte * 1e9, per_byte


def affine_s(a: np.ndarray, b: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Seconds of a collective of ``size`` bytes per row from its group's (latency ``a``,
    seconds per byte ``b``) pair; 0 where nothing is moved."""
    return np.where(size > 0, a + b * size, 0.0)


def _group_columns(profile: HardwareProfile, topo: ClusterShape):
    """Per distinct degrees: affine costs of the gradient, parameter and pipeline groups,
    each its slowest instance (`costmodel.topology.ClusterShape.place`); the pipeline sends
    at the first boundary's slowest hop (`costmodel.topology.pipeline_hops`)."""

    def fn(row: Mapping[str, Any]) -> dict[str, float]:
        tp, cp, dp, pp, ep, etp = (int(row[k]) for k in ("tp", "cp", "dp", "pp", "ep", "etp"))
        world = tp * cp * dp * pp
        edp = max(world // (etp * ep * pp), 1)
        place = topo.place
        grads = "reduce_scatter" if row["grads_sharded"] else "all_reduce"
        dense, expert, tpg = place(cp * dp, tp), place(edp, etp * ep), place(tp, 1)
        stride = tp * cp * dp
        intra = pipeline_hops(pp, stride, topo.scale_up_domain)[0]
        out = {"edp": edp, "pp_intra": intra}
        for tag, op, group in (
            ("g", grads, dense),
            ("ge", grads, expert),
            ("ag", "all_gather", dense),
            ("age", "all_gather", expert),
            ("norm", "all_reduce", tpg),
            ("tpag", "all_gather", tpg),
        ):
            out[f"{tag}_a"], out[f"{tag}_b"] = _linear_cost(profile, op, group)
        if pp == 1:
            # one stage holds both embeddings and sends nothing: no tie all-reduce, no P2P
            out.update(tie_a=0.0, tie_b=0.0, send_a=0.0, send_b=0.0)
            return out
        pair = end_stages_pair(place(pp, stride))
        out["tie_a"], out["tie_b"] = _linear_cost(profile, "all_reduce", pair)
        one, two = (p2p_time_s(profile, size, intra=intra) for size in (1e9, 2e9))
        out["send_b"] = (two - one) / 1e9
        out["send_a"] = one - out["send_b"] * 1e9
        return out

    return fn


def _split_stages(
    model: ModelSpec, plan: ParallelPlan, bf16: frozenset[int] = frozenset()
) -> dict[str, int]:
    """The stages the screen prices (0, the heaviest middle stage, p-1) and, for each, its
    layers of every kind of the model that it computes (``n{stage}{kind tag}``,
    `specs.layer_kinds.LayerKind.tag`; each MTP depth's layers by their kinds,
    `ModelSpec.mtp_depth_kinds`), those whose activations the screen's chunks hold
    (``a{stage}{kind tag}``: the MTP depths left to ``act_mtp``, on the last chunk only),
    its layers that hold weights (``n{stage}``, the MTP weight sets' layers included,
    `costmodel.rank_params.stage_weight_layers`), its parameter tensors outside them
    (``o{stage}``, `costmodel.rank_params.stage_outside_tensors`) and its MTP depths
    (``mtp{stage}``), from the plan's pipeline split (`specs.pipeline_split`). The heaviest
    middle stage has the most MoE layers, then the most layers, then the earliest position
    (more microbatches in flight):
    with leading dense layers, a stage with as many layers but some dense ones holds fewer
    parameters and runs faster. The layers of ``bf16`` (`costmodel.bf16_layers.bf16_layers`)
    count under their kind's `bf16_tag` instead."""
    split = plan_split(model, plan)
    kinds = model.layer_kinds()
    depth_kinds = model.mtp_depth_kinds()
    tags = sorted({kind.tag for kind in kinds + depth_kinds})
    tags += sorted({bf16_tag(kinds[i].tag) for i in bf16})
    middle = range(1, plan.pp - 1)

    def weight(stage: int) -> tuple[int, int]:
        layers = split.rank_layers(stage)
        return sum(kinds[i].is_moe for i in layers), len(layers)

    mid = max(middle, key=weight) if len(middle) else min(1, plan.pp - 1)
    out: dict[str, int] = {"s1": mid}
    for tag, stage in (("0", 0), ("1", mid), ("l", plan.pp - 1)):
        layers = split.rank_layers(stage)
        mtp = split.rank_mtp_layers(stage)
        counts = Counter(bf16_tag(kinds[i].tag) if i in bf16 else kinds[i].tag for i in layers)
        saved = Counter(counts)  # the MTP depths save apart (``act_mtp``)
        for kind in depth_kinds:
            counts[kind.tag] += mtp
        for kind_tag in tags:
            out[f"n{tag}{kind_tag}"] = counts[kind_tag]
            out[f"a{tag}{kind_tag}"] = saved[kind_tag]
        out[f"n{tag}"] = stage_weight_layers(model, plan, stage)
        out[f"o{tag}"] = stage_outside_tensors(model, plan, stage)
        out[f"mtp{tag}"] = mtp
    return out


def _param_columns(
    model: ModelSpec, lora: LoraSpec | None = None, bf16: frozenset[int] = frozenset()
):
    """Per distinct (tp, ep, etp and the split): the split's stages and their layers, and
    the parameters of stages 0, middle and p-1: ``p{tag}d``, ``p{tag}e`` and ``p{tag}l``
    the trained dense, expert and linear-layer parameters, ``p{tag}f`` and ``p{tag}fl`` the
    frozen ones and their linear layers' (a LoRA job's base;
    `costmodel.rank_params.StageParams`), ``p{tag}l16`` and ``p{tag}e16`` the linear-layer
    and expert parameters of the layers of ``bf16`` among them
    (`costmodel.bf16_layers.bf16_linear_params`), ``ad{tag}`` a LoRA job's adapters on the
    stage (`costmodel.rank_params.stage_lora_adapters`; 0 without LoRA), ``emb_params`` and
    ``norm_params`` the trained embedding and norm parameters whose gradients the finalize
    step all-reduces (none for a LoRA job)."""
    counts = count_params(model)
    norms = [  # gradients all-reduced over tp under SP (`stage_tail._stage_norm_params`)
        layer.norms + layer.indexer + layer.latent_down_projections for layer in counts.layers
    ]
    trained_base = 0.0 if lora is not None else 1.0

    def fn(row: Mapping[str, Any]) -> dict[str, float]:
        plan = row_plan(row)
        out: dict[str, float] = {"split_ok": split_problem(model, plan) is None}
        if not out["split_ok"]:  # no valid split: the row is marked invalid
            plan = plan.replace(
                pp=1,
                vpp=1,
                schedule="1f1b",
                decoder_first_pipeline_num_layers=None,
                decoder_last_pipeline_num_layers=None,
                account_for_embedding_in_pipeline_split=False,
                account_for_loss_in_pipeline_split=False,
                pipeline_model_parallel_layout=None,
            )
        stages = _split_stages(model, plan, bf16)
        out.update(stages)
        for tag, stage in (("0", 0), ("1", stages["s1"]), ("l", plan.pp - 1)):
            params = stage_params(model, plan, stage, lora)
            kept = bf16_linear_params(model, plan, stage_layer_indices(model, plan, stage), bf16)
            trained = lora is None  # a LoRA job's bf16 layers are frozen base weights
            out[f"p{tag}l16"] = kept.linear if trained else 0.0
            out[f"p{tag}e16"] = kept.expert if trained else 0.0
            out[f"p{tag}d"], out[f"p{tag}e"] = params.trained_dense, params.trained_expert
            out[f"p{tag}l"] = params.trained_linear
            out[f"p{tag}f"], out[f"p{tag}fl"] = params.frozen_base, params.frozen_linear
            out[f"p{tag}fl"] -= 0.0 if trained else kept.linear
            out[f"p{tag}u"] = non_unit_params(model, plan, stage)
            adapters = 0 if lora is None else stage_lora_adapters(model, plan, stage, lora)
            out[f"ad{tag}"] = adapters
        out["layer_max"] = largest_layer_params(model, plan)
        out["layer_lin"] = largest_layer_weight_bytes(model, plan, 0.0, 1.0)
        out["layer_other"] = largest_layer_weight_bytes(model, plan, 1.0, 0.0)
        vocab = padded_vocab_size(model.vocab_size, plan.tp)
        position = counts.embedding - model.vocab_size * model.hidden_size
        out["emb_params"] = trained_base * (vocab * model.hidden_size / plan.tp + position)
        out["norm_params"] = trained_base * (sum(norms) / plan.pp + counts.final_norm)
        return out

    return fn


def priced_parts(
    model: ModelSpec,
    job: TrainingJob,
    profile: HardwareProfile,
    df: pd.DataFrame,
    topo: ClusterShape,
    options: ExecutionOptions,
) -> list[pd.DataFrame]:
    """The priced columns that `closed_form_screen` and `pipeline_lower_bound_s` both read,
    aligned to the rows of ``df`` (normalized, with its sharding columns): per distinct
    layer shape the layer, embedding and output costs (`_layer_columns`), per distinct
    degrees the affine costs of the gradient, parameter and pipeline groups
    (`_group_columns`), and per distinct split the stages' layers and parameters
    (`_param_columns`)."""
    return [
        per_distinct_row(df, _LAYER_KEY, _layer_columns(model, job, profile, topo, options)),
        per_distinct_row(
            df,
            ["tp", "cp", "dp", "pp", "ep", "etp", "grads_sharded"],
            _group_columns(profile, topo),
        ),
        per_distinct_row(
            df,
            ["tp", "ep", "etp", *SPLIT_COLUMNS],
            _param_columns(model, job.lora, bf16_layers(model, job, options)),
        ),
    ]


def priced_kinds(model: ModelSpec) -> set[LayerKind]:
    """The layer kinds the screen prices: the decoder's and its MTP depths'."""
    return set(model.layer_kinds()) | set(model.mtp_depth_kinds())
