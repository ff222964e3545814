"""Activation columns of the closed-form screen (`costmodel.runtimes.megatron.screen`): per
distinct (tp, SP, etp, recompute mode, memory savers) the activation bytes of one sequence
by layer kind, of the MTP depths, the embedding and the output layer, priced by
`costmodel.activations.stage_activations`, which the screen's memory estimate
(`costmodel.runtimes.megatron.screen_memory`) scales by tokens and in-flight microbatches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from costmodel.activation_savers import recomputed_bytes
from costmodel.activation_shard import projection_saves_original_input
from costmodel.activations import stage_activations
from costmodel.bf16_layers import bf16_layer_job, bf16_layer_options, bf16_layers, bf16_tag
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import fp8_attention_recipe
from costmodel.layer_activations import kind_activations
from costmodel.plan_frame import row_plan
from costmodel.runtimes.megatron.screen_parts import priced_kinds
from costmodel.saved_inputs import expert_fc1_saves_input
from costmodel.vocab_activations import output_microbatch_bytes
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def activation_columns(model: ModelSpec, job: TrainingJob, options: ExecutionOptions):
    """Per distinct (tp, SP, etp, recompute mode, memory savers): activation bytes of one
    sequence
    (micro-batch 1, cp 1; every activation term is linear in tokens per rank) under the
    options' attention kernel, dropout and loss; the output part kept per in-flight
    microbatch and the loss's transient part apart (`output_microbatch_bytes`); the kinds of
    the layers kept in bf16 again as a bf16 job stores them, under their `bf16_tag`."""
    kernel, dropout = options.attention, options.hidden_dropout
    mask = model.layer_kinds()
    bf16_tags = {mask[i].tag for i in bf16_layers(model, job, options)}

    def per_kind(ref_job: TrainingJob, plan: ParallelPlan, run: ExecutionOptions):
        """(stage activations, stored bytes per layer by kind tag) of ``ref_job``."""
        acts = stage_activations(
            model,
            ref_job,
            plan,
            0,
            attention=kernel,
            dropout=dropout,
            proj_saves_input=projection_saves_original_input(run.fp8_recipe),
            fp8_attention_recipe=fp8_attention_recipe(run),
            expert_fc1_saves_input=expert_fc1_saves_input(plan, ref_job.precision, run.fp8_recipe),
            cross_entropy=run.cross_entropy_fusion,
        )
        per_layer = (acts.layers_bytes - acts.mtp_bytes) / model.num_layers
        shares = _kind_shares(model, ref_job, plan, run)
        return acts, {tag: per_layer * share for tag, share in shares.items()}

    def fn(row: Mapping[str, Any]) -> dict[str, float]:
        plan = row_plan(row, micro_batch_size=1, cp=1, pp=1, vpp=1, dp=1, schedule="1f1b")
        ref_job = TrainingJob(
            seq_length=job.seq_length,
            global_batch_size=1,
            precision=job.precision,
            lora=job.lora,
            packed_document_tokens=job.packed_document_tokens,
        )
        acts, stored = per_kind(ref_job, plan, options)
        kept, transient = output_microbatch_bytes(
            model, ref_job, plan, options.cross_entropy_fusion
        )
        stored16: dict[str, float] = {}
        if bf16_tags:
            _, stored16 = per_kind(bf16_layer_job(ref_job), plan, bf16_layer_options(options))
        return {
            **{f"act_{tag}": value for tag, value in stored.items()},
            **{f"act_{bf16_tag(tag)}": stored16[tag] for tag in sorted(bf16_tags)},
            "act_mtp": acts.mtp_bytes / max(model.mtp_num_layers, 1),
            "act_work": acts.recompute_working_bytes,
            "act_emb": acts.embedding_bytes,
            "act_out": kept,
            "act_out_once": transient,
        }

    return fn


def _kind_shares(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, options: ExecutionOptions
) -> dict[str, float]:
    """Each layer kind's stored activation bytes over the mean of the model's layers, by
    kind tag: a layer's full saved tensors without recompute, less what the selective
    modules free with selective recompute (`costmodel.activation_savers.recomputed_bytes`);
    1 for every kind under full recompute, whose checkpoints are layer inputs of one size."""
    kinds = model.layer_kinds()
    if plan.recompute == "full":
        return {kind.tag: 1.0 for kind in priced_kinds(model)}
    stored: dict[str, float] = {}
    for kind in priced_kinds(model):
        layer = kind_activations(
            model,
            job,
            plan,
            kind,
            attention=options.attention,
            dropout=options.hidden_dropout,
            proj_saves_input=projection_saves_original_input(options.fp8_recipe),
            fp8_attention_recipe=fp8_attention_recipe(options),
            expert_fc1_saves_input=expert_fc1_saves_input(plan, job.precision, options.fp8_recipe),
        )
        freed = 0.0
        if plan.recompute == "selective":
            freed = recomputed_bytes(layer.tensors, plan.selective_modules)
        stored[kind.tag] = layer.full_bytes - freed
    mean = sum(stored[kind.tag] for kind in kinds) / len(kinds)
    return {tag: value / mean if mean > 0 else 1.0 for tag, value in stored.items()}
