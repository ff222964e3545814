"""Which `costmodel.execution.ExecutionOptions` fields the exports write, leave out or
refuse (`planner.export_options` builds the arguments, `planner.export_torchtitan` the
torchtitan keys).

A plan file records the `costmodel.execution.ExecutionOptions` fields that differ from
Megatron-LM's defaults (`costmodel.execution_record`); a field at its default needs no
argument. Every field is in one of three groups, which `tests/planner/test_export_options.py`
checks cover the dataclass:

- **exported** (`MEGATRON_EXPORTED`): the Megatron-LM argument of the same meaning, spelled
  as `megatron/training/arguments.py` of NVIDIA/Megatron-LM (snapshot d98e8a64) has it or
  generates it from a `TransformerConfig` field (`megatron/training/argument_utils.py`:
  ``--field-name``, ``--no-field-name`` for a bool that defaults to True). The paraplan
  command line takes the same spellings for the fields it sets (`paraplan.recipe_args`,
  `paraplan.time_args`, `paraplan.optimizer_args`), and `bench/cli_parity.py` writes its
  command lines with the functions of `planner.export_options`, so the names live there
  once. Three fields become environment variables of the launch
  (`planner.export_options.megatron_option_environment`); the userbuffers settings become a
  YAML file that the launch snippet writes for ``--tp-comm-overlap-cfg``
  (`planner.export_userbuffers`).
- **pricing only** (`PRICING_FIELDS`): fitted factors and descriptions of the hardware,
  the software stack or the data, which no training argument sets; the export leaves them
  out (the plan's header comment names a non-default FlashAttention generation).
- **not expressible** (`MEGATRON_UNEXPRESSIBLE`): behaviour of older Megatron-LM code or of
  paraplan's own executor, and Megatron-core settings that Megatron-LM's command line cannot
  reach (``fp8_dot_product_attention``); a plan priced
  with one of them is refused (`SpecError` naming the field, its value, why and the fix),
  never exported as something else. So are value combinations Megatron-LM rejects
  (`planner.export_options.megatron_option_refusals`).
"""

from __future__ import annotations

PRICING_FIELDS: dict[str, str] = {
    "gemm_rate_factor": "a rate factor of the BLAS library the priced stack links",
    "fp8_gemm_rate_factor": "a rate factor fitted on published FP8 runs",
    "fp4_gemm_rate_factor": "a rate factor fitted on published NVFP4 runs",
    "sustained_gemm_rate_factor": "a rate factor fitted on published runs",
    "moe_host_launch_s": "a host cost per kernel launch fitted on published runs",
    "moe_expert_launch_s": "a host cost per per-expert kernel launch of Transformer Engine",
    "moe_token_device_s": "a device time per token fitted on published runs",
    "moe_load_imbalance": "the routing the data produces, not a setting",
    "allocator_fragmentation": "an allowance of the memory model",
    "fp8_tn_gemm_only": "a property of the GPU",
    "flash_attention_version": "the generation of the attention kernels installed",
    "nvfp4_fused_rht_cast": "the Transformer Engine version installed",
    "plan_features": "the plans the search considered; no plan's cost reads it",
}
"""ExecutionOptions fields that are paraplan pricing knobs, not training arguments, with
what each describes; no export writes them."""


MEGATRON_UNEXPRESSIBLE: dict[str, str] = {
    "runtime": "the plan was priced as paraplan's executor, not Megatron-core: re-plan with "
    "--runtime megatron, or run it with `paraplan execute`",
    "bias_fusion": "Megatron-LM with Transformer Engine always adds linear biases in the GEMM "
    "epilogues: price with the current defaults (not MEGATRON_2021/2023)",
    "two_pass_norm_backward": "apex FusedLayerNorm of Megatron-LM 2021-2023 has no argument "
    "today: price with the current defaults",
    "loss_scaling": "fp16 loss scaling needs --fp16, which the job's precision does not say: "
    "price with the current defaults",
    "pipeline_scatter_gather": "--scatter-gather-tensors-in-pipeline was removed from "
    "Megatron-LM: price with the current defaults",
    "deallocate_pipeline_outputs": "Megatron-core always frees sent pipeline outputs: price "
    "with the current defaults",
    "tp_dgrad_overlap": "Megatron-core always overlaps the input-gradient reduction: price "
    "with the current defaults",
    "ddp_gradient_copy": "Megatron-LM no longer runs PyTorch DDP: price with the current defaults",
    "step_gradient_copy": "the fp32 gradient copy of Megatron-LM 2021's optimizer step has "
    "no argument: price with the current defaults",
    "stale_main_grad": "local DDP without contiguous buffers (Megatron-LM 2021) has no "
    "argument: price with the current defaults",
    "param_gather_engine": "the plan was priced as DeepSpeed's ZeRO stage-3 engine "
    "(deepspeed_zero3), which Megatron-LM does not run: price it with the current defaults "
    "(param_gather_engine='megatron_fsdp', --use-megatron-fsdp)",
    "fp8_attention": "Megatron-LM's arguments.py generates no flag for TransformerConfig."
    "fp8_dot_product_attention (it lists the field among those with no CLI argument, snapshot "
    "d98e8a64; Megatron-Bridge recipes set it in their configs): re-plan with "
    "--no-fp8-attention, or run the plan through Megatron-Bridge with "
    "fp8_dot_product_attention=True",
}
"""ExecutionOptions fields no current Megatron-LM argument sets, with why and the fix; a
plan priced with one of them at another value than the default is refused."""


MEGATRON_EXPORTED: frozenset[str] = frozenset(
    {
        "attention",
        "grad_accumulation_fusion",
        "hidden_dropout",
        "main_grad_bytes",
        "overlap_p2p",
        "grad_nan_check",
        "moe_dispatcher",
        "moe_a2a_overlap",
        "moe_fused_grouped_mlp",
        "cuda_graph_scopes",
        "cross_entropy_fusion",
        "expandable_segments",
        "cudnn_norm",
        "fp8_recipe",
        "fp8_param",
        "fp4_param",
        "first_last_layers_bf16",
        "num_layers_at_start_in_bf16",
        "num_layers_at_end_in_bf16",
        "rope_fusion",
        "precision_aware_optimizer",
        "exp_avg_dtype",
        "exp_avg_sq_dtype",
        "main_params_dtype",
        "optimizer_cpu_offload_fraction",
        "overlap_cpu_optimizer_d2h_h2d",
        "tp_overlap_rs_method",
        "tp_overlap_bulk_sm_margin",
        "tp_overlap_pipeline_sm_margin",
    }
)
"""ExecutionOptions fields with a Megatron-LM argument or launch environment variable."""


MOE_FIELDS = ("moe_dispatcher", "moe_a2a_overlap", "moe_fused_grouped_mlp")
"""Exported fields that only a MoE model's layers read."""


FP8_FIELDS = ("fp8_recipe", "fp8_param")
"""Exported fields that only an fp8 job reads."""


FP4_FIELDS = ("fp4_param",)
"""Exported fields that only an nvfp4 job reads."""


BF16_LAYER_FIELDS = (
    "first_last_layers_bf16",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
)
"""Exported fields that only an fp8 or nvfp4 job reads (`costmodel.bf16_layers`)."""
