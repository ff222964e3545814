"""Export a `PlanBundle` to the engines people train with: Megatron-LM arguments here, a
torchtitan TOML file through `planner.export_torchtitan` (`export_text` chooses).

Megatron-LM (flag spellings and validation rules: megatron-facts.md §8, snapshot
d98e8a64 of NVIDIA/Megatron-LM):
- VPP is given as `--num-layers-per-virtual-pipeline-stage` = L / (pp·vpp); Megatron has no
  `--virtual-pipeline-model-parallel-size` flag. Uneven splits: `planner.export_split`.
- The model's own flags (shape, attention variants, MTP, MoE and router):
  `planner.export_model`.
- A hybrid model runs with `pretrain_hybrid.py`, `--spec`, `--hybrid-layer-pattern` (the
  plan's pipeline split as its ``|`` segments, instead of the split flags) and the
  `--mamba-*` sizes, and no `--moe-layer-freq` (`planner.export_hybrid`); a gated
  DeltaNet model whose pattern is one mixer and one MLP per layer runs with
  `pretrain_gpt.py` and `--experimental-attention-variant gdn`, as Megatron-Bridge trains
  Qwen3-Next (`planner.export_gdn_gpt`).
- Full recompute always carries `--recompute-method` and `--recompute-num-layers`;
  selective carries neither (§8.3 rules 11, 15), and `--recompute-modules` when the plan
  names its modules. CPU activation offloading: `--cpu-offloading-num-layers`, or
  `--fine-grained-activation-offloading --offload-modules` with ``NVTE_CPU_OFFLOAD_V1=1``
  (Megatron-LM `megatron/training/arguments.py`; the flags are generated from
  `TransformerConfig`).
- `CUDA_DEVICE_MAX_CONNECTIONS=1` is required when tp > 1 or cp > 1 on GPUs before
  Blackwell (§8.3 rule 13); it is exported whenever tp > 1 or cp > 1, where it is harmless.
- The job's optimizer is ``--optimizer adam``, ``muon`` or ``dist_muon`` (the spelling
  Megatron-LM d7288711, Megatron-Bridge v0.4.0's, takes; HEAD still accepts ``dist_muon``
  with a deprecation warning and maps it to ``muon`` with the layer-wise distributed
  optimizer); Muon's own flags keep Megatron-LM's defaults, which are what
  `costmodel.optimizer_muon` prices (5 quintic Newton-Schulz steps, ``blockwise`` TP mode,
  Q/K/V split). torchtitan refuses a Muon job (`TORCHTITAN_MUON_REFUSAL`).
- A LoRA job (`TrainingJob.lora`) is refused (`MEGATRON_LORA_RULE`): Megatron-LM's
  training script has no adapters (no LoRA argument in ``megatron/training/arguments.py``
  at d0b3b775, the Megatron-LM of Megatron-Bridge v0.5.0); the refusal names
  Megatron-Bridge's ``peft`` config, which runs it.
- On a profile whose NVLink domain spans servers (NVL72) the header carries the SLURM
  ``#SBATCH --segment=N`` of the segment the plan was priced in (`planner.export_segment`).
- The execution options the plan was priced with (`PlanBundle.execution`: FP8 recipe and
  parameters, optimizer state dtypes and offload, gradient dtype, fused loss, MoE
  dispatcher and overlap, CUDA graphs, ...) become their Megatron-LM arguments, or are
  refused with the reason (`planner.export_options`).
"""

from __future__ import annotations

import math
import shlex
from typing import Literal

from planner.export_gdn_gpt import (
    SYMBOLS_PER_LAYER,
    gdn_gpt_arguments,
    gpt_num_layers,
    gpt_path_problem,
    uses_gpt_path,
)
from planner.export_hybrid import (
    GPT_ENTRY_POINT,
    hybrid_export_notes,
    megatron_entry_point,
    megatron_hybrid_arguments,
)
from planner.export_model import model_arguments, moe_arguments
from planner.export_options import (
    bundle_options,
    megatron_option_arguments,
    megatron_option_environment,
    megatron_option_notes,
    precision_arguments,
)
from planner.export_packing import packing_arguments, packing_note
from planner.export_segment import segment_header
from planner.export_split import largest_chunk_layers, megatron_split_arguments
from planner.export_torchtitan import torchtitan_toml
from planner.export_userbuffers import TP_OVERLAP_CFG_FILE, userbuffers_config, userbuffers_yaml
from specs.block_checks import export_block_refusal
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.finetune import LoraSpec
from specs.model import ModelSpec
from specs.plan import ParallelPlan

ExportTarget = Literal["megatron", "torchtitan"]
TARGETS: tuple[str, ...] = ("megatron", "torchtitan")

GDN_NORM_OUT_EXPORT_RULE = "gdn_norm_out_needs_gpt_path"
"""Rule id of the Megatron-LM export's refusal of ``gdn_norm_out`` on the hybrid path."""
MEGATRON_LORA_RULE = "lora_not_in_megatron_lm"
"""Rule id of the Megatron-LM export's refusal of a LoRA job (`megatron_arguments`)."""


def megatron_lora_refusal(lora: LoraSpec) -> str:
    """Why the Megatron-LM export refuses a LoRA job, and the Megatron-Bridge config that
    runs it (``ConfigContainer.peft``, ``megatron.bridge.peft.lora.LoRA``, tag v0.5.0)."""
    targets = ", ".join(repr(t) for t in lora.targets)
    return (
        f"[{MEGATRON_LORA_RULE}] {lora.label()}: Megatron-LM's pretrain_gpt.py trains every "
        "weight and has no LoRA arguments; run the plan with Megatron-Bridge, whose config "
        f"sets peft = LoRA(dim={lora.rank}, alpha={lora.alpha}, target_modules=[{targets}]) "
        "(megatron.bridge.peft.lora) beside the plan's parallel settings, or re-plan "
        "without --lora-rank"
    )


# ---- Megatron-LM ---------------------------------------------------------------------------


def megatron_environment(bundle: PlanBundle) -> dict[str, str]:
    """Environment variables the Megatron-LM run needs (megatron-facts.md §8.3 rule 13),
    with those of the priced execution options (`megatron_option_environment`)."""
    plan = bundle.plan
    env = megatron_option_environment(bundle_options(bundle))
    if plan.offload_modules:
        # fine-grained offloading with Transformer Engine >= 2.10 (arguments.py asserts it)
        env["NVTE_CPU_OFFLOAD_V1"] = "1"
    if plan.use_megatron_fsdp:
        return env  # Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 (arguments.py)
    if plan.tp > 1 or plan.cp > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env


def _parallel_arguments(model: ModelSpec, plan: ParallelPlan) -> list[str]:
    """Degrees, sequence parallelism, optimizer sharding and overlap switches."""
    args = [
        "--tensor-model-parallel-size", str(plan.tp),
        "--pipeline-model-parallel-size", str(plan.pp),
    ]  # fmt: skip
    if not model.is_hybrid:  # a hybrid pattern's | segments carry the split
        args += megatron_split_arguments(model, plan)
    if plan.cp > 1:
        args += ["--context-parallel-size", str(plan.cp)]
        if plan.cp_comm_type != "p2p":
            args += ["--cp-comm-type", plan.cp_comm_type]
    if plan.sequence_parallel:
        args.append("--sequence-parallel")
    if plan.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    if plan.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    args += megatron_fsdp_arguments(plan)
    if plan.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
        if plan.ddp_bucket_size is not None:
            args += ["--ddp-bucket-size", str(plan.ddp_bucket_size)]
    if plan.overlap_param_gather:
        args.append("--overlap-param-gather")
    return args


def megatron_fsdp_arguments(plan: ParallelPlan) -> list[str]:
    """Megatron-FSDP switches; it needs the `fsdp_dtensor` checkpoint format (arguments.py)."""
    if not plan.use_megatron_fsdp:
        return []
    return [
        "--use-megatron-fsdp",
        "--data-parallel-sharding-strategy", plan.data_parallel_sharding_strategy,
        "--ckpt-format", "fsdp_dtensor",
    ]  # fmt: skip


def recompute_arguments(model: ModelSpec, plan: ParallelPlan) -> list[str]:
    """`--recompute-*` flags: selective takes no method or layer count; full takes both
    (uniform: groups of N layers, N = 1 by default; block: the first N layers of each
    chunk, all of them by default)."""
    if plan.recompute == "selective":
        modules = plan.recompute_modules
        if "gdn_norm_out" in (modules or ()) and not uses_gpt_path(model, plan):
            raise SpecError(gdn_norm_out_refusal(model, plan))
        listed = [] if modules is None else ["--recompute-modules", *modules]
        return ["--recompute-granularity", "selective", *listed]
    if plan.recompute != "full":
        return []
    chunk = largest_chunk_layers(model, plan)
    if uses_gpt_path(model, plan):  # transformer layers of two hybrid symbols each
        chunk //= SYMBOLS_PER_LAYER
    default = 1 if plan.recompute_method == "uniform" else chunk
    layers = plan.recompute_num_layers or default
    return [
        "--recompute-granularity", "full",
        "--recompute-method", plan.recompute_method,
        "--recompute-num-layers", str(layers),
    ]  # fmt: skip


def gdn_norm_out_refusal(model: ModelSpec, plan: ParallelPlan) -> str:
    """Why the hybrid command cannot recompute ``gdn_norm_out``: Megatron-core accepts the
    module only with a gated DeltaNet ``experimental_attention_variant``
    (`TransformerConfig.__post_init__`), which only the GPT path sets."""
    return (
        f"[{GDN_NORM_OUT_EXPORT_RULE}] recompute_modules of {model.name!r} hold gdn_norm_out, "
        "which Megatron-core accepts only with --experimental-attention-variant gdn (the "
        "GPT path), and the GPT path cannot build this plan: "
        f"{gpt_path_problem(model, plan)}; drop gdn_norm_out from recompute_modules"
    )


def offload_arguments(plan: ParallelPlan) -> list[str]:
    """CPU activation offloading: `--cpu-offloading-num-layers N` (Megatron sets
    ``cpu_offloading`` when N > 0, arguments.py) or `--fine-grained-activation-offloading`
    with `--offload-modules`."""
    if plan.cpu_offloading_num_layers:
        return ["--cpu-offloading-num-layers", str(plan.cpu_offloading_num_layers)]
    if plan.offload_modules:
        return ["--fine-grained-activation-offloading", "--offload-modules", *plan.offload_modules]
    return []


def megatron_arguments(bundle: PlanBundle) -> list[str]:
    """The Megatron-LM `pretrain_gpt.py` (hybrid: `pretrain_hybrid.py`, or `pretrain_gpt.py`
    with the gated DeltaNet attention variant where `planner.export_gdn_gpt.uses_gpt_path`)
    arguments that run ``bundle``'s plan, as argv.

    Data, tokenizer files, learning rate and iteration counts are the user's to add; the
    NullTokenizer with `--vocab-size` reproduces the model's vocabulary for a mock-data run.
    The execution options the plan was priced with follow the precision flags
    (`planner.export_options`); `SpecError` when Megatron-LM cannot take one of them, and
    for a LoRA job (`megatron_lora_refusal`) and a parallel attention+MLP block
    (`specs.block_checks.export_block_refusal`).
    """
    model, job, plan = bundle.model, bundle.job, bundle.plan
    if job.lora is not None:
        raise SpecError(megatron_lora_refusal(job.lora))
    block = export_block_refusal(model, "Megatron-LM")
    if block is not None:
        raise SpecError(block)
    options = bundle_options(bundle)
    if uses_gpt_path(model, plan):
        args = model_arguments(model, job.seq_length, gpt_num_layers(model))
        args += gdn_gpt_arguments(model, plan)
    else:
        args = model_arguments(model, job.seq_length, model.num_layers)
        args += megatron_hybrid_arguments(model, plan)
    args += moe_arguments(model, plan, options)
    args += _parallel_arguments(model, plan)
    args += [
        "--micro-batch-size", str(plan.micro_batch_size),
        "--global-batch-size", str(job.global_batch_size),
    ]  # fmt: skip
    args += recompute_arguments(model, plan)
    args += offload_arguments(plan)
    args += precision_arguments(options, job)
    args += megatron_option_arguments(options, model, job, plan)
    args += packing_arguments(job)
    args += ["--optimizer", job.optimizer, "--log-throughput"]
    return args


def megatron_command(bundle: PlanBundle, gpus_per_node: int) -> str:
    """A shell snippet: on NVL72 the NVLink segment the plan was priced in
    (`planner.export_segment`), the environment, the userbuffers YAML file when the options set one
    (`planner.export_userbuffers.userbuffers_config`), and a `torchrun pretrain_gpt.py` line
    (`pretrain_hybrid.py` for a hybrid model the GPT path cannot build) with every argument,
    one flag per line."""
    num_gpus = bundle.cluster.num_gpus
    per_node = min(gpus_per_node, num_gpus)
    nodes = math.ceil(num_gpus / per_node)
    lines = [
        f"# Megatron-LM: {bundle.model.name} on {num_gpus} x {bundle.cluster.hardware}, "
        f"plan {bundle.plan.label()}",
        "# add --data-path/--mock-data, tokenizer, learning-rate and --train-iters arguments",
    ]
    lines += segment_header(bundle, sbatch=True)
    lines += [f"# {note}" for note in megatron_option_notes(bundle_options(bundle))]
    packed = packing_note(bundle.job, bundle.plan)
    if packed is not None:
        lines.append(f"# {packed}")
    gpt_path = uses_gpt_path(bundle.model, bundle.plan)
    if not gpt_path:
        lines += [f"# {note}" for note in hybrid_export_notes(bundle.model)]
    lines += [f"export {k}={v}" for k, v in megatron_environment(bundle).items()]
    args = megatron_arguments(bundle)
    if TP_OVERLAP_CFG_FILE in args:
        config = userbuffers_config(bundle_options(bundle))
        lines += [f"cat > {TP_OVERLAP_CFG_FILE} <<'EOF'", *userbuffers_yaml(config), "EOF"]
    script = GPT_ENTRY_POINT if gpt_path else megatron_entry_point(bundle.model)
    launch = f"torchrun --nproc-per-node {per_node} --nnodes {nodes} {script}"
    flags: list[str] = []
    for token in args:
        if token.startswith("--"):
            flags.append(token)
        else:
            flags[-1] += " " + shlex.quote(token)
    lines.append(" \\\n    ".join([launch, *flags]))
    return "\n".join(lines) + "\n"


def export_text(bundle: PlanBundle, target: str, gpus_per_node: int) -> str:
    """The export of ``bundle`` for ``target`` (`megatron` or `torchtitan`)."""
    if target == "megatron":
        return megatron_command(bundle, gpus_per_node)
    if target == "torchtitan":
        return torchtitan_toml(bundle)
    raise SpecError(f"unknown export target {target!r}; choose one of {', '.join(TARGETS)}")
