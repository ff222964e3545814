"""Shared inputs of the monotonicity tests (`test_monotonic`, `test_monotonic_profiles`): the
profiles and models they price, a plan case (`Case`), the scalers that make one rate of a
profile slower or faster (`RATES`), and the check that a slower rate never speeds a case up
(`check_rate`; docs/cost-model.md, "Monotonicity in the profile's rates")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hypothesis import strategies as st

from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from profiles.lookup import collective_time_s
from profiles.schema import HardwareProfile
from profiles.schema_network import CollectiveFit
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.presets import get_preset

PROFILES = tuple(
    load_profile(name)
    for name in ("h100-sxm-80gb", "b200", "gb200-nvl72", "gb300-nvl72", "b300", "a100-sxm-80gb")
)
H100, B200, GB200, GB300, B300, A100 = PROFILES
DENSE = dataclasses.replace(get_preset("llama3-8b"), num_layers=8)
MOE = dataclasses.replace(get_preset("qwen3-30b-a3b"), num_layers=8)
TOKEN_DROP = dataclasses.replace(MOE, moe_capacity_factor=1.0)
MLA_MOE = dataclasses.replace(get_preset("deepseek-v3"), num_layers=6, mtp_num_layers=0)
MHA = dataclasses.replace(get_preset("gpt-7.5b"), num_layers=8)
TOLERANCE = 1e-9
ROUTER = frozenset({"moe_router", "moe_preprocess"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case:
    """One plan priced on ``plan.world_size`` GPUs of ``profile`` (16: two nodes of eight;
    on an NVL72 profile the ranks fill one 72-GPU NVLink domain before the next)."""

    model: ModelSpec
    plan: ParallelPlan
    options: ExecutionOptions = DEFAULT_OPTIONS
    precision: str = "bf16"
    global_batch_size: int = 128
    seq_length: int = 4096
    profile: HardwareProfile = H100


def opts(**fields: object) -> ExecutionOptions:
    """`DEFAULT_OPTIONS` with ``fields`` changed."""
    return dataclasses.replace(DEFAULT_OPTIONS, **fields)


def moe_plan(**fields: object) -> ParallelPlan:
    """An interleaved MoE plan (pp 2, vpp 2, ep 8, dp 8: 16 GPUs) with ``fields`` changed."""
    defaults = {"tp": 1, "pp": 2, "vpp": 2, "schedule": "interleaved", "ep": 8, "dp": 8}
    return ParallelPlan(**(defaults | fields))


INTERLEAVED_TP_OVERLAP = ParallelPlan(
    tp=4,
    pp=2,
    vpp=2,
    schedule="interleaved",
    dp=2,
    sequence_parallel=True,
    tp_comm_overlap=True,
)
"""A dense plan on 16 GPUs: tp 4 with sequence parallelism and TP communication overlap,
an interleaved pipeline of 2 x 2."""
EP16 = ParallelPlan(pp=1, ep=16, dp=16, distributed_optimizer=True)
"""A MoE plan on 16 GPUs: ep 16 across two nodes of eight, the distributed optimizer."""

Scaler = Callable[
    [HardwareProfile, ExecutionOptions, float], tuple[HardwareProfile, ExecutionOptions]
]


def _refit(fit: CollectiveFit, **changes: float) -> CollectiveFit:
    """``fit`` with ``changes`` to its α-β line (``busbw_GBps`` or ``latency_s``) and its
    measured points (`CollectiveFit.points`) moved with the line: each point's seconds times
    the new line's time over the old one's at its size. `profiles.lookup.collective_time_s`
    prices a fit with points as the line times the measured-to-line ratio, so changing the
    line alone would leave the time at each point where it was and move it between points
    either way; a slower collective is slower at every size."""
    new = dataclasses.replace(fit, **changes)
    if not fit.points:
        return new
    old_line, new_line = (dataclasses.replace(f, points=()) for f in (fit, new))
    points = tuple(
        dataclasses.replace(
            p,
            seconds=p.seconds
            * collective_time_s(new_line, p.size_bytes)
            / collective_time_s(old_line, p.size_bytes),
        )
        for p in fit.points
    )
    return dataclasses.replace(new, points=points)


def _collective(op: str, placement: str, *, latency: bool = False) -> Scaler:
    """Each fit of ``op`` at ``placement`` (every group size) with its bus bandwidth times the
    factor, or with ``latency`` its latency divided by the factor (`_refit`): a factor below
    1 is a slower machine."""

    def scale(p: HardwareProfile, o: ExecutionOptions, f: float):
        def changed(fit: CollectiveFit) -> CollectiveFit:
            if latency:
                return _refit(fit, latency_s=fit.latency_s / f)
            return _refit(fit, busbw_GBps=fit.busbw_GBps * f)

        fits = tuple(
            changed(fit) if fit.op == op and fit.placement == placement else fit
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
        for profile in PROFILES
        for fit in profile.communication.fits
    },
    **{
        f"{fit.op}:{fit.placement}:latency": _collective(fit.op, fit.placement, latency=True)
        for profile in PROFILES
        for fit in profile.communication.fits
    },
    **{
        f"gemm:{dtype}": _gemm(dtype)
        for profile in PROFILES
        for dtype in profile.device.peak_tflops
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
        seq_length=case.seq_length,
        global_batch_size=case.global_batch_size,
        precision=case.precision,
    )
    cluster = ClusterSpec(hardware=case.profile.name, num_gpus=case.plan.world_size)
    est = estimate_plan(case.model, cluster, job, case.plan, profile, options=options)
    return est.iteration_time_s


def draws(cases: tuple[Case, ...]) -> dict[str, st.SearchStrategy]:
    """Hypothesis strategies of `check_rate`'s arguments over ``cases``: a case index, a rate
    of `RATES` and a factor in [0.5, 1)."""
    return {
        "index": st.integers(0, len(cases) - 1),
        "rate": st.sampled_from(sorted(RATES)),
        "factor": st.floats(0.5, 1.0, exclude_max=True),
    }


BASE_S: dict[tuple[int, int, str], float] = {}
"""Iteration seconds at factor 1 by (id of the case tuple, index, rate)."""


def check_rate(cases: tuple[Case, ...], index: int, rate: str, factor: float) -> None:
    """Case ``index`` of ``cases`` is no faster with ``rate`` at ``factor`` (< 1) and no
    slower at its inverse than at 1 (relative `TOLERANCE`)."""
    case = cases[index]
    if (
        rate.startswith("gemm:")
        and rate.removeprefix("gemm:") not in case.profile.device.peak_tflops
    ):
        return
    key = (id(cases), index, rate)
    if key not in BASE_S:
        BASE_S[key] = iteration_s(case, *RATES[rate](case.profile, case.options, 1.0))
    base = BASE_S[key]
    slow = iteration_s(case, *RATES[rate](case.profile, case.options, factor))
    fast = iteration_s(case, *RATES[rate](case.profile, case.options, 1.0 / factor))
    label = (case.profile.name, case.plan.label())
    assert slow >= base * (1.0 - TOLERANCE), (rate, factor, label, slow, base)
    assert fast <= base * (1.0 + TOLERANCE), (rate, factor, label, fast, base)
