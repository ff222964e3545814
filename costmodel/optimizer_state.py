"""Adam's state per parameter: its bytes, and what one step reads and writes of it.

Megatron-core's Adam keeps, per parameter of a rank's optimizer shard, a master weight and
the two moments ``exp_avg`` (m) and ``exp_avg_sq`` (v). By default all three are fp32 (an
fp32 run has no master copy: the weight is stepped in place). Megatron-LM's
``--use-precision-aware-optimizer`` (`OptimizerPrecision`) hands them to Transformer
Engine's ``FusedAdam`` in lower precision: ``--exp-avg-dtype`` and ``--exp-avg-sq-dtype``
(fp32, fp16, bf16, fp8) and ``--main-params-dtype`` (fp32, fp16); ``--main-grads-dtype bf16``
keeps a bf16 gradient buffer (`ExecutionOptions.main_grad_bytes` 2).

Sources (snapshot d98e8a64 of NVIDIA/Megatron-LM, d0067d0d of NVIDIA/TransformerEngine):
- ``megatron/core/optimizer/optimizer_config.py`` ``OptimizerConfig.__post_init__``:
  ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` is True when the main params are not
  fp32, or the run has no FP8 recipe or the ``delayed`` one; then ``FusedAdam`` holds the
  master weights (``master_weights=True``, ``master_weight_dtype=main_params_dtype``,
  ``megatron/core/optimizer/__init__.py``) and reads the gradient buffer's shard as it is
  (``shard_main_param.decoupled_grad = shard_model_grad``, ``distrib_optimizer.py``
  ``_copy_model_grads_to_main_grads``). Otherwise (current-scaling or MXFP8 recipes with
  fp32 main params) the distributed optimizer keeps its own fp32 main params, as without
  the flag, and only the moments change.
- ``store_param_remainders`` (``OptimizerConfig`` default True, Transformer Engine >= 2.1):
  an fp32 master weight of a bf16 parameter is stored as its 16 trailing bits (int16),
  the leading 16 being the bf16 weight itself (``FusedAdam``: "Works only when param type
  is BF16 and master weight type is FP32"). FP8 parameters (``--fp8-param-gather``) are
  not bf16 tensors, so they keep a whole fp32 master weight.
- ``transformer_engine/pytorch/optimizers/fused_adam.py``: a non-fp32 state carries an
  fp32 scale per tensor (negligible bytes); bf16 moments, both of them, are read and
  written by the Adam kernel itself (``fuse_unscale``); any other non-fp32 state is
  unscaled into an fp32 copy before the kernel and scaled back after it
  (``get_unscaled_state``, ``_apply_scale``).
- Rules (Megatron-core): the flag only with Adam and the distributed optimizer
  (``megatron/core/optimizer/__init__.py``: "--use-precision-aware-optimizer only
  supported with distributed optimizer"; Megatron-FSDP v1 forces the distributed
  optimizer on, ``megatron/training/arguments.py``); without it every dtype must stay
  fp32 (``OptimizerConfig.__post_init__`` asserts).

Bytes per parameter of the optimizer shard (`adam_state_bytes`: master + m + v):

| run | master | m + v | total |
| --- | --- | --- | --- |
| bf16, fp8 or nvfp4, default | 4 | 8 | 12 |
| fp32, default | 0 | 8 | 8 |
| precision-aware, bf16 moments, fp32 main params, bf16 parameters | 2 (remainders) | 4 | 6 |
| precision-aware, bf16 moments, FP8 current scaling or MXFP8, fp32 main params | 4 | 4 | 8 |
| precision-aware, bf16 moments, fp16 main params | 2 | 4 | 6 |
| precision-aware, fp8 moments, fp32 main params, bf16 parameters | 2 | 2 | 4 |

Under Megatron-FSDP the main weights are Megatron-FSDP's own fp32 buffer
(``--megatron-fsdp-main-params-dtype``, which replaces ``--main-params-dtype``), 4 bytes.

Under optimizer CPU offload (``--optimizer-cpu-offload``, which Megatron-LM accepts only
with ``--use-precision-aware-optimizer``: ``arguments.py`` L1884-1888) the state is the
default one, 12 bytes (8 in an fp32 run), on the device and on the host, whatever
``--exp-avg-dtype``, ``--exp-avg-sq-dtype`` and ``--main-params-dtype`` say; Megatron-core
does not refuse those flags, it does not read them: ``get_megatron_optimizer`` builds
``HybridDeviceOptimizer`` with only lr, weight decay, betas, eps, bias correction and
``fused`` (``megatron/core/optimizer/__init__.py`` L504-545), so the device's Transformer
Engine ``FusedAdam`` and the host's ``torch.optim.AdamW`` keep fp32 m and v, and
``param_update_in_fp32=True`` gives every non-fp32 parameter a whole fp32 copy, on the
device or pinned on the host (``hybrid_optimizer.py`` ``_get_sub_optimizer_param_groups``),
stepped from ``grad.to(float32)`` (``_set_sub_optimizer_grads``); no remainders.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from specs.errors import SpecError

OptimizerDtype = Literal["fp32", "fp16", "bf16", "fp8"]
STATE_DTYPES: tuple[OptimizerDtype, ...] = ("fp32", "fp16", "bf16", "fp8")
"""Choices of Megatron-LM's ``--exp-avg-dtype`` and ``--exp-avg-sq-dtype``."""
MAIN_PARAMS_DTYPES: tuple[OptimizerDtype, ...] = ("fp32", "fp16")
"""Choices of Megatron-LM's ``--main-params-dtype``."""
MAIN_GRADS_DTYPES: tuple[str, ...] = ("fp32", "bf16")
"""Choices of Megatron-LM's ``--main-grads-dtype``."""
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes per element of each optimizer dtype (fp8: Transformer Engine's uint8 storage)."""

PRECISION_AWARE_RULE = "precision_aware_optimizer_needs_distributed_optimizer"
"""Rule id of `precision_aware_unmet`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerPrecision:
    """Megatron-LM's precision-aware optimizer flags (module docstring)."""

    precision_aware: bool = False
    """``--use-precision-aware-optimizer``: Transformer Engine's ``FusedAdam`` keeps the
    state in the dtypes below."""
    exp_avg_dtype: OptimizerDtype = "fp32"
    """``--exp-avg-dtype``: storage of Adam's first moment."""
    exp_avg_sq_dtype: OptimizerDtype = "fp32"
    """``--exp-avg-sq-dtype``: storage of Adam's second moment."""
    main_params_dtype: OptimizerDtype = "fp32"
    """``--main-params-dtype``: storage of the master weights (fp32 or fp16)."""
    cpu_offload: bool = False
    """``--optimizer-cpu-offload``: Megatron-core's ``HybridDeviceOptimizer`` steps the
    shard, whose device and host Adam keep fp32 state whatever the dtypes above say
    (`adam_state_bytes`)."""

    def __post_init__(self) -> None:
        for name, allowed in (
            ("exp_avg_dtype", STATE_DTYPES),
            ("exp_avg_sq_dtype", STATE_DTYPES),
            ("main_params_dtype", MAIN_PARAMS_DTYPES),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise SpecError(
                    f"{name} must be one of {', '.join(allowed)}, got {value!r} "
                    f"(Megatron-LM --{name.replace('_', '-')} choices)"
                )
            if value != "fp32" and not self.precision_aware:
                raise SpecError(
                    f"{name} {value} needs the precision-aware optimizer: Megatron-core "
                    f"asserts '{name} can only be fp32 when not using precision-aware "
                    "optimizer'; set precision_aware_optimizer (--use-precision-aware-"
                    f"optimizer) or keep {name} fp32"
                )


DEFAULT_PRECISION = OptimizerPrecision()
"""Megatron-core's default: fp32 master weights and moments."""


def with_offload(optimizer: OptimizerPrecision, offload_fraction: float) -> OptimizerPrecision:
    """``optimizer`` with `OptimizerPrecision.cpu_offload` set where ``offload_fraction``
    (`ExecutionOptions.optimizer_cpu_offload_fraction`) of the shard is offloaded."""
    if offload_fraction > 0 and not optimizer.cpu_offload:
        return replace(optimizer, cpu_offload=True)
    return optimizer


@dataclass(frozen=True, kw_only=True, slots=True)
class AdamStateBytes:
    """Adam's state per parameter on the rank that steps the parameter."""

    master_bytes: int
    """Master weight: 4 (fp32), 2 (fp16, or the int16 remainders of a bf16 weight), 0 (an
    fp32 run without the precision-aware optimizer steps its weights in place)."""
    master_dtype: OptimizerDtype
    """Dtype of the master weight as the Adam kernel sees it (fp32 for remainders)."""
    exp_avg_dtype: OptimizerDtype
    """Storage of the first moment."""
    exp_avg_sq_dtype: OptimizerDtype
    """Storage of the second moment."""
    te_master: bool
    """Transformer Engine's ``FusedAdam`` holds the master weights and reads the gradient
    buffer's shard as it is (no fp32 gradient copy): Megatron-core's
    ``use_precision_aware_optimizer_no_fp8_or_ds_fp8``."""
    param_remainders: bool
    """The master weight is the int16 remainder of a bf16 weight (``store_param_remainders``)."""

    @property
    def total_bytes(self) -> int:
        """Master weight plus both moments."""
        return (
            self.master_bytes + DTYPE_BYTES[self.exp_avg_dtype] + DTYPE_BYTES[self.exp_avg_sq_dtype]
        )


def adam_state_bytes(
    precision: str,
    optimizer: OptimizerPrecision = DEFAULT_PRECISION,
    *,
    fp8_recipe: str = "delayed",
    fp8_param: bool = False,
    fp4_param: bool = True,
    megatron_fsdp: bool = False,
) -> AdamStateBytes:
    """Adam's state per parameter for a run of ``precision`` (``bf16``, ``fp8``, ``nvfp4``,
    ``fp32``) with ``optimizer``'s dtypes; ``fp8_recipe`` and ``fp8_param`` as
    `ExecutionOptions.fp8_recipe` and ``fp8_param`` (read for fp8 runs only), ``fp4_param``
    as `ExecutionOptions.fp4_param` (read for nvfp4 runs only: NVFP4 parameters are not
    bf16 tensors, so they keep a whole fp32 master weight; an nvfp4 run leaves
    ``--fp8-recipe`` at its default, so Transformer Engine holds the master weights),
    ``megatron_fsdp`` for a Megatron-FSDP plan. The table and its sources are in the module
    docstring; under ``optimizer.cpu_offload`` the default state, whatever the dtypes."""
    moments = {
        "exp_avg_dtype": optimizer.exp_avg_dtype,
        "exp_avg_sq_dtype": optimizer.exp_avg_sq_dtype,
    }
    mcore = {"te_master": False, "param_remainders": False, "master_dtype": "fp32"}
    if optimizer.cpu_offload:  # HybridDeviceOptimizer: fp32 state on device and host
        fp32: OptimizerDtype = "fp32"
        master = 0 if precision == "fp32" else 4
        return AdamStateBytes(
            master_bytes=master, exp_avg_dtype=fp32, exp_avg_sq_dtype=fp32, **mcore
        )
    if not optimizer.precision_aware or megatron_fsdp:
        master = 0 if precision == "fp32" else 4
        return AdamStateBytes(master_bytes=master, **moments, **mcore)
    te_master = (
        optimizer.main_params_dtype != "fp32" or precision != "fp8" or fp8_recipe == "delayed"
    )
    if not te_master:
        return AdamStateBytes(master_bytes=4, **moments, **mcore)
    if optimizer.main_params_dtype == "fp16":
        return AdamStateBytes(
            master_bytes=2, master_dtype="fp16", te_master=True, param_remainders=False, **moments
        )
    bf16_params = (
        precision == "bf16"
        or (precision == "fp8" and not fp8_param)
        or (precision == "nvfp4" and not fp4_param)
    )
    return AdamStateBytes(
        master_bytes=2 if bf16_params else 4,
        master_dtype="fp32",
        te_master=True,
        param_remainders=bf16_params,
        **moments,
    )


def precision_aware_unmet(
    optimizer: OptimizerPrecision, *, distributed_optimizer: bool, megatron_fsdp: bool
) -> str | None:
    """Why Megatron-core refuses ``optimizer`` for a plan, or None: the precision-aware
    optimizer needs the distributed optimizer (Megatron-FSDP v1 turns it on), and under
    Megatron-FSDP the master weights take ``--megatron-fsdp-main-params-dtype``, not
    ``--main-params-dtype`` (module docstring)."""
    if not optimizer.precision_aware:
        return None
    if not (distributed_optimizer or megatron_fsdp):
        return (
            "--use-precision-aware-optimizer is only supported with the distributed "
            "optimizer (Megatron-core get_megatron_optimizer); add --dist-opt (or "
            "--use-megatron-fsdp), or drop --use-precision-aware-optimizer"
        )
    if megatron_fsdp and optimizer.main_params_dtype != "fp32":
        return (
            f"--main-params-dtype {optimizer.main_params_dtype} is replaced by "
            "--megatron-fsdp-main-params-dtype under Megatron-FSDP (fp32 here); drop "
            "--main-params-dtype or --use-megatron-fsdp"
        )
    return None


UNFUSED_UNSCALE_BYTES: dict[str, int] = {"fp16": 14, "bf16": 6, "fp8": 5}
"""Bytes per element of ``FusedAdam.get_unscaled_state`` for a state the kernel does not
read itself: fp16 ``.float()`` then ``mul_(scale)`` (read 2, write 4, read and write 4);
bf16 ``.float()`` (read 2, write 4); fp8 dequantize (read 1, write 4)."""

UNFUSED_RESCALE_BYTES: dict[str, int] = {"fp16": 18, "bf16": 6, "fp8": 9}
"""Bytes per element of ``FusedAdam._apply_scale`` after the kernel: bf16 a cast of the fp32
copy (read 4, write 2); fp16 ``aminmax`` (read 4), ``mul_`` by the new scale (read and write
4) and the cast (read 4, write 2); fp8 ``aminmax`` (read 4) and the quantizing copy (read 4,
write 1)."""


def adam_step_state_bytes(state: AdamStateBytes, *, mixed_precision: bool) -> tuple[int, int]:
    """(bytes per parameter, extra passes) that one Adam step moves for the master weight,
    the 16-bit model weight and both moments, gradient excluded.

    Default state (Megatron-core's fused Adam, fp32 states): moments read and written
    (16), master weight read and written (8) and, under mixed precision, the bf16 copy
    written (2); an fp32 run steps its weight in place (8). Precision-aware states
    (Transformer Engine ``FusedAdam``, module docstring): each moment read and written at
    its dtype where the kernel reads it (fp32, or both bf16: ``fuse_unscale``), else
    unscaled into an fp32 copy (`UNFUSED_UNSCALE_BYTES`), stepped in fp32 (8) and scaled
    back (`UNFUSED_RESCALE_BYTES`), one more pass each way; remainders: the bf16 weight and
    its int16 remainder read and written (8, ``multi_tensor_adam_param_remainder``); an
    fp16 master weight is unscaled and scaled back like an fp16 moment, plus the weight
    written (2).
    """
    fused = state.exp_avg_dtype == state.exp_avg_sq_dtype == "bf16"
    moved, passes = 0, 0
    for dtype in (state.exp_avg_dtype, state.exp_avg_sq_dtype):
        if dtype == "fp32" or fused:
            moved += 2 * DTYPE_BYTES[dtype]
            continue
        moved += UNFUSED_UNSCALE_BYTES[dtype] + 8 + UNFUSED_RESCALE_BYTES[dtype]
        passes += 2
    if state.param_remainders or not (mixed_precision or state.te_master):
        return moved + 8, passes
    if state.master_dtype == "fp16":
        fp16 = UNFUSED_UNSCALE_BYTES["fp16"] + 8 + UNFUSED_RESCALE_BYTES["fp16"]
        return moved + fp16 + 2, passes + 2
    return moved + 8 + (2 if mixed_precision else 0), passes
