"""Export of the pipeline split (`specs.pipeline_split`) to Megatron-LM and torchtitan.

Megatron-LM (`validate_args`, megatron-facts.md §8.2-8.3): the even split gives vpp as
`--num-layers-per-virtual-pipeline-stage` = L / (pp·vpp); the account-for flags count the
embedding / loss in that division, ((L + flags) / pp) / vpp; first/last stage counts
cannot be combined with `--num-layers-per-virtual-pipeline-stage`, so vpp is given as
`--num-virtual-stages-per-pipeline-rank`; a layout carries vpp itself (stages / pp) and
takes no other vpp flag.

torchtitan (`torchtitan/config` `Parallelism`): `module_fqns_per_model_part` lists the
modules of every model part in stage order (stage s on rank s % pp for looped schedules,
the same order as Megatron's virtual stages), which expresses any split of the Llama-style
module names ``tok_embeddings``, ``layers.<i>``, ``norm``, ``output``. The even split is
`pipeline_parallel_layers_per_stage` with `pipeline_parallel_first_stage_less_layers` and
`pipeline_parallel_last_stage_less_layers` set to 0 (torchtitan's defaults of 1 would count
the embedding and the output as layers). torchtitan has no multi-token-prediction module.
"""

from __future__ import annotations

from typing import Any

from specs.model import ModelSpec
from specs.pipeline_split import pipeline_split
from specs.pipeline_split_checks import accounted_layers, uses_first_last
from specs.plan import ParallelPlan


def megatron_split_arguments(model: ModelSpec, plan: ParallelPlan) -> list[str]:
    """The vpp and split flags of ``plan`` for Megatron-LM (module docstring)."""
    if plan.pipeline_model_parallel_layout is not None:
        return ["--pipeline-model-parallel-layout", plan.pipeline_model_parallel_layout]
    args: list[str] = []
    if uses_first_last(plan):
        if plan.decoder_first_pipeline_num_layers is not None:
            args += [
                "--decoder-first-pipeline-num-layers",
                str(plan.decoder_first_pipeline_num_layers),
            ]
        if plan.decoder_last_pipeline_num_layers is not None:
            args += [
                "--decoder-last-pipeline-num-layers",
                str(plan.decoder_last_pipeline_num_layers),
            ]
        if plan.vpp > 1:
            args += ["--num-virtual-stages-per-pipeline-rank", str(plan.vpp)]
        return args
    if plan.account_for_embedding_in_pipeline_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if plan.account_for_loss_in_pipeline_split:
        args.append("--account-for-loss-in-pipeline-split")
    if plan.vpp > 1:
        per_chunk = accounted_layers(model, plan) // (plan.pp * plan.vpp)
        args += ["--num-layers-per-virtual-pipeline-stage", str(per_chunk)]
    return args


def model_part_modules(model: ModelSpec, plan: ParallelPlan) -> list[list[str]]:
    """torchtitan `module_fqns_per_model_part`: the modules of every chunk, in virtual
    stage order (MTP layers have no torchtitan module and are left out)."""
    parts = []
    for chunk in pipeline_split(model, plan).in_forward_order():
        modules = ["tok_embeddings"] if chunk.embedding else []
        modules += [f"layers.{i}" for i in chunk.layers]
        if chunk.loss:
            modules += ["norm", "output"]
        parts.append(modules)
    return parts


def torchtitan_split(model: ModelSpec, plan: ParallelPlan) -> tuple[dict[str, Any], list[str]]:
    """(`[parallelism]` split keys, notes on what torchtitan cannot express) for pp > 1."""
    notes = []
    if model.mtp_num_layers:
        notes.append(
            f"torchtitan has no multi-token-prediction module: the {model.mtp_num_layers} "
            "MTP layer(s) of the plan are left out"
        )
    if not plan.has_uneven_split:
        return {
            "pipeline_parallel_layers_per_stage": model.num_layers // (plan.pp * plan.vpp),
            "pipeline_parallel_first_stage_less_layers": 0,
            "pipeline_parallel_last_stage_less_layers": 0,
        }, notes
    notes.append(f"uneven split ({plan.split_label()}) given as module_fqns_per_model_part")
    return {"module_fqns_per_model_part": model_part_modules(model, plan)}, notes


def largest_chunk_layers(model: ModelSpec, plan: ParallelPlan) -> int:
    """Transformer layers of the largest model chunk under the plan's split."""
    return max(c.num_layers for rank in pipeline_split(model, plan).chunks for c in rank)
