"""`paraplan.time_assumptions`: the fitted figures `estimate` and `plan` name under their
tables, with the source of each (the profile's generation, the shared value, the options)."""

from __future__ import annotations

import dataclasses

from costmodel.execution_presets import DEFAULT_OPTIONS, device_options
from costmodel.fitted_rates import (
    FP8_GEMM_RATE_FACTORS,
    MOE_EXPERT_LAUNCH_S,
    MOE_HOST_LAUNCH_S,
    MOE_TOKEN_DEVICE_HBM_GBPS,
    MOE_TOKEN_DEVICE_S,
    SUSTAINED_GEMM_RATE_SHARED,
)
from paraplan.commands import estimate
from paraplan.time_assumptions import time_assumptions
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile
from tests.paraplan.cli_helpers import parse_estimate

H100 = load_profile("h100-sxm-80gb")
B300 = load_profile("b300")
QWEN = get_preset("qwen3-30b-a3b")
LLAMA = get_preset("llama3-8b")
FP8 = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
BF16 = TrainingJob(seq_length=4096, global_batch_size=64, precision="bf16")


def lines(model, job, profile, options=DEFAULT_OPTIONS) -> str:
    return "\n".join(time_assumptions(model, job, device_options(options, profile), profile))


def test_a_moe_fp8_job_on_h100_names_both_fitted_moe_figures_and_where_they_were_fitted():
    text = lines(QWEN, FP8, H100)
    assert f"FP8 GEMMs at {FP8_GEMM_RATE_FACTORS['hopper']:g} of the profile's rate" in text
    assert "(fitted for hopper)" in text
    assert f"{MOE_HOST_LAUNCH_S * 1e6:g} us of host time per eager Python-level launch" in text
    expert_us = MOE_EXPERT_LAUNCH_S * 1e6
    assert f"{expert_us:g} us per launch Transformer Engine issues per local expert" in text
    scaled_ns = MOE_TOKEN_DEVICE_S * 1e9 * MOE_TOKEN_DEVICE_HBM_GBPS / H100.device.hbm_GBps
    assert f"{scaled_ns:.0f} ns of device time per token" in text
    assert (
        f"({MOE_TOKEN_DEVICE_S * 1e9:g} ns at 8,000 GB/s of HBM, scaled to the profile's 3,350)"
        in text
    )
    assert text.endswith("; none of hopper")
    assert "none of" not in lines(QWEN, FP8, B300)


def test_a_generation_without_dense_16bit_runs_takes_the_shared_factor():
    text = lines(LLAMA, BF16, load_profile("b200"))
    assert f"16-bit GEMMs at {SUSTAINED_GEMM_RATE_SHARED:g} of the profile's rate" in text
    assert "shared by generations without runs of their own, blackwell among them" in text
    assert "MoE layers" not in text


def test_options_that_set_a_factor_are_named_as_its_source():
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_gemm_rate_factor=0.9)
    text = lines(LLAMA, FP8, H100, options)
    assert "FP8 GEMMs at 0.9 of the profile's rate (set by the execution options)" in text


def test_nothing_is_named_for_the_torch_runtime_or_a_cpu():
    torch = dataclasses.replace(DEFAULT_OPTIONS, runtime="torch")
    assert time_assumptions(QWEN, FP8, torch, H100) == []
    assert time_assumptions(QWEN, BF16, DEFAULT_OPTIONS, cpu_profile()) == []


def test_estimate_prints_them_after_the_memory_assumptions(capsys):
    base = ["--model", "qwen3-30b-a3b", "--hardware", "h100-sxm-80gb", "--num-gpus", "16"]
    base += ["--seq-len", "4096", "--global-batch", "64", "--ep", "16", "--precision", "fp8"]
    assert estimate.run(parse_estimate(base)) == 0
    out = capsys.readouterr().out
    assert out.index("memory assumes") < out.index("time assumes") < out.index("MoE layers")


def test_a_host_driven_all_to_all_overlap_is_named_with_its_published_evidence():
    from paraplan.time_assumptions import HOST_DRIVEN_OVERLAP_LINE
    from specs.plan import ParallelPlan

    overlap = dataclasses.replace(DEFAULT_OPTIONS, moe_a2a_overlap=True)
    assert HOST_DRIVEN_OVERLAP_LINE in lines(QWEN, FP8, B300, overlap).splitlines()
    graphed = dataclasses.replace(overlap, cuda_graph_scopes=frozenset({"full_iteration"}))
    assert HOST_DRIVEN_OVERLAP_LINE not in lines(QWEN, FP8, B300, graphed)
    assert HOST_DRIVEN_OVERLAP_LINE not in lines(QWEN, FP8, B300)
    applies = ParallelPlan(ep=8, dp=8)
    no_ep = ParallelPlan(dp=8)  # Megatron-core takes the overlap only with ep > 1
    resolved = device_options(overlap, B300)
    assert HOST_DRIVEN_OVERLAP_LINE in time_assumptions(QWEN, FP8, resolved, B300, applies)
    assert HOST_DRIVEN_OVERLAP_LINE not in time_assumptions(QWEN, FP8, resolved, B300, no_ep)
    assert HOST_DRIVEN_OVERLAP_LINE not in lines(LLAMA, FP8, B300, overlap)


def test_estimate_names_the_overlap_caveat_unless_the_whole_step_is_one_graph(capsys):
    base = ["--model", "qwen3-30b-a3b", "--hardware", "b300", "--num-gpus", "8", "--ep", "8"]
    base += ["--seq-len", "4096", "--global-batch", "64", "--precision", "fp8"]
    base += ["--overlap-moe-expert-parallel-comm"]
    assert estimate.run(parse_estimate(base)) == 0
    assert "MoE all-to-all overlap" in capsys.readouterr().out
    assert estimate.run(parse_estimate([*base, "--cuda-graph-impl", "full_iteration"])) == 0
    assert "MoE all-to-all overlap" not in capsys.readouterr().out
