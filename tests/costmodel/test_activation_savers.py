"""Per-module selective recompute and CPU activation offloading in the Megatron runtime:
memory drops by exactly the saved tensors each module owns (Megatron-core
``recompute_modules`` / ``offload_modules``, `costmodel.activation_savers`), time grows by
the module's rerun forward, and offload copies are bounded by the host link.

Megatron's own ``theoretical_memory_usage`` (megatron/training/theoretical_memory_usage.py)
models neither per-module recompute nor offloading, so these cases are checked against the
tensor counts of `costmodel.activations`, not against a Megatron golden value."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.activation_savers import offloaded_bytes, recomputed_bytes
from costmodel.activations import stage_activations
from costmodel.host_link import host_link_Bps
from costmodel.layer_activations import layer_activations
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.saver_costs import offload_exposed_s
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

LLAMA = get_preset("llama3-8b")
DEEPSEEK = get_preset("deepseek-v3")
JOB = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
BASE = ParallelPlan(tp=2, dp=4, sequence_parallel=True)
H100 = load_profile("h100-sxm-80gb")
GB200 = load_profile("gb200-nvl72")


def _tensors(model=LLAMA, plan=BASE, index=0) -> dict[str, float]:
    return dict(layer_activations(model, JOB, plan, index).tensors)


def test_named_tensors_sum_to_the_layer() -> None:
    for model, index in ((LLAMA, 0), (DEEPSEEK, 0), (DEEPSEEK, 5)):
        layer = layer_activations(model, JOB, BASE, index)
        assert sum(v for _, v in layer.tensors) == pytest.approx(layer.full_bytes)


@pytest.mark.parametrize(
    ("modules", "names"),
    [
        (("layernorm",), ("qkv_input", "fc1_input")),
        (("mlp",), ("fc1_input", "fc1_output", "act_output")),
        (("core_attn", "layernorm"), ("core_attention", "qkv_input", "fc1_input")),
    ],
)
def test_recompute_frees_the_modules_saved_tensors(modules, names) -> None:
    plan = BASE.replace(recompute="selective", recompute_modules=modules)
    t = _tensors()
    freed = sum(t[n] for n in names)
    none = stage_activations(LLAMA, JOB, BASE, 0)
    chosen = stage_activations(LLAMA, JOB, plan, 0)
    held = none.in_flight_microbatches * LLAMA.num_layers
    assert none.layers_bytes - chosen.layers_bytes == pytest.approx(held * freed)
    assert chosen.recompute_working_bytes == pytest.approx(freed)


def test_default_selective_is_unchanged_by_naming_core_attn() -> None:
    default = stage_activations(LLAMA, JOB, BASE.replace(recompute="selective"), 0)
    named = BASE.replace(recompute="selective", recompute_modules=("core_attn",))
    assert stage_activations(LLAMA, JOB, named, 0) == default


def test_mla_and_moe_modules_free_their_tensors() -> None:
    moe = _tensors(DEEPSEEK, index=5)
    assert recomputed_bytes(tuple(moe.items()), ("moe_act",)) == moe["expert_act_output"]
    assert recomputed_bytes(tuple(moe.items()), ("mla_up_proj",)) == moe["qkv_heads"]
    # a recomputed tensor is not offloaded again
    both = offloaded_bytes(tuple(moe.items()), ("core_attn", "attn_proj"), ("mla_up_proj",))
    assert both == pytest.approx(moe["attn_output"])


def test_layer_offloading_keeps_one_layer_in_flight() -> None:
    plan = BASE.replace(cpu_offloading_num_layers=12)
    full = layer_activations(LLAMA, JOB, BASE, 0).full_bytes
    none = stage_activations(LLAMA, JOB, BASE, 0)
    off = stage_activations(LLAMA, JOB, plan, 0)
    # pp = 1: one microbatch in flight; (L - N) layers stay (Transformer Engine's
    # get_cpu_offload_context docstring: "(num_layers - num_offloaded_layers) * T")
    assert none.in_flight_microbatches == 1
    assert none.layers_bytes - off.layers_bytes == pytest.approx(12 * full)
    assert off.offloaded_bytes == pytest.approx(12 * full)


def test_fine_grained_offloading_moves_the_module_inputs() -> None:
    plan = BASE.replace(offload_modules=("core_attn", "attn_proj"))
    t = _tensors()
    moved = t["qkv_heads"] + t["attn_output"]
    none = stage_activations(LLAMA, JOB, BASE, 0)
    off = stage_activations(LLAMA, JOB, plan, 0)
    assert none.layers_bytes - off.layers_bytes == pytest.approx((LLAMA.num_layers - 1) * moved)


def test_recompute_time_is_the_modules_forward() -> None:
    def rerun(modules):
        plan = BASE.replace(recompute="selective", recompute_modules=modules)
        return layer_cost(LLAMA, JOB, plan, H100, kind=DENSE_LAYER).recompute.duration_s

    whole = layer_cost(LLAMA, JOB, BASE.replace(recompute="full"), H100, kind=DENSE_LAYER)
    mlp, core, norm = rerun(("mlp",)), rerun(("core_attn",)), rerun(("layernorm",))
    assert 0 < norm < mlp < whole.forward.duration_s
    assert rerun(("mlp", "core_attn", "layernorm")) == pytest.approx(mlp + core + norm)
    assert rerun(()) == 0.0
    plain = layer_cost(LLAMA, JOB, BASE, H100, kind=DENSE_LAYER)
    chosen = layer_cost(
        LLAMA,
        JOB,
        BASE.replace(recompute="selective", recompute_modules=("mlp",)),
        H100,
        kind=DENSE_LAYER,
    )
    assert chosen.forward == plain.forward and chosen.backward == plain.backward


def test_offload_copies_are_bounded_by_the_host_link() -> None:
    assert host_link_Bps(H100) == 64e9 and host_link_Bps(GB200) == 450e9
    moved = 10e9
    assert offload_exposed_s(H100, moved, 0.0, 0.0) == pytest.approx((moved / 64e9,) * 2)
    assert offload_exposed_s(H100, moved, 1.0, 1.0) == (0.0, 0.0)
    plan = BASE.replace(offload_modules=("core_attn", "attn_proj"))
    t = _tensors()
    copy_s = (t["qkv_heads"] + t["attn_output"]) / host_link_Bps(H100)
    plain = layer_cost(LLAMA, JOB, BASE, H100, kind=DENSE_LAYER)
    off = layer_cost(LLAMA, JOB, plan, H100, kind=DENSE_LAYER)
    added = off.forward.duration_s - plain.forward.duration_s
    assert max(copy_s - plain.forward.compute_s, 0.0) == pytest.approx(added, abs=1e-12)
    assert added <= copy_s


def test_unknown_device_has_no_host_link() -> None:
    device = dataclasses.replace(H100.device, name="Example accelerator")
    with pytest.raises(SpecError, match="host_link"):
        host_link_Bps(dataclasses.replace(H100, device=device))
