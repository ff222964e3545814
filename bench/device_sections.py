"""The six sections of the device check (`bench/device_kernels.py`): each times its kernels
through a runner (`device_timing.TorchRunner`, or any object with the same methods) and
sets every figure against the cost model's price of the same kernel (`device_shapes`).

A section returns ``{"status", "reason", "elapsed_s", "records"}``; ``status`` is ``done``,
``partial`` (the budget stopped it: the records it did not reach carry ``skipped``) or
``skipped``. A measurement that raises is recorded with its ``error`` and the section goes
on. Progress lines go to stderr.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from device_shapes import (
    ATTENTION_MODELS,
    GemmShape,
    Profiles,
    attention_model_s,
    attention_shape,
    compared,
    expert_gemms,
    fitted_gemm_factor,
    fp8_fast_accum,
    gemm_model_s,
    memory_model_s,
    profile_bandwidth_GBps,
    shrink,
)

from costmodel.execution_presets import DEFAULT_OPTIONS
from specs.presets import get_preset

Record = dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """What one run measures (`bench/device_kernels.py` fills it from its flags)."""

    gemm_shapes: tuple[GemmShape, ...]
    """Section 1's shapes, each timed in bf16 and fp8."""
    soak_s: float
    """Seconds of each sustained soak (bf16, then fp8)."""
    soak_shape: tuple[int, int, int]
    """(m, n, k) of the soak's GEMM."""
    soak_window_s: float = 1.0
    """Seconds of one soak window."""
    launches: int = 20000
    """Launches of the tiny-kernel loop and of each per-expert loop."""
    launch_experts: tuple[int, ...] = (8, 16, 32, 64, 128)
    """Experts of the per-expert launch loops."""
    launch_rows: int = 16
    """Rows of each matmul of the launch loops."""
    expert_model: str = "qwen3-30b-a3b"
    """The expert whose FC1 (rows x 2·F_e x h) the launch and loop sections multiply."""
    loop_cases: tuple[tuple[int, int], ...] = ((8, 256), (32, 256), (128, 256), (32, 1024))
    """(experts, rows per expert) of section 4."""
    memory_bytes: tuple[int, ...] = (1 << 24, 1 << 26, 1 << 28, 1 << 30)
    """Bytes of one tensor of the memory-bound kernels."""
    attention_seqs: tuple[int, ...] = (4096, 8192)
    """Sequence lengths of section 6; those past the first only while its share lasts."""
    head_divisor: int = 1
    """Divisor of the attention head counts (`device_shapes.attention_shape`)."""
    shrink: int = 1
    """Divisor of the launch and loop shapes (`device_shapes.shrink`; 1 on a GPU); the GEMM
    and soak shapes come shrunk."""
    fp8_skip: str | None = None
    """Why FP8 GEMMs are skipped, None when they run."""
    sdpa_backends: tuple[str, ...] = ("flash", "cudnn", "efficient")
    """Scaled-dot-product-attention backends of section 6."""


PROGRESS_EVERY = 25
"""Measurements between two progress lines of a section."""


class Clock:
    """A section's deadline within the run's budget."""

    def __init__(self, seconds: float, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.start = now()
        self.end = self.start + seconds

    def left_s(self) -> float:
        return self.end - self.now()

    def elapsed_s(self) -> float:
        return self.now() - self.start


def progress(text: str) -> None:
    print(f"[device_kernels] {text}", file=sys.stderr, flush=True)


def attempt(runner: Any, measure: Callable[[], Record]) -> Record:
    """``measure()``, or ``{"error": ...}`` when it raises (the runner's cache freed)."""
    try:
        return measure()
    except Exception as exc:
        runner.release()
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_records(
    name: str, clock: Clock, items: Iterable[tuple[Record, Callable[[], Record]]], runner: Any
) -> dict[str, Any]:
    """Each item's base record merged with its measurement, in order, while ``clock``
    lasts; the rest recorded as skipped."""
    records, stopped = [], False
    for base, measure in items:
        if stopped or clock.left_s() <= 0:
            stopped = True
            records.append({**base, "skipped": "budget: the section's share of --budget-s ran out"})
            continue
        records.append({**base, **attempt(runner, measure)})
        if len(records) % PROGRESS_EVERY == 0:
            progress(f"{name}: {len(records)} records")
    status = "partial" if stopped else "done"
    progress(f"{name}: {status}, {len(records)} records in {clock.elapsed_s():.0f} s")
    return {"status": status, "reason": None, "elapsed_s": clock.elapsed_s(), "records": records}


def gemm_section(runner: Any, profiles: Profiles, s: Settings, clock: Clock) -> dict[str, Any]:
    """Section 1: every shape of ``s.gemm_shapes`` in bf16, then in fp8 (or skipped)."""

    def items() -> Iterable[tuple[Record, Callable[[], Record]]]:
        for shape in s.gemm_shapes:
            for dtype in ("bf16", "fp8"):
                base = {"name": shape.label(), "dtype": dtype, "shape": shape_fields(shape)}
                if dtype == "fp8":
                    base["fp8_fast_accum"] = fp8_fast_accum(shape.pass_name)
                if dtype == "fp8" and s.fp8_skip:
                    yield base, lambda: {"skipped": s.fp8_skip}
                else:
                    yield base, gemm_measure(runner, profiles, shape, dtype)

    return run_records("gemm", clock, items(), runner)


def shape_fields(shape: GemmShape) -> Record:
    return {
        "group": shape.group,
        "model": shape.model,
        "gemm": shape.gemm,
        "pass": shape.pass_name,
        "tp": shape.tp,
        "rows": shape.rows,
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
    }


def gemm_record(
    profiles: Profiles, m: int, n: int, k: int, dtype: str, measured_s: float | None
) -> Record:
    """Comparison fields of one GEMM timing, with its achieved TFLOP/s."""
    raw_s, priced_s = gemm_model_s(profiles, m, n, k, dtype)
    tflops = 2.0 * m * n * k / measured_s / 1e12 if measured_s else None
    return {**compared(measured_s, raw_s, priced_s), "measured_tflops": tflops}


def gemm_measure(
    runner: Any, profiles: Profiles, shape: GemmShape, dtype: str
) -> Callable[[], Record]:
    def measure() -> Record:
        seconds = runner.gemm_s(shape.m, shape.n, shape.k, dtype, shape.pass_name)
        return gemm_record(profiles, shape.m, shape.n, shape.k, dtype, seconds)

    return measure


def soak_section(runner: Any, profiles: Profiles, s: Settings, clock: Clock) -> dict[str, Any]:
    """Section 2: one large GEMM back to back for ``s.soak_s`` per dtype (shorter when the
    section's share is less), rate, SM clock and power per window."""
    records = []
    for dtype in ("bf16", "fp8"):
        m, n, k = s.soak_shape
        base = {"name": f"soak {m}x{n}x{k}", "dtype": dtype, "m": m, "n": n, "k": k}
        duration = min(s.soak_s, clock.left_s() / (2 if dtype == "bf16" else 1) - 2)
        if dtype == "fp8" and s.fp8_skip:
            records.append({**base, "skipped": s.fp8_skip})
        elif duration < 2 * s.soak_window_s:
            records.append({**base, "skipped": f"budget: {max(duration, 0):.1f} s left"})
        else:
            progress(f"soak {dtype}: {duration:.0f} s")
            measure = soak_measure(runner, profiles, s, dtype, duration)
            records.append({**base, **attempt(runner, measure)})
    return {"status": "done", "reason": None, "elapsed_s": clock.elapsed_s(), "records": records}


def soak_measure(
    runner: Any, profiles: Profiles, s: Settings, dtype: str, duration_s: float | None = None
) -> Callable[[], Record]:
    def measure() -> Record:
        m, n, k = s.soak_shape
        windows = runner.soak(m, n, k, dtype, duration_s or s.soak_s, s.soak_window_s)
        return soak_record(profiles, s.soak_shape, dtype, windows)

    return measure


def soak_record(
    profiles: Profiles, shape: tuple[int, int, int], dtype: str, windows: list[Any]
) -> Record:
    """First window, last 10 s and their ratio, against the fitted factor of ``dtype`` and
    the raw profile's rate for the shape (`gemm_model_s`)."""
    m, n, k = shape
    raw_s, priced_s = gemm_model_s(profiles, m, n, k, dtype)
    flops = 2.0 * m * n * k
    later = windows[1:] or windows
    tail = [w for w in later if w.end_s >= windows[-1].end_s - 10.0]
    first, last = windows[0].flops_per_s, statistics.fmean(w.flops_per_s for w in tail)
    return {
        "windows": [window_fields(w) for w in windows],
        "first_window_tflops": first / 1e12,
        "last_10s_tflops": last / 1e12,
        "last_over_first": last / first,
        "fitted_factor": fitted_gemm_factor(profiles, dtype),
        "profile_raw_tflops": flops / raw_s / 1e12,
        "profile_priced_tflops": flops / priced_s / 1e12,
        "last_over_profile_raw": last * raw_s / flops,
        "first_sm_clock_mhz": windows[0].sm_clock_mhz,
        "last_sm_clock_mhz": tail[-1].sm_clock_mhz,
        "first_power_w": windows[0].power_w,
        "last_power_w": tail[-1].power_w,
    }


def window_fields(window: Any) -> Record:
    return {
        "end_s": window.end_s,
        "tflops": window.flops_per_s / 1e12,
        "sm_clock_mhz": window.sm_clock_mhz,
        "power_w": window.power_w,
    }


def launch_section(runner: Any, profiles: Profiles, s: Settings, clock: Clock) -> dict[str, Any]:
    """Section 3: seconds per eager launch, tiny adds and per-expert matmul loops, against
    `ExecutionOptions.moe_host_launch_s` (`costmodel.fitted_rates.MOE_HOST_LAUNCH_S`)."""
    fitted = DEFAULT_OPTIONS.moe_host_launch_s
    _, _, n, k = expert_gemms(get_preset(s.expert_model), s.launch_rows)[0]
    n, k = shrink(n, s.shrink), shrink(k, s.shrink)

    def per_launch(seconds: float) -> Record:
        return {"measured_s": seconds, "fitted_s": fitted, "ratio_fitted": seconds / fitted}

    def expert_loop(e: int) -> Callable[[], Record]:
        return lambda: per_launch(runner.expert_launch_s(e, s.launch_rows, n, k, s.launches))

    items: list[tuple[Record, Callable[[], Record]]] = [
        ({"name": "tiny add_", "experts": None}, lambda: per_launch(runner.launch_s(s.launches)))
    ]
    for e in s.launch_experts:
        base = {"name": f"{e} expert matmuls", "experts": e, "rows": s.launch_rows, "n": n, "k": k}
        items.append((base, expert_loop(e)))
    return run_records("launch", clock, items, runner)


def expert_loop_section(
    runner: Any, profiles: Profiles, s: Settings, clock: Clock
) -> dict[str, Any]:
    """Section 4: E matmuls of M rows against one GEMM of E·M rows, measured and priced
    (the cost model prices the loop as E x `gemm_time_s` of one expert)."""
    items = []
    for e, rows in s.loop_cases:
        _, _, n, k = expert_gemms(get_preset(s.expert_model), rows)[0]
        m, n, k = (shrink(dim, s.shrink) for dim in (rows, n, k))
        base = {"name": f"{e} x {m} rows", "experts": e, "m": m, "n": n, "k": k}
        items.append((base, loop_measure(runner, profiles, e, m, n, k)))
    return run_records("expert_loop", clock, items, runner)


def loop_measure(
    runner: Any, profiles: Profiles, e: int, m: int, n: int, k: int
) -> Callable[[], Record]:
    def measure() -> Record:
        loop_s, one_s = runner.expert_loop_s(e, m, n, k)
        return loop_record(profiles, e, m, n, k, loop_s, one_s)

    return measure


def loop_record(
    profiles: Profiles, e: int, m: int, n: int, k: int, loop_s: float, one_s: float
) -> Record:
    """The loop against e x the one-expert price, the single GEMM against its own price,
    and the loop / one ratios of both sides."""
    raw_1, priced_1 = gemm_model_s(profiles, m, n, k, "bf16")
    raw_all, priced_all = gemm_model_s(profiles, e * m, n, k, "bf16")
    return {
        **compared(loop_s, e * raw_1, e * priced_1),
        "one_gemm": compared(one_s, raw_all, priced_all),
        "measured_loop_over_one": loop_s / one_s,
        "model_loop_over_one": priced_1 * e / priced_all,
    }


def memory_section(runner: Any, profiles: Profiles, s: Settings, clock: Clock) -> dict[str, Any]:
    """Section 5: device copy and an element-wise add, GB/s against the profile."""
    items = []
    for kind, passes in (("copy", 2), ("add", 3)):
        for size in s.memory_bytes:
            base = {"name": f"{kind} {size >> 20} MiB", "kind": kind, "tensor_bytes": size}
            items.append((base, memory_measure(runner, profiles, kind, size, passes * size)))
    return run_records("memory", clock, items, runner)


def memory_measure(
    runner: Any, profiles: Profiles, kind: str, size: int, moved: int
) -> Callable[[], Record]:
    def measure() -> Record:
        return memory_record(profiles, moved, runner.memory_s(kind, size))

    return measure


def memory_record(profiles: Profiles, moved: int, seconds: float) -> Record:
    raw_s, priced_s = memory_model_s(profiles, moved)
    return {
        **compared(seconds, raw_s, priced_s),
        "bytes_moved": moved,
        "measured_GBps": moved / seconds / 1e9,
        "profile_GBps": profile_bandwidth_GBps(profiles, moved),
        "profile_peak_GBps": profiles.raw.device.hbm_GBps,
    }


def attention_section(runner: Any, profiles: Profiles, s: Settings, clock: Clock) -> dict[str, Any]:
    """Section 6: causal bf16 SDPA per model, sequence, backend and pass."""
    items = []
    for seq in s.attention_seqs:
        for name in ATTENTION_MODELS:
            shape = attention_shape(name, seq, s.head_divisor)
            for backend in s.sdpa_backends:
                for backward in (False, True):
                    pass_name = "forward+backward" if backward else "forward"
                    base = {
                        "name": f"{shape.label()} {backend} {pass_name}",
                        "backend": backend,
                        "pass": pass_name,
                        "model": name,
                        "heads": shape.heads,
                        "kv_heads": shape.kv_heads,
                        "head_dim": shape.head_dim,
                        "seq": seq,
                    }
                    items.append(
                        (base, attention_measure(runner, profiles, shape, backend, backward))
                    )
    return run_records("attention", clock, items, runner)


def attention_measure(
    runner: Any, profiles: Profiles, shape: Any, backend: str, backward: bool
) -> Callable[[], Record]:
    def measure() -> Record:
        seconds, gqa = runner.attention_s(
            backend, shape.heads, shape.kv_heads, shape.seq, shape.head_dim, backward
        )
        return {**attention_record(profiles, shape, backward, seconds), "gqa": gqa}

    return measure


def attention_record(profiles: Profiles, shape: Any, backward: bool, seconds: float) -> Record:
    """Measured seconds against the flash core's forward (plus backward) price."""
    fwd_raw, fwd_priced = attention_model_s(profiles, shape, "forward")
    raw_s, priced_s = fwd_raw, fwd_priced
    if backward:
        bwd_raw, bwd_priced = attention_model_s(profiles, shape, "backward")
        raw_s, priced_s = raw_s + bwd_raw, priced_s + bwd_priced
    return compared(seconds, raw_s, priced_s)
