"""The memory assumptions `paraplan estimate` and `paraplan plan` print: each launch setting
the megatron runtime's memory depends on, its value in force and the flag that changes it
(`paraplan.recipe_args.add_recipe_args`)."""

from __future__ import annotations

from costmodel.bf16_layer_rules import bf16_layer_counts
from costmodel.execution import ExecutionOptions
from costmodel.memory_allowances import FrameworkAllowance
from specs.formats import percent
from specs.job import TrainingJob


def memory_assumptions(job: TrainingJob, options: ExecutionOptions, device: str) -> list[str]:
    """Lines naming the launch settings the megatron runtime's memory assumes and the flag
    that changes each, Megatron-core's defaults unless a flag is given; ``options``
    resolved for the ``device`` (`costmodel.execution_presets.device_options`). Empty for other
    runtimes."""
    if options.runtime != "megatron":
        return []
    lines = ["memory assumes (Megatron-core's defaults where no flag is given):"]
    if options.main_grad_bytes == 4:
        lines.append("  fp32 main gradients; add --grad-reduce-in-bf16 for bf16 ones")
    else:
        lines.append(f"  {options.main_grad_bytes}-byte main gradients (--grad-reduce-in-bf16)")
    if job.precision == "fp8":
        if options.fp8_param:
            lines.append(f"  FP8 parameters, {options.fp8_recipe} scaling (--fp8-param-gather)")
        else:
            lines.append(
                f"  bf16 weights plus Transformer Engine's FP8 copies ({options.fp8_recipe} "
                "scaling); add --fp8-param-gather for FP8 parameters as Megatron-Bridge's "
                "FP8 recipes, --fp8-recipe to change the scaling"
            )
        if options.fp8_recipe != "mxfp8":
            lines.append(fp8_layout_line(options, device))
        if options.fp8_attention:
            lines.append(
                "  FP8 attention (--fp8-attention): the attention core saves Q, K, V and its "
                f"output in {options.fp8_recipe} scaling's FP8 form"
            )
    if job.precision == "nvfp4":
        lines.append(
            "  NVFP4 parameters (--fp4-param-gather, Megatron-Bridge's nvfp4 recipe); add "
            "--no-fp4-param-gather for bf16 weights with Transformer Engine's NVFP4 copies"
            if options.fp4_param
            else "  bf16 weights plus Transformer Engine's NVFP4 copies; add --fp4-param-gather "
            "for NVFP4 parameters"
        )
    start, end = bf16_layer_counts(options)
    if job.precision in ("fp8", "nvfp4") and start + end:
        lines.append(
            f"  the first {start} and last {end} decoder layers in bf16 (--first-last-layers-bf16):"
            " bf16 weights without quantized copies, bf16 activations; MTP depths in "
            f"{job.precision}"
        )
    lines.append(optimizer_state_line(options) if job.optimizer == "adam" else muon_line(job))
    if options.optimizer_cpu_offload_fraction > 0:
        share = percent(options.optimizer_cpu_offload_fraction)
        lines.append(
            f"  {share} of each rank's optimizer state (fp32 master, Adam m and v) in host "
            "memory (--optimizer-cpu-offload)"
        )
    lines.append(cross_entropy_line(options))
    lines.append(allocator_line(options))
    return lines


def optimizer_state_line(options: ExecutionOptions) -> str:
    """The dtypes of Adam's state (`ExecutionOptions.precision_aware_optimizer`,
    `costmodel.optimizer_state`)."""
    if not options.precision_aware_optimizer:
        return (
            "  fp32 Adam state (master weights, both moments); add "
            "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 "
            "for bf16 moments"
        )
    if options.optimizer_cpu_offload_fraction > 0:
        return (
            "  fp32 Adam state (master weights, both moments) on the device and the host: "
            "Megatron-core's CPU offload optimizer does not read --exp-avg-dtype, "
            "--exp-avg-sq-dtype nor --main-params-dtype"
        )
    return (
        f"  precision-aware Adam state: {options.exp_avg_dtype} first and "
        f"{options.exp_avg_sq_dtype} second moments, {options.main_params_dtype} master "
        "weights (--use-precision-aware-optimizer)"
    )


def muon_line(job: TrainingJob) -> str:
    """The state of Megatron-core's Muon (`costmodel.optimizer_muon`) and how it is held."""
    held = (
        "dealt out by whole parameters over dp*cp (expert dp for routed experts)"
        if job.optimizer == "dist_muon"
        else "on every rank (use --optimizer dist_muon to shard it)"
    )
    return (
        f"  Muon (--optimizer {job.optimizer}): fp32 master weights and momentum on the 2-D "
        f"weights, fp32 Adam state on the embedding, output layer and norms, {held}"
    )


def fp8_layout_line(options: ExecutionOptions, device: str) -> str:
    """Whether per-tensor FP8 weights keep a transposed copy on ``device``
    (`ExecutionOptions.fp8_tn_gemm_only`, decided by the device)."""
    if options.fp8_tn_gemm_only is False:
        return f"  no FP8 weight transposes: the {device} runs FP8 GEMMs in any layout"
    return f"  FP8 weights with their transposes: the {device}'s FP8 GEMMs take only TN"


def cross_entropy_line(options: ExecutionOptions) -> str:
    """What the loss keeps of the logits (`ExecutionOptions.cross_entropy_fusion`)."""
    fusion = options.cross_entropy_fusion
    if fusion == "te":
        return (
            "  Transformer Engine's fused cross entropy, no fp32 logits copy "
            "(--cross-entropy-fusion-impl te)"
        )
    flag = "" if fusion == "unfused" else f" ({fusion} fused cross entropy)"
    return (
        f"  an fp32 copy of the logits per in-flight microbatch{flag}; add "
        "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te for Transformer Engine's "
        "fused loss (Megatron-Bridge's recipes)"
    )


def allocator_line(options: ExecutionOptions) -> str:
    """The caching allocator's fragmentation share
    (`costmodel.memory_allowances.FrameworkAllowance`) and the flag that halves it."""
    allowance = FrameworkAllowance()
    share = options.allocator_fragmentation
    if share is None:
        share = allowance.fragmentation(options.expandable_segments)
    if options.expandable_segments:
        return (
            f"  expandable allocator segments: {percent(share)} of activation and buffer "
            "bytes for fragmentation (--expandable-segments)"
        )
    return (
        f"  {percent(share)} of activation and buffer bytes for allocator fragmentation; add "
        f"--expandable-segments for {percent(allowance.fragmentation(True))}"
    )
