"""The search space under FP8 delayed scaling (`planner.fp8_space.space_for_fp8_recipe`):
no recompute set Transformer Engine refuses there is generated
(`costmodel.saved_inputs.delayed_scaling_problem`), and a fixed one is refused."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.saved_inputs import DELAYED_SAVE_INPUT_RULE
from planner.fp8_space import space_for_fp8_recipe
from planner.knob_generators import recompute_module_sets
from planner.space import SearchSpace
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.presets import get_preset

DSV3 = get_preset("deepseek-v3")
FP8 = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
BF16 = TrainingJob(seq_length=4096, global_batch_size=64)
DELAYED = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="delayed")
TENSORWISE = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")


def test_delayed_scaling_drops_the_sets_that_save_original_inputs():
    space = space_for_fp8_recipe(SearchSpace(), DSV3, FP8, DELAYED)
    generated = recompute_module_sets(DSV3, space)
    assert generated  # mla_up_proj and moe stay
    assert all("layernorm" not in s and "moe_act" not in s for s in generated)
    assert set(recompute_module_sets(DSV3, SearchSpace())) > set(generated)


def test_other_recipes_and_bf16_keep_every_set():
    for job, options in ((FP8, TENSORWISE), (BF16, DELAYED)):
        assert space_for_fp8_recipe(SearchSpace(), DSV3, job, options) == SearchSpace()


@pytest.mark.parametrize(
    "fixed",
    [
        {"recompute": "selective", "recompute_modules": ("layernorm", "moe_act")},
        {"offload_modules": ("expert_fc1",)},
    ],
)
def test_a_fixed_refused_saver_is_a_spec_error(fixed):
    with pytest.raises(SpecError, match=DELAYED_SAVE_INPUT_RULE):
        space_for_fp8_recipe(SearchSpace(fixed=fixed), DSV3, FP8, DELAYED)
    assert space_for_fp8_recipe(SearchSpace(fixed=fixed), DSV3, FP8, TENSORWISE)
