"""The records the cost model reads off `costmodel.execution.ExecutionOptions`: groups of its
fields as the type of the module that prices them.

- `optimizer_precision`: the optimizer state fields as
  `costmodel.optimizer_state.OptimizerPrecision`;
- `fp8_weight_storage`: the FP8 and NVFP4 weight fields as
  `costmodel.memory_allowances.Fp8WeightStorage`;
- `fp8_attention_recipe`: the FP8 recipe the attention core runs, or None.
"""

from __future__ import annotations

from costmodel.execution import ExecutionOptions
from costmodel.memory_allowances import Fp8Recipe, Fp8WeightStorage
from costmodel.optimizer_state import OptimizerPrecision


def optimizer_precision(options: ExecutionOptions) -> OptimizerPrecision:
    """The optimizer state fields of ``options`` as `OptimizerPrecision`."""
    return OptimizerPrecision(
        precision_aware=options.precision_aware_optimizer,
        exp_avg_dtype=options.exp_avg_dtype,
        exp_avg_sq_dtype=options.exp_avg_sq_dtype,
        main_params_dtype=options.main_params_dtype,
        cpu_offload=options.optimizer_cpu_offload_fraction > 0,
    )


def fp8_attention_recipe(options: ExecutionOptions) -> Fp8Recipe | None:
    """``options.fp8_recipe`` when ``options.fp8_attention`` is on, else None: what the
    attention core and its saved tensors read (`costmodel.fp8_attention`)."""
    return options.fp8_recipe if options.fp8_attention else None


def fp8_weight_storage(options: ExecutionOptions) -> Fp8WeightStorage:
    """The FP8 weight fields of ``options`` as `Fp8WeightStorage`; an unresolved
    ``fp8_tn_gemm_only`` (None, before `costmodel.execution_presets.device_options`) keeps
    the TN-only layout."""
    return Fp8WeightStorage(
        recipe=options.fp8_recipe,
        fp8_param=options.fp8_param,
        tn_gemm_only=options.fp8_tn_gemm_only is not False,
        fp4_param=options.fp4_param,
    )
