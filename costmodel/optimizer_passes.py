"""Memory-bound passes over a rank's weight gradients and optimizer state, from a
`HardwareProfile`: the unfused gradient accumulation of each microbatch
(`grad_accumulation_time_s`), the data-parallel wrapper's passes over the gradient buffer
before its reduction (`grad_buffer_passes_time_s`), and the Adam step
(`optimizer_step_time_s`). Each is bytes moved over the achievable bandwidth
(`costmodel.compute.memory_bound_time_s`).
"""

from __future__ import annotations

from typing import TypeVar

from costmodel.compute import FP32_BYTES, memory_bound_time_s
from costmodel.optimizer_state import AdamStateBytes, adam_step_state_bytes
from profiles.schema import HardwareProfile
from specs.errors import SpecError


def grad_accumulation_time_s(
    profile: HardwareProfile, params: float, grad_bytes: int, main_grad_bytes: int = FP32_BYTES
) -> float:
    """Unfused weight-gradient accumulation over ``params`` parameters for one microbatch:
    read the fresh gradient (``grad_bytes`` each) and read-modify-write the main gradient
    (``main_grad_bytes`` each way), as Megatron-LM's DDP hook ``main_grad.add_(grad)`` does
    without `--gradient-accumulation-fusion` (and plain PyTorch autograd does into
    ``.grad``). The main gradient is fp32 (4) by default, fp16 (2) in fp16 runs without
    `--accumulate-allreduce-grads-in-fp32`."""
    if params < 0:
        raise SpecError(f"grad_accumulation_time_s: params must be >= 0, got {params}")
    return memory_bound_time_s(profile, params * (grad_bytes + 2 * main_grad_bytes))


def grad_buffer_passes_time_s(
    profile: HardwareProfile,
    params: float,
    main_grad_bytes: int = FP32_BYTES,
    *,
    scale: bool,
    nan_check: bool,
) -> float:
    """Per-iteration passes of Megatron's data-parallel wrapper over a rank's gradient
    buffer (``params`` elements of ``main_grad_bytes``) before the reduction, on the compute
    stream.

    ``scale``: the gradients are divided by the data-parallel size in place, a read and a
    write (Megatron-LM 2021-2023 `DistributedDataParallel.allreduce_gradients`,
    ``buffer_.data /= get_data_parallel_world_size()``; Megatron-core
    `_ParamAndGradBucketGroup.start_grad_sync`, ``grad_data *= gradient_scaling_factor``).
    ``nan_check``: Megatron-core's ``check_for_nan_in_grad`` takes the norm of every bucket
    first (`check_grads`, on by default: ``--check-for-nan-in-loss-and-grad``), one read.
    """
    if params < 0:
        raise SpecError(f"grad_buffer_passes_time_s: params must be >= 0, got {params}")
    passes = (2 if scale else 0) + (1 if nan_check else 0)
    return memory_bound_time_s(profile, passes * main_grad_bytes * params) if passes else 0.0


Count = TypeVar("Count")
"""A count: an int, or a numpy array of them in the closed-form screen."""


def optimizer_step_tensors(
    layers: Count, local_experts: Count, adapters: Count | None = None, *, outside: Count
) -> Count:
    """Parameter tensors one rank's optimizer step covers over ``layers`` transformer
    layers (`optimizer_step_time_s`'s ``num_tensors``): about 8 per layer (weights, biases,
    norms) plus 2 per local expert, and the ``outside`` tensors the rank holds outside its
    layers, counted exactly (`costmodel.rank_params.stage_outside_tensors`: embedding,
    output layer, final norm, each MTP weight set's ``eh_proj`` and norms and the MTP
    stage's embedding copy); a LoRA job's two matrices per adapter instead, ``adapters``
    the adapters the rank's layers hold (`costmodel.rank_params.stage_lora_adapters`; its
    frozen base has no optimizer state). ``adapters`` is None without LoRA."""
    if adapters is not None:
        return 2 * adapters  # type: ignore[operator]
    return layers * (8 + 2 * local_experts) + outside  # type: ignore[operator]


def optimizer_step_time_s(
    profile: HardwareProfile,
    *,
    shard_params: float,
    local_params: float,
    mixed_precision: bool,
    num_tensors: int,
    loss_scaling: bool = False,
    main_grad_bytes: int = FP32_BYTES,
    state: AdamStateBytes | None = None,
    offloaded_params: float = 0.0,
) -> float:
    """One Adam step on one rank, memory-bound (fused multi-tensor kernels).

    Per parameter of the rank's optimizer shard: read the fp32 gradient (4), read and write
    Adam m and v (16), read and write the fp32 master weight (8) and, under mixed precision,
    write the bf16 copy (2); an fp32 run updates the weight in place (8, no copy); the
    gradient-norm pass for clipping reads the shard's main gradients (4 once they are fp32
    copies, else ``main_grad_bytes``): Megatron-core's ``get_main_grads_for_grad_norm``
    takes the gradients of the optimizer's own parameters, which the distributed optimizer
    limits to its shard (``shard_main_param.grad``). Per local parameter (the full gradient
    buffer): zeroing it for the next iteration writes it (``main_grad_bytes``). Source:
    Megatron-LM `DistributedOptimizer.step` (copy-to-main-grad, clip, inner step,
    copy-main-to-model; megatron/core/optimizer/optimizer.py and distrib_optimizer.py,
    core_r0.8.0). Each of the four passes launches about one kernel per parameter tensor.

    A 16-bit gradient buffer (``main_grad_bytes`` 2) under mixed precision is copied into
    fp32 main gradients first (``shard_main_param.grad = shard_model_grad.float()``: read 2,
    write 4 per shard parameter, one more pass). ``loss_scaling`` (fp16, Megatron
    `FP16OptimizerWithFP16Params`): the same copy plus the unscale with an inf/NaN check
    (read and write 4), two more passes.

    ``state``: Adam's state under Megatron-LM's precision-aware optimizer
    (`costmodel.optimizer_state.adam_state_bytes`; None: the default fp32 state). Its
    weight and moment traffic is `costmodel.optimizer_state.adam_step_state_bytes`; where
    Transformer Engine holds the master weights (``te_master``) the kernel reads the
    gradient buffer's shard at ``main_grad_bytes`` with no fp32 copy
    (``shard_main_param.decoupled_grad = shard_model_grad``, Megatron-core
    ``distrib_optimizer.py`` ``_copy_model_grads_to_main_grads``, snapshot d98e8a64).

    ``offloaded_params`` of the shard take their Adam step on the host (optimizer CPU
    offload, `costmodel.optimizer_offload`): the device no longer reads their gradient nor
    moves their ``state``'s weight and moment bytes (28, or 30 with the 16-bit copy, fewer
    per parameter with the default state, which is the state under offload:
    `costmodel.optimizer_state.adam_state_bytes`); the norm, the zeroing and the gradient
    copy still cover the whole shard.
    """
    if shard_params < 0 or local_params < 0 or not 0 <= offloaded_params <= shard_params:
        raise SpecError(
            f"optimizer_step_time_s: shard_params ({shard_params}) and local_params "
            f"({local_params}) must be >= 0 and offloaded_params ({offloaded_params}) in "
            "[0, shard_params]"
        )
    te_master = state is not None and state.te_master
    if state is None:
        weights_and_moments, state_passes = 16 + 8 + (2 if mixed_precision else 0), 0
    else:
        weights_and_moments, state_passes = adam_step_state_bytes(
            state, mixed_precision=mixed_precision
        )
    copied = loss_scaling or (mixed_precision and main_grad_bytes != FP32_BYTES and not te_master)
    adam = (main_grad_bytes if te_master else FP32_BYTES) + weights_and_moments
    per_shard = adam
    passes = 4 + state_passes
    if copied:
        per_shard += main_grad_bytes + FP32_BYTES
        passes += 1
    if loss_scaling:
        per_shard += 8
        passes += 1
    per_shard += FP32_BYTES if copied else main_grad_bytes  # the norm of the main gradients
    bytes_moved = per_shard * shard_params + main_grad_bytes * local_params
    bytes_moved -= adam * offloaded_params
    return memory_bound_time_s(profile, bytes_moved, num_ops=passes * max(num_tensors, 1))
