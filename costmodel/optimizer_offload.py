"""Megatron-core's optimizer CPU offload: the Adam step of a fraction of each rank's
optimizer shard on the host (``--optimizer-cpu-offload``, ``--optimizer-offload-fraction``,
``--overlap-cpu-optimizer-d2h-h2d``; `ExecutionOptions.optimizer_cpu_offload_fraction`).

What Megatron-core does (NVIDIA/Megatron-LM, commit d98e8a64, 2026-08):

- ``HybridDeviceOptimizer`` (``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py``)
  wraps the parameter groups of the distributed optimizer (``distrib_optimizer.py``
  L778-781: it is rebuilt over the rank's shard). ``_get_sub_optimizer_param_groups``
  (L251-302) walks the shard's parameters in group order and moves whole parameters to the
  host while the moved elements are below ``fraction`` times the shard's elements: a
  pinned fp32 master copy per parameter, stepped by ``torch.optim.AdamW(fused=True)``
  (``__init__.py`` L504-545), whose m and v are fp32 on the host. The rest keeps an fp32
  master copy on the device (``param_update_in_fp32=True``) stepped by the GPU Adam.
- Every step (``step``, L150-179): the fp32 main gradients of the offloaded parameters are
  copied device to host (``_set_sub_optimizer_grads``, L98-115), the GPU Adam is launched,
  then each host optimizer waits for its gradients and steps, and a post-step hook copies
  the updated fp32 parameters back into the model's parameters (L117-127; PyTorch's
  non-blocking host-to-device copy moves the source dtype and converts on the device,
  ``copy_kernel_cuda`` in ``aten/src/ATen/native/cuda/Copy.cu``).
- Without ``--overlap-cpu-optimizer-d2h-h2d`` both copies run on the compute stream and
  one host optimizer steps every offloaded parameter after all gradients arrived
  (L208-209, L217-218): copy, step, copy in series. With it (L204-207, L219-221,
  ``build_cpu_optimizer_list`` L226-249) every offloaded parameter has its own host
  optimizer and the copies run on their own streams: the gradient of the next parameter
  and the parameters already stepped move while the host steps another, a pipeline over
  parameters.
- Rules: ``--optimizer-cpu-offload`` needs ``--use-precision-aware-optimizer``
  (``megatron/training/arguments.py`` L1884-1888), which needs the distributed optimizer
  (``megatron/core/optimizer/__init__.py`` L1057-1060); FP8 parameters
  (``--fp8-param-gather``) only with ``--fp8-recipe delayed`` (``arguments.py``
  L1889-1892); Megatron-FSDP v2 refuses it (``fully_sharded_optimizer.py`` L79-80); AdamW
  (decoupled weight decay) only (``__init__.py`` L510-512).

What paraplan prices: the offloaded fraction of the optimizer state's bytes leaves the
device (`costmodel.memory.memory_per_stage`), the state being fp32 master, m and v whatever
the precision-aware optimizer's dtypes (`costmodel.optimizer_state.adam_state_bytes` with
``cpu_offload``); of the shard's Adam step, the device keeps
the gradient norm, the zeroing and its own share (`costmodel.optimizer_passes.optimizer_step_time_s`
with ``offloaded_params``), the host runs the rest (`host_optimizer_step_s`) beside it, and
the slower of the two is the step (`offloaded_step_s`). Bandwidths are peak figures, so the
host time is a lower bound.
"""

from __future__ import annotations

from costmodel.host_link import device_rate_Bps, host_link_Bps
from profiles.schema import HardwareProfile
from specs.errors import SpecError
from specs.plan import ParallelPlan
from specs.rules_base import Violation

HOST_ADAM_BYTES_PER_PARAM = 28
"""Host-memory bytes of one fp32 AdamW step per offloaded parameter: read the gradient (4),
read and write the master weight (8), m (8) and v (8) (``torch.optim.AdamW(fused=True)``
on the host, fp32 state)."""

OFFLOAD_COPY_BYTES_PER_PARAM = 4
"""Bytes per offloaded parameter of each host-link copy: the fp32 main gradient device to
host, the fp32 master weight host to device (converted to the model's dtype on the device)."""

HOST_MEMORY_GBPS_PER_GPU_BY_DEVICE = (
    ("GB200", 256.0),
    ("H100", 76.8),
    ("H200", 76.8),
)
"""Device-name fragment -> host memory bandwidth per GPU, GB/s (1e9 bytes/s), peak; the
ranks of a node step their shards at once, so each gets its share:

- H100, H200 (DGX H100 and DGX H200): two Intel Xeon Platinum 8480C per 8 GPUs (NVIDIA
  DGX BasePOD reference architecture, "Core Components"); a 4th-generation Xeon Scalable
  has 8 DDR5 channels at up to 4800 MT/s (WWT, "Memory Population Guidelines for Intel 4th
  Gen Xeon Scalable Processors"), 8 x 4800e6 x 8 B = 307.2 GB/s per socket (derived;
  "Sapphire Rapids's 307.2 GB/s", simmtester.com 2023-03-28), 2 x 307.2 / 8 = 76.8 GB/s
  per GPU (derived).
- GB200: one Grace CPU per two B200 (shared/reference/hardware.md), LPDDR5X at 512 GB/s
  (yobitel.com knowledge base, "NVIDIA GB200", secondary), 512 / 2 = 256 GB/s per GPU
  (derived).

Other devices have no stated host memory and are refused."""


def host_memory_Bps(profile: HardwareProfile) -> float:
    """Host memory bytes per second available to one device's rank of ``profile``
    (`HOST_MEMORY_GBPS_PER_GPU_BY_DEVICE`); `SpecError` for a device without a stated host."""
    return device_rate_Bps(
        profile,
        HOST_MEMORY_GBPS_PER_GPU_BY_DEVICE,
        "optimizer CPU offload: no host memory bandwidth",
        "plan without --optimizer-cpu-offload",
    )


def host_optimizer_step_s(
    profile: HardwareProfile, offloaded_params: float, *, overlap: bool
) -> float:
    """Seconds of the host's part of one optimizer step on one rank, for
    ``offloaded_params`` parameters of its shard:

    - gradients device to host: c = 4·N / B_link, parameters back: the same c
      (`OFFLOAD_COPY_BYTES_PER_PARAM`, `costmodel.host_link.host_link_Bps` per direction);
    - AdamW on the host: a = 28·N / B_host (`HOST_ADAM_BYTES_PER_PARAM`, `host_memory_Bps`);
    - without ``overlap`` (``--overlap-cpu-optimizer-d2h-h2d`` off) in series: c + a + c;
      with it pipelined over parameters: max(c, a), the fill and drain of one parameter
      left out.
    """
    if offloaded_params < 0:
        raise SpecError(
            f"host_optimizer_step_s: offloaded_params must be >= 0, got {offloaded_params}"
        )
    if offloaded_params == 0:
        return 0.0
    copy_s = OFFLOAD_COPY_BYTES_PER_PARAM * offloaded_params / host_link_Bps(profile)
    adam_s = HOST_ADAM_BYTES_PER_PARAM * offloaded_params / host_memory_Bps(profile)
    return max(copy_s, adam_s) if overlap else copy_s + adam_s + copy_s


def offloaded_step_s(device_s: float, host_s: float) -> float:
    """One optimizer step with part of it on the host: the device's passes
    (``device_s``: gradient norm, zeroing, its Adam share) and the host's part (``host_s``)
    run side by side after the GPU Adam is launched, so the slower sets the step; the
    norm's pass before the host starts is not added (a few milliseconds at most)."""
    return max(device_s, host_s)


OFFLOAD_RULE = "optimizer_cpu_offload_needs_distributed_optimizer"
"""`Violation.rule` of `offload_violations`."""


def offload_violations(plan: ParallelPlan, fraction: float) -> list[Violation]:
    """What Megatron-core refuses for ``plan`` under optimizer CPU offload of ``fraction``:
    the offload needs the precision-aware optimizer, which needs the distributed optimizer
    (not Megatron-FSDP v2, which refuses the offload)."""
    if fraction <= 0 or plan.distributed_optimizer:
        return []
    fsdp = " (Megatron-FSDP refuses it)" if plan.use_megatron_fsdp else ""
    return [
        Violation(
            rule=OFFLOAD_RULE,
            message=(
                f"optimizer CPU offload (fraction {fraction}) needs the precision-aware "
                f"optimizer, which needs distributed_optimizer (False){fsdp}: give "
                "--use-distributed-optimizer, or drop --optimizer-cpu-offload"
            ),
        )
    ]


OFFLOAD_NEEDS_PRECISION_AWARE = (
    "optimizer CPU offload needs the precision-aware optimizer (Megatron-LM arguments.py: "
    '"The optimizer cpu offload must be used in conjunction with '
    '`--use-precision-aware-optimizer`")'
)
"""The rule `check_offload_fields` states when the precision-aware optimizer is off."""


def check_offload_fields(
    fraction: float, *, runtime: str, fp8_param: bool, fp8_recipe: str, precision_aware: bool
) -> None:
    """The `ExecutionOptions` rules of optimizer CPU offload; `SpecError` with the rule,
    the values and the fix. ``precision_aware``: `ExecutionOptions.precision_aware_optimizer`,
    which Megatron-LM requires with the offload (``arguments.py`` L1884-1888)."""
    if not 0.0 <= fraction <= 1.0:
        raise SpecError(
            f"optimizer_cpu_offload_fraction must be in [0, 1], got {fraction!r}; it is the "
            "share of each rank's optimizer shard stepped on the host (0: off)"
        )
    if fraction == 0:
        return
    if runtime != "megatron":
        raise SpecError(
            f"optimizer CPU offload is Megatron-core's HybridDeviceOptimizer; the {runtime} "
            "runtime has none: give --runtime megatron, or drop the offload"
        )
    if not precision_aware:
        raise SpecError(
            f"{OFFLOAD_NEEDS_PRECISION_AWARE}; got optimizer_cpu_offload_fraction {fraction} "
            "with precision_aware_optimizer False: give --use-precision-aware-optimizer, or "
            "drop --optimizer-cpu-offload"
        )
    if fp8_param and fp8_recipe != "delayed":
        raise SpecError(
            f"optimizer CPU offload with FP8 parameters (fp8_param True) needs fp8_recipe "
            f"'delayed', got {fp8_recipe!r} (Megatron-LM arguments.py): drop "
            "--fp8-param-gather, or give --fp8-recipe delayed"
        )
