"""A slower machine never makes a plan faster: scaling one rate of a profile down (a
collective's bandwidth, the GEMM or attention throughput, HBM bandwidth, the host launch
rate) or one latency up (a collective's latency within or across nodes, one host launch
latency) never lowers `estimate_plan`'s iteration seconds, and the opposite change never
raises them, for dense and MoE plans over tp / pp / vpp / cp / ep / dp, both token
dispatchers with and without the 1F1B all-to-all overlap, the distributed optimizer, TP
communication overlap, recompute and fp8, on the H100 profile and on the B200 profile (fp8
delayed and mxfp8, both dispatchers) (docs/cost-model.md, "Monotonicity in the profile's
rates")."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
B200 = load_profile("b200")
DENSE = dataclasses.replace(get_preset("llama3-8b"), num_layers=8)
MOE = dataclasses.replace(get_preset("qwen3-30b-a3b"), num_layers=8)
TOKEN_DROP = dataclasses.replace(MOE, moe_capacity_factor=1.0)
MLA_MOE = dataclasses.replace(get_preset("deepseek-v3"), num_layers=6, mtp_num_layers=0)
TOLERANCE = 1e-9
ROUTER = frozenset({"moe_router", "moe_preprocess"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case:
    """One plan priced on ``plan.world_size`` GPUs of ``profile`` (16: two nodes)."""

    model: ModelSpec
    plan: ParallelPlan
    options: ExecutionOptions = DEFAULT_OPTIONS
    precision: str = "bf16"
    global_batch_size: int = 128
    profile: HardwareProfile = H100


def _opts(**fields: object) -> ExecutionOptions:
    return dataclasses.replace(DEFAULT_OPTIONS, **fields)


def _moe_plan(**fields: object) -> ParallelPlan:
    defaults = {"tp": 1, "pp": 2, "vpp": 2, "schedule": "interleaved", "ep": 8, "dp": 8}
    return ParallelPlan(**(defaults | fields))


CASES = (
    Case(model=DENSE, plan=ParallelPlan(tp=2, pp=2, dp=4, sequence_parallel=True)),
    Case(
        model=DENSE,
        plan=ParallelPlan(
            tp=4,
            pp=2,
            vpp=2,
            schedule="interleaved",
            dp=2,
            sequence_parallel=True,
            tp_comm_overlap=True,
        ),
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(
            tp=2,
            cp=2,
            dp=4,
            distributed_optimizer=True,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
        ),
    ),
    Case(model=DENSE, plan=ParallelPlan(tp=1, pp=4, dp=4, recompute="full")),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=2, pp=2, dp=4, sequence_parallel=True, recompute="selective"),
        precision="fp8",
    ),
    Case(model=MOE, plan=_moe_plan(), options=_opts(moe_dispatcher="alltoall")),
    Case(
        model=MOE,
        plan=_moe_plan(),
        options=_opts(moe_dispatcher="alltoall", moe_a2a_overlap=True),
    ),
    Case(
        model=MOE,
        plan=_moe_plan(),
        options=_opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=MOE,
        plan=_moe_plan(distributed_optimizer=True),
        options=_opts(moe_dispatcher="flex", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
    ),
    Case(
        model=MOE,
        plan=_moe_plan(),
        options=_opts(moe_dispatcher="alltoall", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(pp=1, ep=16, dp=16, distributed_optimizer=True),
        options=_opts(moe_dispatcher="flex"),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(pp=1, ep=16, dp=16, distributed_optimizer=True),
        options=_opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=TOKEN_DROP,
        plan=_moe_plan(),
        options=_opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=MLA_MOE,
        plan=_moe_plan(vpp=3, distributed_optimizer=True),
        options=_opts(moe_dispatcher="flex", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(tp=2, ep=4, etp=2, dp=8, sequence_parallel=True),
        options=_opts(moe_dispatcher="alltoall"),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(pp=2, ep=8, dp=8, recompute="full"),
        options=_opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(tp=2, pp=1, ep=8, dp=8, sequence_parallel=True, recompute="selective"),
        options=_opts(moe_dispatcher="alltoall", moe_a2a_overlap=True),
        precision="fp8",
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=2, pp=2, dp=4, sequence_parallel=True, tp_comm_overlap=True),
        precision="fp8",
        profile=B200,
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=2, cp=2, dp=4, sequence_parallel=True, recompute="selective"),
        options=_opts(fp8_recipe="mxfp8"),
        precision="fp8",
        profile=B200,
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=1, pp=4, vpp=2, schedule="interleaved", dp=4, recompute="full"),
        profile=B200,
    ),
    Case(
        model=MOE,
        plan=_moe_plan(distributed_optimizer=True),
        options=_opts(moe_dispatcher="flex", moe_a2a_overlap=True, fp8_recipe="mxfp8"),
        precision="fp8",
        profile=B200,
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(pp=1, ep=16, dp=16, distributed_optimizer=True),
        options=_opts(moe_dispatcher="flex"),
        profile=B200,
    ),
    Case(
        model=MOE,
        plan=_moe_plan(),
        options=_opts(moe_dispatcher="alltoall", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
        profile=B200,
    ),
)

Scaler = Callable[
    [HardwareProfile, ExecutionOptions, float], tuple[HardwareProfile, ExecutionOptions]
]


def _collective(op: str, placement: str) -> Scaler:
    def scale(p: HardwareProfile, o: ExecutionOptions, f: float):
        fits = tuple(
            dataclasses.replace(fit, busbw_GBps=fit.busbw_GBps * f)
            if fit.op == op and fit.placement == placement
            else fit
            for fit in p.communication.fits
        )
        comm = dataclasses.replace(p.communication, fits=fits)
        return dataclasses.replace(p, communication=comm), o

    return scale


def _collective_latency(op: str, placement: str) -> Scaler:
    """Each fit's latency of ``op`` at ``placement`` divided by the factor: a factor below 1
    is a longer latency, a slower machine."""

    def scale(p: HardwareProfile, o: ExecutionOptions, f: float):
        fits = tuple(
            dataclasses.replace(fit, latency_s=fit.latency_s / f)
            if fit.op == op and fit.placement == placement
            else fit
            for fit in p.communication.fits
        )
        comm = dataclasses.replace(p.communication, fits=fits)
        return dataclasses.replace(p, communication=comm), o

    return scale


OP_OVERHEAD_S = 5e-6
"""The per-kernel host time the `op_overhead_s` latency scales from: every stored profile
sets 0 (kernels launched ahead of the GPU), which no factor would move; 5 µs is the order of
one CUDA kernel launch."""


def _host_latency(field: str) -> Scaler:
    """One host launch latency divided by the factor: `ExecutionOptions.moe_host_launch_s`,
    `moe_expert_launch_s`, or the profile's `op_overhead_s` from `OP_OVERHEAD_S` (so the
    unscaled case, factor 1, differs from the stored profile: `base_s` prices it through the
    scaler)."""

    def scale(p: HardwareProfile, o: ExecutionOptions, f: float):
        if field == "op_overhead_s":
            compute = dataclasses.replace(p.compute, op_overhead_s=OP_OVERHEAD_S / f)
            return dataclasses.replace(p, compute=compute), o
        return p, dataclasses.replace(o, **{field: getattr(o, field) / f})

    return scale


def _gemm(dtype: str) -> Scaler:
    def scale(p: HardwareProfile, o: ExecutionOptions, f: float):
        peaks = dict(p.device.peak_tflops) | {dtype: p.device.peak_tflops[dtype] * f}
        return dataclasses.replace(p, device=dataclasses.replace(p.device, peak_tflops=peaks)), o

    return scale


def _attention(p: HardwareProfile, o: ExecutionOptions, f: float):
    curves = tuple(
        dataclasses.replace(
            c, points=tuple(dataclasses.replace(x, tflops=x.tflops * f) for x in c.points)
        )
        for c in p.compute.attention
    )
    return dataclasses.replace(p, compute=dataclasses.replace(p.compute, attention=curves)), o


def _hbm(p: HardwareProfile, o: ExecutionOptions, f: float):
    return dataclasses.replace(
        p, device=dataclasses.replace(p.device, hbm_GBps=p.device.hbm_GBps * f)
    ), o


def _host(p: HardwareProfile, o: ExecutionOptions, f: float):
    options = dataclasses.replace(
        o,
        moe_host_launch_s=o.moe_host_launch_s / f,
        moe_expert_launch_s=o.moe_expert_launch_s / f,
    )
    compute = dataclasses.replace(p.compute, op_overhead_s=p.compute.op_overhead_s / f)
    return dataclasses.replace(p, compute=compute), options


RATES: dict[str, Scaler] = {
    **{
        f"{fit.op}:{fit.placement}": _collective(fit.op, fit.placement)
        for profile in (H100, B200)
        for fit in profile.communication.fits
    },
    **{
        f"{fit.op}:{fit.placement}:latency": _collective_latency(fit.op, fit.placement)
        for profile in (H100, B200)
        for fit in profile.communication.fits
    },
    **{
        f"gemm:{dtype}": _gemm(dtype) for dtype in H100.device.peak_tflops | B200.device.peak_tflops
    },
    "attention": _attention,
    "hbm": _hbm,
    "host_launch": _host,
    **{
        f"host_latency:{field}": _host_latency(field)
        for field in ("moe_host_launch_s", "moe_expert_launch_s", "op_overhead_s")
    },
}
"""Each scaler takes a factor f: below 1 a slower machine (a rate times f, a latency over
f), above 1 a faster one."""


def iteration_s(case: Case, profile: HardwareProfile, options: ExecutionOptions) -> float:
    job = TrainingJob(
        seq_length=4096, global_batch_size=case.global_batch_size, precision=case.precision
    )
    cluster = ClusterSpec(hardware=case.profile.name, num_gpus=case.plan.world_size)
    est = estimate_plan(case.model, cluster, job, case.plan, profile, options=options)
    return est.iteration_time_s


@functools.cache
def base_s(index: int, rate: str) -> float:
    """The case's iteration seconds with ``rate`` at factor 1."""
    case = CASES[index]
    return iteration_s(case, *RATES[rate](case.profile, case.options, 1.0))


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(
    index=st.integers(0, len(CASES) - 1),
    rate=st.sampled_from(sorted(RATES)),
    factor=st.floats(0.5, 1.0, exclude_max=True),
)
def test_a_slower_rate_never_speeds_up_a_plan(index: int, rate: str, factor: float):
    case = CASES[index]
    if (
        rate.startswith("gemm:")
        and rate.removeprefix("gemm:") not in case.profile.device.peak_tflops
    ):
        return
    base = base_s(index, rate)
    slow = iteration_s(case, *RATES[rate](case.profile, case.options, factor))
    fast = iteration_s(case, *RATES[rate](case.profile, case.options, 1.0 / factor))
    assert slow >= base * (1.0 - TOLERANCE), (rate, factor, case.plan.label(), slow, base)
    assert fast <= base * (1.0 + TOLERANCE), (rate, factor, case.plan.label(), fast, base)
