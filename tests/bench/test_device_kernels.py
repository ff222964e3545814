"""bench/device_kernels.py: its shapes against hand-computed values, the cost-model side of
its records against known fake timings, the budget and error handling through a fake
runner, and one CPU run of the script (every section key present)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3
from tests.bench.bench_loader import BENCH, load_bench

shapes = load_bench("device_shapes")
sections = load_bench("device_sections")
kernels = load_bench("device_kernels")

ROOT = BENCH.parent
KEYS = ("gemm", "soak", "launch", "attention", "expert_loop", "memory")


@pytest.fixture(scope="module")
def profiles():
    return shapes.profiles_for("h100-sxm-80gb")


def _find(found, **want):
    (match,) = [s for s in found if all(getattr(s, k) == v for k, v in want.items())]
    return match.m, match.n, match.k


def test_llama3_70b_tp8_qkv_passes_from_the_preset() -> None:
    dense = shapes.dense_shapes(models=("llama3-70b",), tps=(8,))
    qkv = (8192, (8192 + 2 * 1024) // 8, 8192)  # 64 heads x 128, 8 groups x 128, h 8192
    assert _find(dense, gemm="qkv", pass_name="forward") == qkv
    assert _find(dense, gemm="qkv", pass_name="dgrad") == (8192, 8192, 1280)
    assert _find(dense, gemm="qkv", pass_name="wgrad") == (8192, 1280, 8192)
    assert _find(dense, gemm="proj", pass_name="forward") == (8192, 8192, 1024)
    assert _find(dense, gemm="fc1", pass_name="forward") == (8192, 2 * 28672 // 8, 8192)
    assert _find(dense, gemm="fc2", pass_name="forward") == (8192, 8192, 28672 // 8)


def test_llama3_8b_shapes_and_replicated_kv_heads() -> None:
    dense = shapes.dense_shapes(models=("llama3-8b",), tps=(2, 16))
    assert _find(dense, tp=2, gemm="fc1", pass_name="forward") == (8192, 14336, 4096)
    # tp 16 over 8 query groups: one replicated kv head of 128 per rank.
    assert _find(dense, tp=16, gemm="qkv", pass_name="forward") == (8192, 256 + 2 * 128, 4096)


def test_expert_shapes_from_the_presets() -> None:
    experts = shapes.expert_shapes(rows=(2048,))
    qwen = {"model": "qwen3-30b-a3b", "pass_name": "forward"}
    assert _find(experts, gemm="fc1", **qwen) == (2048, 2 * 768, 2048)
    assert _find(experts, gemm="fc2", **qwen) == (2048, 2048, 768)
    oss = {"model": "gpt-oss-120b", "pass_name": "forward"}
    assert _find(experts, gemm="fc1", **oss) == (2048, 2 * 2880, 2880)
    ds = {"model": "deepseek-v3", "pass_name": "wgrad"}
    assert _find(experts, gemm="fc2", **ds) == (2048, 7168, 2048)


def test_pass_shapes_give_forward_dgrad_wgrad_of_each_gemm_in_order() -> None:
    gemms = (("fc1", 64, 32, 16), ("fc2", 64, 16, 32))
    found = shapes.pass_shapes("expert", "m", gemms, tp=1, rows=64)
    assert [(s.gemm, s.pass_name) for s in found] == [
        (g, p) for g in ("fc1", "fc2") for p in ("forward", "dgrad", "wgrad")
    ]
    # (m x k) @ (k x n) forward; dgrad (m x n) @ (n x k); wgrad (k x m) @ (m x n)
    assert [(s.m, s.n, s.k) for s in found[:3]] == [(64, 32, 16), (64, 16, 32), (16, 32, 64)]
    assert {(s.group, s.model, s.tp, s.rows) for s in found} == {("expert", "m", 1, 64)}


def test_shape_counts_and_shrink() -> None:
    assert len(shapes.dense_shapes()) == 2 * 4 * 4 * 3
    assert len(shapes.expert_shapes()) == 4 * 6 * 2 * 3
    assert [shapes.shrink(d, 32) for d in (8192, 1536, 100, 14336)] == [256, 48, 16, 448]
    assert shapes.shrink(1000, 1) == 1000


def test_gemm_passes_priced_as_the_megatron_layer_prices_them(profiles) -> None:
    x = LayerShape(
        tokens=8192,
        norm_tokens=1024,
        seq=8192,
        span=8192,
        micro_batch=1,
        cp=1,
        tp=8,
        sp=True,
        elem=2,
        dtype="bf16",
        precision="bf16",
    )
    m, n, k = 8192, 1280, 8192
    ours = [
        shapes.gemm_model_s(profiles, pm, pn, pk, "bf16")[1]
        for _, pm, pn, pk in shapes.gemm_passes(m, n, k)
    ]
    assert ours == list(gemm3(profiles.priced, x, m, n, k))


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_gemm_record_ratios_for_a_fake_timing(profiles, dtype) -> None:
    m = n = k = 8192
    raw_s, priced_s = shapes.gemm_model_s(profiles, m, n, k, dtype)
    record = sections.gemm_record(profiles, m, n, k, dtype, 2.0 * priced_s)
    assert record["ratio_priced"] == pytest.approx(2.0)
    assert record["ratio_raw"] == pytest.approx(2.0 * priced_s / raw_s)
    assert record["measured_tflops"] == pytest.approx(2.0 * m * n * k / (2.0 * priced_s) / 1e12)
    # A compute-bound GEMM: the priced profile is the raw one at the fitted factor.
    factor = shapes.fitted_gemm_factor(profiles, dtype)
    assert priced_s == pytest.approx(raw_s / factor)


def test_records_without_a_measurement_have_no_ratio() -> None:
    record = shapes.compared(None, 1.0, 2.0)
    assert record["ratio_raw"] is None and record["ratio_priced"] is None


def test_attention_and_memory_records(profiles) -> None:
    shape = shapes.attention_shape("llama3-70b", 4096)
    assert (shape.heads, shape.kv_heads, shape.head_dim) == (64, 8, 128)
    forward = shapes.attention_model_s(profiles, shape, "forward")[1]
    backward = shapes.attention_model_s(profiles, shape, "backward")[1]
    record = sections.attention_record(profiles, shape, True, 3.0 * (forward + backward))
    assert record["ratio_priced"] == pytest.approx(3.0)
    moved = 3 * (1 << 28)
    memory = sections.memory_record(profiles, moved, 1e-3)
    assert memory["measured_GBps"] == pytest.approx(moved / 1e-3 / 1e9)
    assert memory["ratio_raw"] == pytest.approx(1e-3 / shapes.memory_model_s(profiles, moved)[0])


def test_loop_record_prices_the_loop_per_expert(profiles) -> None:
    one = shapes.gemm_model_s(profiles, 256, 1536, 2048, "bf16")[1]
    flat = shapes.gemm_model_s(profiles, 32 * 256, 1536, 2048, "bf16")[1]
    record = sections.loop_record(profiles, 32, 256, 1536, 2048, 64 * one, flat)
    assert record["ratio_priced"] == pytest.approx(2.0)
    assert record["one_gemm"]["ratio_priced"] == pytest.approx(1.0)
    assert record["model_loop_over_one"] == pytest.approx(32 * one / flat)


@dataclass
class Window:
    end_s: float
    flops_per_s: float
    sm_clock_mhz: float | None = None
    power_w: float | None = None


def test_soak_record_first_window_against_last_ten_seconds(profiles) -> None:
    windows = [Window(end_s=t, flops_per_s=1e15 if t == 1 else 8e14) for t in range(1, 31)]
    record = sections.soak_record(profiles, (8192, 8192, 8192), "bf16", windows)
    assert record["first_window_tflops"] == pytest.approx(1000.0)
    assert record["last_10s_tflops"] == pytest.approx(800.0)
    assert record["last_over_first"] == pytest.approx(0.8)
    assert record["fitted_factor"] == shapes.fitted_gemm_factor(profiles, "bf16")


class FakeRunner:
    """Every kernel takes ``seconds``; attention on the cudnn backend raises."""

    seconds = 1e-3

    def gemm_s(self, m, n, k, dtype, pass_name):
        return self.seconds

    def soak(self, m, n, k, dtype, duration_s, window_s):
        return [Window(end_s=t, flops_per_s=1e15) for t in (1.0, 2.0, 3.0)]

    def launch_s(self, launches):
        return self.seconds

    def expert_launch_s(self, experts, rows, n, k, launches):
        return self.seconds

    def expert_loop_s(self, experts, rows, n, k):
        return self.seconds, self.seconds / 4

    def memory_s(self, kind, tensor_bytes):
        return self.seconds

    def attention_s(self, backend, heads, kv_heads, seq, head_dim, backward):
        if backend == "cudnn":
            raise RuntimeError("no cudnn here")
        return self.seconds, "enable_gqa"

    def release(self):
        pass


def _settings(fp8_skip=None):
    return sections.Settings(
        gemm_shapes=tuple(shapes.dense_shapes(models=("llama3-8b",), tps=(8,))),
        soak_s=3.0,
        soak_shape=(8192, 8192, 8192),
        attention_seqs=(4096,),
        fp8_skip=fp8_skip,
    )


def test_run_with_a_fake_runner_records_every_section() -> None:
    result = kernels.run(FakeRunner(), "h100-sxm-80gb", _settings(), budget_s=120.0)
    assert tuple(result["sections"]) == KEYS
    assert all(s["status"] == "done" for s in result["sections"].values())
    gemm = result["sections"]["gemm"]["records"]
    assert len(gemm) == 2 * 12
    assert all(r["ratio_priced"] == pytest.approx(1e-3 / r["model_priced_s"]) for r in gemm)
    attention = result["sections"]["attention"]["records"]
    assert sum("error" in r for r in attention) == 4  # 2 models x 2 passes on cudnn
    assert result["summary"]["attention"]["errors"]["count"] == 4
    assert result["summary"]["soak"]["by_dtype"]["bf16"]["last_over_first"] == 1.0
    assert result["summary"]["launch"]["per_launch_us"]["tiny add_"] == pytest.approx(1e3)


def test_run_records_fp8_skips_and_an_exhausted_budget() -> None:
    result = kernels.run(FakeRunner(), "h100-sxm-80gb", _settings("no fp8 here"), 120.0)
    fp8 = [r for r in result["sections"]["gemm"]["records"] if r["dtype"] == "fp8"]
    assert fp8 and all(r["skipped"] == "no fp8 here" for r in fp8)
    spent = kernels.run(FakeRunner(), "h100-sxm-80gb", _settings(), kernels.RESERVE_S)
    assert all(s["status"] == "skipped" for s in spent["sections"].values())
    assert all("budget" in s["reason"] for s in spent["sections"].values())


def test_run_records_cut_by_the_section_clock() -> None:
    ticks = iter(range(100))
    clock = sections.Clock(2.5, now=lambda: float(next(ticks)))
    items = [({"name": str(i)}, lambda: {"measured_s": 1.0}) for i in range(5)]
    section = sections.run_records("t", clock, items, FakeRunner())
    assert section["status"] == "partial"
    assert [("skipped" in r) for r in section["records"]] == [False, False, True, True, True]


@pytest.mark.slow
def test_quick_cpu_run_writes_every_section(tmp_path: Path) -> None:
    env_path = f"{ROOT}:{BENCH}"
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "device_kernels.py"),
            "--out",
            str(tmp_path),
            "--quick",
            "--device",
            "cpu",
            "--budget-s",
            "30",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": env_path},
        timeout=120,
    )
    data = json.loads((tmp_path / "device_kernels.json").read_text())
    assert tuple(data["sections"]) == KEYS
    assert set(data["summary"]) == set(KEYS)
    assert data["meta"]["device"] == "cpu" and data["meta"]["shrink"] == kernels.CPU_SHRINK
    fp8 = [r for r in data["sections"]["gemm"]["records"] if r["dtype"] == "fp8"]
    assert fp8 and all("cuda" in r["skipped"].lower() for r in fp8)
    measured = [r for r in data["sections"]["gemm"]["records"] if r.get("measured_s")]
    assert measured and all(r["ratio_raw"] > 0 for r in measured)
