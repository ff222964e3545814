"""Export of a `PlanBundle` to torchtitan: its job config (`torchtitan_config`) and that
config as a TOML file (`torchtitan_toml`); the Megatron-LM export and the choice of target
are `planner.export`.

torchtitan (keys of `torchtitan/config/job_config.py` and its integration-test
`base_config.toml`): `[parallelism]` data_parallel_replicate_degree,
data_parallel_shard_degree, tensor_parallel_degree, pipeline_parallel_degree,
pipeline_parallel_schedule, pipeline_parallel_layers_per_stage,
pipeline_parallel_microbatch_size, context_parallel_degree, expert_parallel_degree,
expert_tensor_parallel_degree; `[training]` local_batch_size, global_batch_size, seq_len;
`[activation_checkpoint]` mode, selective_ac_option. torchtitan has no DDP-with-sharded-
optimizer mode: the distributed optimizer maps onto FSDP (data_parallel_shard_degree = dp),
and the TOML header and `paraplan export` state that difference
(`torchtitan_sharding_note`); plain data parallelism maps onto DDP
(data_parallel_replicate_degree = dp); TP in torchtitan
always shards norms along the sequence (Megatron's sequence parallelism). Execution
options: FP8 keys of ``[quantize.linear.float8]``, the rest refused
(`torchtitan_option_config`, by the field groups of `planner.export_fields`). The model's
torchtitan name and flavor, its router and the models torchtitan has none of:
`planner.export_torchtitan_model`.
"""

from __future__ import annotations

from typing import Any

from costmodel.execution import ExecutionOptions
from planner.export_fields import FP8_FIELDS, PRICING_FIELDS
from planner.export_options import bundle_options, changed_fields, refusal, refused
from planner.export_segment import segment_header
from planner.export_split import largest_chunk_layers, torchtitan_split
from planner.export_torchtitan_model import torchtitan_model, torchtitan_router_note
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.kv_sharding import executor_kv_refusal
from specs.model import ModelSpec
from specs.plan import ParallelPlan

TORCHTITAN_PACKED_RULE = "torchtitan_packed_sequences"
"""Rule id of the torchtitan export's refusal of packed sequences (`torchtitan_config`)."""


def _activation_checkpoint(model: ModelSpec, plan: ParallelPlan) -> dict[str, Any]:
    """`[activation_checkpoint]`: torchtitan's selective mode is per-op ("op") or every
    n-th layer (an integer); partial full recompute (block) maps onto the latter."""
    if plan.recompute == "none":
        return {"mode": "none"}
    if plan.recompute == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    chunk = largest_chunk_layers(model, plan)
    if plan.recompute_method == "block" and (plan.recompute_num_layers or chunk) < chunk:
        every = max(1, round(chunk / (plan.recompute_num_layers or chunk)))
        return {"mode": "selective", "selective_ac_option": str(every)}
    return {"mode": "full"}


TORCHTITAN_MUON_REFUSAL = (
    "the plan was priced with Megatron-core's Muon (Newton-Schulz on each tensor-parallel "
    "shard, layer-wise sharding over dp*cp, `costmodel.optimizer_muon`); torchtitan's "
    "optimizers are Adam and AdamW, plus, where present, the experimental Muon of "
    "torchtitan/experiments/dion_optimizer, another implementation: export --to megatron, or "
    "re-plan with --optimizer adam"
)
"""Why `torchtitan_config` refuses a job whose optimizer is Muon."""

TORCHTITAN_NVFP4_RULE = "torchtitan_has_no_nvfp4"
"""Rule id of `torchtitan_config`'s refusal of nvfp4 jobs."""

TORCHTITAN_NVFP4_REFUSAL = (
    "torchtitan trains low-precision linears through torchao's float8 and MX converters "
    "(quantize.linear.float8, quantize.linear.mx with MXLinearConfig recipes); neither runs "
    "Transformer Engine's NVFP4 recipe (E2M1 with 16-element E4M3 scales, Random Hadamard "
    "Transform on the wgrad operands, stochastic rounding of gradients) that the estimate "
    "priced: export --to megatron, or re-plan with --precision fp8"
)
"""Why `torchtitan_config` refuses an nvfp4 job (torchtitan
``torchtitan/components/quantization/mx.py``: MXFP8 recipes through torchao's
``MXLinearConfig.from_recipe_name``; torchao lists NVFP4 training as a prototype without the
Hadamard transform and stochastic rounding, ``torchao/prototype/mx_formats/README.md``)."""


TORCHTITAN_LORA_RULE = "torchtitan_has_no_lora"
"""Rule id of `torchtitan_config`'s refusal of LoRA jobs."""

TORCHTITAN_LORA_REFUSAL = (
    "the estimate priced Megatron-Bridge's LoRA adapters on a frozen Megatron-core model; "
    "the torchtitan job config this export writes trains every weight and has no adapter "
    "settings: run the plan with Megatron-Bridge's peft config (the megatron export names "
    "it), or re-plan without --lora-rank"
)
"""Why `torchtitan_config` refuses a LoRA job."""


PRICED_SHARDING = {
    "no_shard": "nothing sharded over dp (DDP)",
    "optim": "the optimizer state sharded over dp, weights and gradients replicated "
    "(distributed optimizer, ZeRO-1)",
    "optim_grads": "the optimizer state and gradients sharded over dp, weights replicated",
    "optim_grads_params": "weights, gradients and optimizer state sharded over dp",
}
"""What each data-parallel sharding of a priced plan shards (Megatron-FSDP's strategy
names, `ParallelPlan.data_parallel_sharding_strategy`; ``optim`` also for
``--use-distributed-optimizer``)."""


def priced_sharding(plan: ParallelPlan) -> str:
    """The data-parallel sharding the plan was priced with, a key of `PRICED_SHARDING`."""
    if plan.use_megatron_fsdp:
        return plan.data_parallel_sharding_strategy
    return "optim" if plan.distributed_optimizer else "no_shard"


def exports_fsdp(plan: ParallelPlan) -> bool:
    """True when the export sets data_parallel_shard_degree = dp: a sharded optimizer,
    Megatron-FSDP or expert parallelism (torchtitan carves EP out of the FSDP mesh)."""
    return plan.distributed_optimizer or plan.use_megatron_fsdp or plan.ep > 1


def torchtitan_sharding_note(plan: ParallelPlan) -> str | None:
    """The difference between the data-parallel sharding the plan was priced with and the
    one torchtitan runs, or None when they agree. torchtitan's data_parallel_shard_degree
    is FSDP2's ``fully_shard`` (`torchtitan/distributed/parallel_dims.py`, dp_shard): it
    shards weights, gradients and optimizer state alike, with a weight all-gather per layer
    in forward and backward; it has no mode that shards only the optimizer state."""
    sharding = priced_sharding(plan)
    if not exports_fsdp(plan) or plan.dp == 1 or sharding == "optim_grads_params":
        return None
    return (
        f"data_parallel_shard_degree = {plan.dp} runs FSDP (weights, gradients and "
        f"optimizer state sharded, weights all-gathered per layer), but the plan was priced "
        f"with {PRICED_SHARDING[sharding]}: torchtitan's memory and communication differ "
        "from the prediction; for the priced plan export --to megatron, or re-plan with "
        "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params and export "
        "that plan"
    )


def torchtitan_option_config(
    options: ExecutionOptions, job: TrainingJob, fsdp: bool
) -> dict[str, dict[str, Any]]:
    """torchtitan job-config sections of ``options`` (``fsdp``: the export shards with
    FSDP); `SpecError` listing every priced option torchtitan cannot take."""
    allowed = set(PRICING_FIELDS) | {"runtime", "fp8_recipe", "fp8_param", "fp8_attention"}
    lines = [
        refusal(n, getattr(options, n), "torchtitan's job config has no such setting: re-plan "
                "without it, or export --to megatron")
        for n in changed_fields(options)
        if n not in allowed
    ]  # fmt: skip
    if options.fp8_attention:
        why = (
            "torchtitan's job config quantizes linear layers, not attention (no FP8 attention "
            "setting): re-plan with --no-fp8-attention"
        )
        lines.append(refusal("fp8_attention", True, why))
    fp8 = [n for n in FP8_FIELDS if n in changed_fields(options)]
    if fp8 and job.precision != "fp8":
        why = f"FP8 settings need an fp8 job, the job is {job.precision}: re-plan with fp8"
        lines += [refusal(n, getattr(options, n), why) for n in fp8]
    if options.fp8_recipe == "mxfp8":
        why = "torchtitan runs MXFP8 through its own MX converter: re-plan with tensorwise"
        lines.append(refusal("fp8_recipe", "mxfp8", why))
    if options.fp8_param and not fsdp:
        why = "torchtitan gathers FP8 weights only under FSDP: re-plan with --dist-opt"
        lines.append(refusal("fp8_param", True, why))
    if lines:
        raise refused("torchtitan", lines)
    float8: dict[str, Any] = {}
    if options.fp8_recipe == "tensorwise":
        float8["recipe_name"] = "tensorwise"
    if options.fp8_param:
        float8["enable_fsdp_float8_all_gather"] = True
        float8["precompute_float8_dynamic_scale_for_fsdp"] = True
    return {"quantize.linear.float8": float8} if float8 else {}


def torchtitan_config(bundle: PlanBundle) -> dict[str, dict[str, Any]]:
    """The torchtitan job config of ``bundle``, section -> key -> value; `SpecError` for a
    Muon job (`TORCHTITAN_MUON_REFUSAL`), an nvfp4 job (`TORCHTITAN_NVFP4_REFUSAL`), a
    LoRA job (`TORCHTITAN_LORA_REFUSAL`), a job of packed sequences (`TORCHTITAN_PACKED_RULE`),
    a tp above the key/value heads
    (`specs.kv_sharding.executor_kv_refusal`) and a hybrid model (`torchtitan_model`)."""
    model, job, plan = bundle.model, bundle.job, bundle.plan
    if job.lora is not None:
        raise SpecError(f"[{TORCHTITAN_LORA_RULE}] {job.lora.label()}: {TORCHTITAN_LORA_REFUSAL}")
    if job.optimizer != "adam":
        raise SpecError(f"optimizer ({job.optimizer}): {TORCHTITAN_MUON_REFUSAL}")
    if job.precision == "nvfp4":
        raise SpecError(f"[{TORCHTITAN_NVFP4_RULE}] precision (nvfp4): {TORCHTITAN_NVFP4_REFUSAL}")
    if job.packed_document_tokens is not None:
        raise SpecError(
            f"[{TORCHTITAN_PACKED_RULE}] packed sequences (packed_document_tokens "
            f"{job.packed_document_tokens}): the plan was priced with Transformer Engine's THD "
            "attention per document, which a torchtitan job does not run; export --target "
            "megatron, or plan without --packed-doc-len"
        )
    kv = executor_kv_refusal(model, plan.tp, "torchtitan")
    if kv is not None:
        raise SpecError(kv)
    name, flavor, _ = torchtitan_model(model)
    sharded = exports_fsdp(plan)
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": 1 if sharded else plan.dp,
        "data_parallel_shard_degree": plan.dp if sharded else 1,
        "tensor_parallel_degree": plan.tp,
        "pipeline_parallel_degree": plan.pp,
        "context_parallel_degree": plan.cp,
        "expert_parallel_degree": plan.ep,
        "expert_tensor_parallel_degree": plan.expert_tp if model.is_moe else 1,
    }
    training: dict[str, Any] = {"global_batch_size": job.global_batch_size}
    if plan.pp > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B" if plan.vpp > 1 else "1F1B"
        parallelism.update(torchtitan_split(model, plan)[0])
        parallelism["pipeline_parallel_microbatch_size"] = plan.micro_batch_size
        training["local_batch_size"] = job.global_batch_size // plan.dp
    else:
        # Without a pipeline torchtitan accumulates gradients over global / (local·dp) steps.
        training["local_batch_size"] = plan.micro_batch_size
    training["seq_len"] = job.seq_length
    training["mixed_precision_param"] = "float32" if job.precision == "fp32" else "bfloat16"
    config: dict[str, dict[str, Any]] = {
        "model": {"name": name, "flavor": flavor},
        "training": training,
        "parallelism": parallelism,
        "activation_checkpoint": _activation_checkpoint(model, plan),
    }
    if job.precision == "fp8":
        config["model"]["converters"] = ["quantize.linear.float8"]
    return config | torchtitan_option_config(bundle_options(bundle), job, fsdp=sharded)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise SpecError(f"cannot write {value!r} ({type(value).__name__}) as a TOML value")


def torchtitan_toml(bundle: PlanBundle) -> str:
    """`torchtitan_config` as TOML text, with a header naming the plan."""
    lines = [
        f"# torchtitan: {bundle.model.name} on {bundle.cluster.num_gpus} x "
        f"{bundle.cluster.hardware}, plan {bundle.plan.label()}",
    ]
    if bundle.plan.pp > 1:
        lines += [f"# {note}" for note in torchtitan_split(bundle.model, bundle.plan)[1]]
    note = torchtitan_sharding_note(bundle.plan)
    if note is not None:
        lines.append(f"# {note}")
    lines += segment_header(bundle, sbatch=False)
    name, flavor, known = torchtitan_model(bundle.model)
    if not known:
        lines.append(
            f"# torchtitan's {name} has no flavor {flavor!r}: add one with this model's sizes"
        )
        router = torchtitan_router_note(bundle.model)
        if router is not None:
            lines.append(f"# {router}")
    for section, values in torchtitan_config(bundle).items():
        lines.append(f"\n[{section}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
