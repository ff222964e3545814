"""FlashAttention-2-class kernels (`ExecutionOptions.flash_attention_version` 2,
`costmodel.flash_attention2`): the FA2/FA3 ratio of the FA3 paper on an FA3 profile, no
change on an FA2 profile or under the torch runtime, and a long-sequence layer slower by
its attention core alone."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import framework_profile
from costmodel.flash_attention2 import flash_attention_rate
from costmodel.flops import core_attention_forward_flops_per_token
from costmodel.runtimes.megatron.layer_costs import layer_cost
from profiles.lookup import attention_tflops, memory_bandwidth_Bps
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.plan import ParallelPlan
from tests.costmodel.test_execution import A100, BARE, LLAMA

H100 = load_profile("h100-sxm-80gb")


def test_flash_attention_version_is_validated():
    with pytest.raises(SpecError, match="flash_attention_version"):
        ExecutionOptions(flash_attention_version=1)


def test_fa2_rate_matches_the_fa3_paper_ends_on_an_fa3_profile():
    # FA3 paper (arXiv 2407.08608), H100, head dim 128, causal, 16k tokens: FA2 forward
    # 335 TFLOP/s and backward 322 at sequence 16k against FA3's 616 and 561 (hardware.md §2b).
    fa2 = framework_profile(H100, dataclasses.replace(BARE, flash_attention_version=2))
    for direction, fa3_tflops, fa2_tflops in (
        ("forward", 616.0, 335.0),
        ("backward", 561.0, 322.0),
    ):
        full = attention_tflops(H100, direction, 16384, 128, "bf16")
        assert full == pytest.approx(fa3_tflops)
        assert attention_tflops(fa2, direction, 16384, 128, "bf16") == pytest.approx(fa2_tflops)
        # Longer sequences hold the last point of the curve, and its ratio.
        assert attention_tflops(fa2, direction, 1 << 20, 128, "bf16") == pytest.approx(fa2_tflops)
    # In between, the ratio moves monotonically from the 512 end to the 16k end.
    ratios = [flash_attention_rate("forward", s) for s in (256, 512, 2048, 16384, 65536)]
    assert ratios[0] == ratios[1] == pytest.approx(191 / 292)
    assert ratios[1] > ratios[2] > ratios[3] == ratios[4] == pytest.approx(335 / 616)
    # bf16 GEMMs and memory-bound rates are untouched.
    assert fa2.compute.gemm_efficiency["bf16"] == H100.compute.gemm_efficiency["bf16"]
    assert memory_bandwidth_Bps(fa2) == memory_bandwidth_Bps(H100)


def test_fa2_option_leaves_an_fa2_profile_and_the_torch_runtime_alone():
    # The A100 profile's attention curves are FlashAttention-2's already.
    old = dataclasses.replace(BARE, flash_attention_version=2)
    assert A100.compute.attention_kernel == "FlashAttention-2"
    assert framework_profile(A100, old) is A100
    torch_fa2 = dataclasses.replace(old, runtime="torch")
    assert framework_profile(H100, torch_fa2) is H100


def test_fa2_attention_slows_a_long_sequence_layer():
    job = TrainingJob(seq_length=32768, global_batch_size=8, precision="bf16")
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=True)
    old = dataclasses.replace(BARE, flash_attention_version=2)
    new_layer = layer_cost(LLAMA, job, plan, H100, kind=DENSE_LAYER)
    old_layer = layer_cost(LLAMA, job, plan, framework_profile(H100, old), kind=DENSE_LAYER)
    core_fwd_s = _core_forward_s(LLAMA, job, plan)
    # The forward grows by the attention core's extra time, nothing else.
    extra = core_fwd_s * (616 / 335 - 1)
    assert old_layer.forward.compute_s - new_layer.forward.compute_s == pytest.approx(
        extra, rel=1e-6
    )


def _core_forward_s(model, job, plan):
    tokens = plan.micro_batch_size * job.seq_length / plan.cp
    flops = core_attention_forward_flops_per_token(model, job.seq_length) * tokens / plan.tp
    return flops / (616e12)
