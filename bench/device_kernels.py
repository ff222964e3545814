"""One-GPU kernel check of the cost model's fitted constants: times GEMMs, a sustained GEMM
soak, eager launches, per-expert GEMM loops, memory-bound kernels and attention on this
machine, and sets each figure against what the cost model prices for the same kernel on a
stored profile, raw and as the Megatron runtime prices it (`device_shapes`).

Sections, measured in order of value within ``--budget-s`` (each gets its share of what is
left; what does not fit is recorded as skipped with the reason):

1. ``gemm``: Llama 3 8B/70B layer GEMMs at tp 1/2/4/8 (8192 tokens) and per-expert GEMMs
   of four MoE presets at 256-8192 rows, bf16 and FP8 (e4m3, per-tensor scales);
2. ``soak``: one 8192³ GEMM back to back, rate, SM clock and power per 1-s window, against
   the fitted sustained 16-bit and FP8 factors (`costmodel.fitted_rates`);
3. ``launch``: seconds per eager launch (tiny adds; per-expert matmul loops) against
   `costmodel.fitted_rates.MOE_HOST_LAUNCH_S`;
6. ``attention``: causal bf16 SDPA per backend against
   `costmodel.attention_core.attention_core_time_s`;
4. ``expert_loop``: E matmuls of M rows against one GEMM of E·M rows;
5. ``memory``: device copy and element-wise add, GB/s against the profile.

On a CPU (``--device cpu``) every shape is shrunk (`device_shapes.shrink`) and FP8 is
skipped; the JSON has the same keys. Writes ``OUT/device_kernels.json`` (``meta``,
``sections``, ``summary``) and prints a table per section.

Run: ``python bench/device_kernels.py --out DIR [--quick] [--device cuda|cpu]
[--budget-s S] [--hardware h100-sxm-80gb]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from device_sections import (
    Clock,
    Settings,
    attention_section,
    expert_loop_section,
    gemm_section,
    launch_section,
    memory_section,
    progress,
    soak_section,
)
from device_shapes import TOKENS_PER_EXPERT, dense_shapes, expert_shapes, profiles_for

SECTIONS = (
    ("gemm", gemm_section, 0.30),
    ("soak", soak_section, 0.30),
    ("launch", launch_section, 0.05),
    ("attention", attention_section, 0.15),
    ("expert_loop", expert_loop_section, 0.10),
    ("memory", memory_section, 0.05),
)
"""(key, function, share of the budget) in the order measured."""
RESERVE_S = 3.0
"""Seconds of the budget kept for writing the results."""
CPU_SHRINK = 32
"""Divisor of GEMM dimensions on a CPU."""


def settings_for(device: str, quick: bool, fp8_skip: str | None) -> Settings:
    """What a run on ``device`` measures (module docstring)."""
    cpu = device == "cpu"
    shrink = CPU_SHRINK if cpu else 1
    tps, rows = ((1, 8), TOKENS_PER_EXPERT[::2]) if quick or cpu else ((1, 2, 4, 8), None)
    shapes = dense_shapes(tps=tps) + expert_shapes(rows=rows or TOKENS_PER_EXPERT)
    return Settings(
        gemm_shapes=tuple(s.shrunk(shrink) for s in shapes),
        soak_s=2.0 if quick else 45.0,
        soak_shape=(256, 256, 256) if cpu else (8192, 8192, 8192),
        launches=2000 if cpu else (5000 if quick else 20000),
        memory_bytes=(1 << 20, 1 << 22) if cpu else (1 << 24, 1 << 26, 1 << 28, 1 << 30),
        attention_seqs=(128,) if cpu else ((4096,) if quick else (4096, 8192)),
        head_divisor=8 if cpu else 1,
        shrink=shrink,
        fp8_skip=fp8_skip,
    )


def run(runner: Any, hardware: str, settings: Settings, budget_s: float) -> dict[str, Any]:
    """Every section in order within ``budget_s``; the sections and their summary."""
    profiles = profiles_for(hardware)
    total = Clock(budget_s - RESERVE_S)
    sections: dict[str, Any] = {}
    for i, (key, section, share) in enumerate(SECTIONS):
        left = total.left_s()
        cap = left * share / sum(s for _, _, s in SECTIONS[i:])
        if cap <= 0:
            reason = f"budget: {max(left, 0):.1f} s of --budget-s {budget_s:g} left"
            sections[key] = {"status": "skipped", "reason": reason, "elapsed_s": 0.0, "records": []}
            continue
        progress(f"section {key}: up to {cap:.0f} s")
        sections[key] = section(runner, profiles, settings, Clock(cap))
    return {"sections": sections, "summary": summarize(sections)}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _measured(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("measured_s") is not None]


def summarize(sections: dict[str, Any]) -> dict[str, Any]:
    """The figures to set against the fitted constants, one entry per section."""
    summary: dict[str, Any] = {}
    for key, section in sections.items():
        records = section["records"]
        summary[key] = {
            "status": section["status"],
            "measured": sum("error" not in r and "skipped" not in r for r in records),
            "errors": _errors(records),
            "skipped": sum("skipped" in r for r in records),
        }
    summary["gemm"]["by_group"] = _ratio_groups(
        sections["gemm"]["records"], lambda r: f"{r['shape']['group']} {r['dtype']}"
    )
    summary["attention"]["by_backend"] = _ratio_groups(
        sections["attention"]["records"], lambda r: f"{r['backend']} {r['pass']}"
    )
    summary["soak"]["by_dtype"] = {
        r["dtype"]: {k: r.get(k) for k in SOAK_SUMMARY} for r in sections["soak"]["records"]
    }
    summary["launch"]["per_launch_us"] = {
        r["name"]: r["measured_s"] * 1e6 for r in _measured(sections["launch"]["records"])
    }
    summary["expert_loop"]["loop_over_one"] = {
        r["name"]: {"measured": r["measured_loop_over_one"], "model": r["model_loop_over_one"]}
        for r in _measured(sections["expert_loop"]["records"])
    }
    summary["memory"]["measured_over_profile_GBps"] = {
        r["name"]: r["measured_GBps"] / r["profile_GBps"]
        for r in _measured(sections["memory"]["records"])
    }
    return summary


SOAK_SUMMARY = (
    "first_window_tflops",
    "last_10s_tflops",
    "last_over_first",
    "fitted_factor",
    "last_over_profile_raw",
    "first_sm_clock_mhz",
    "last_sm_clock_mhz",
    "first_power_w",
    "last_power_w",
    "skipped",
    "error",
)
"""Keys of a soak record the summary repeats."""


SHOWN_ERRORS = 5
"""Errors a section's summary quotes; the records keep every one, in full."""
SHOWN_ERROR_CHARS = 200
"""Characters of each error the summary quotes."""


def _errors(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How many measurements failed, and the first `SHOWN_ERRORS` with their names."""
    failed = [f"{r['name']} {r.get('dtype', '')}: {r['error']}" for r in records if "error" in r]
    return {"count": len(failed), "first": [e[:SHOWN_ERROR_CHARS] for e in failed[:SHOWN_ERRORS]]}


def _ratio_groups(records: list[dict[str, Any]], key: Any) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in _measured(records):
        groups.setdefault(key(r), []).append(r)
    return {
        name: {
            "n": len(rows),
            "median_ratio_raw": _median([r["ratio_raw"] for r in rows]),
            "median_ratio_priced": _median([r["ratio_priced"] for r in rows]),
        }
        for name, rows in groups.items()
    }


COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "gemm": (("dtype", "dtype"), ("ms", "measured_s"), ("TFLOP/s", "measured_tflops")),
    "soak": (
        ("dtype", "dtype"),
        ("first TF", "first_window_tflops"),
        ("last10 TF", "last_10s_tflops"),
        ("last/first", "last_over_first"),
        ("fitted", "fitted_factor"),
        ("last/profile", "last_over_profile_raw"),
        ("MHz first", "first_sm_clock_mhz"),
        ("MHz last", "last_sm_clock_mhz"),
        ("W first", "first_power_w"),
        ("W last", "last_power_w"),
    ),
    "launch": (("us", "measured_us"), ("fitted us", "fitted_us"), ("/fitted", "ratio_fitted")),
    "attention": (("gqa", "gqa"), ("ms", "measured_s")),
    "expert_loop": (
        ("ms", "measured_s"),
        ("loop/one", "measured_loop_over_one"),
        ("model loop/one", "model_loop_over_one"),
    ),
    "memory": (("ms", "measured_s"), ("GB/s", "measured_GBps"), ("profile GB/s", "profile_GBps")),
}
"""Columns of each section's table besides the name, the priced seconds and the ratios."""
PRICED = (
    ("raw ms", "model_raw_s"),
    ("priced ms", "model_priced_s"),
    ("/raw", "ratio_raw"),
    ("/priced", "ratio_priced"),
)
"""The priced seconds and ratios, last columns of every table but the soak's and the
launches' (which compare with a fitted factor and a fitted launch time instead)."""


NAME_WIDTH = 56
"""Characters of the name column."""


def _cell(record: dict[str, Any], key: str) -> str:
    if key in ("measured_us", "fitted_us"):
        value = record.get(key.replace("_us", "_s"))
        value = value * 1e6 if value is not None else None
    else:
        value = record.get(key)
        value = value * 1e3 if key.endswith("_s") and value is not None else value
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table(key: str, section: dict[str, Any]) -> str:
    """The section's records as a text table; errors and skips in the last column."""
    columns = COLUMNS[key] + (PRICED if key not in ("soak", "launch") else ())
    lines = [f"## {key}: {section['status']} in {section['elapsed_s']:.1f} s"]
    if section.get("reason"):
        lines.append(section["reason"])
    lines.append("  ".join([f"{'name':{NAME_WIDTH}}", *(f"{h:>10}" for h, _ in columns), "note"]))
    for r in section["records"]:
        note = r.get("error") or r.get("skipped") or ""
        cells = (f"{_cell(r, k):>10}" for _, k in columns)
        lines.append("  ".join([f"{r['name'][:NAME_WIDTH]:{NAME_WIDTH}}", *cells, note]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for device_kernels.json")
    parser.add_argument("--quick", action="store_true", help="fewer shapes, 2-s soaks")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--budget-s", type=float, default=360.0, help="wall seconds in all")
    parser.add_argument("--hardware", default="h100-sxm-80gb", help="stored profile to price on")
    args = parser.parse_args(argv)
    started = time.monotonic()
    from device_timing import TimingPlan, TorchRunner  # torch starts here, after the flags

    cpu = args.device == "cpu"
    plan = (
        TimingPlan(warmup=1, target_s=0.005, min_reps=2, max_reps=20)
        if cpu
        else TimingPlan(warmup=3, target_s=0.02 if args.quick else 0.1, min_reps=5, max_reps=500)
    )
    runner = TorchRunner(args.device, plan)
    settings = settings_for(args.device, args.quick, runner.fp8_unsupported())
    result = run(runner, args.hardware, settings, args.budget_s - (time.monotonic() - started))
    meta = {
        **runner.describe(),
        "hardware": args.hardware,
        "quick": args.quick,
        "budget_s": args.budget_s,
        "shrink": settings.shrink,
        "timing": dataclasses.asdict(plan),
        "soak_s": settings.soak_s,
        "gemm_shapes": len(settings.gemm_shapes),
        "elapsed_s": time.monotonic() - started,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "device_kernels.json").write_text(json.dumps({"meta": meta, **result}, indent=1))
    for key, section in result["sections"].items():
        print(table(key, section), end="\n\n")
    print(f"wrote {out / 'device_kernels.json'} in {meta['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
