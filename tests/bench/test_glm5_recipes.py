"""bench/glm5_recipes.py: Megatron-Bridge v0.6.0's GLM-5.1 / GLM-5.2 perf recipes
(``perf_recipes/glm_moe_dsa``) as plans the rules accept, and priced."""

from __future__ import annotations

import pytest

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.pipeline_split import pipeline_split
from specs.presets import get_preset
from specs.rules import check_plan
from tests.bench.bench_loader import load_bench

recipes = load_bench("glm5_recipes")


@pytest.mark.parametrize("recipe", recipes.RECIPES, ids=lambda r: r.name)
def test_every_recipe_is_a_valid_plan(recipe) -> None:
    model = get_preset(recipe.model)
    cluster = ClusterSpec(hardware=recipe.hardware, num_gpus=recipe.num_gpus)
    job = TrainingJob(seq_length=recipes.SEQ_LENGTH, global_batch_size=recipe.global_batch_size)
    assert check_plan(model, cluster, job, recipe.plan) == []


def test_h100_glm52_layout_keeps_index_sharing_in_chunks() -> None:
    # 26 virtual stages: layers 1 and 2 alone, three empty chunks, then chunks of 4 layers
    # that start on layers 3, 7, 11, ... (the layers that compute their top-k)
    recipe = recipes.RECIPES[3]
    split = pipeline_split(get_preset("glm-5.2"), recipe.plan)
    starts = [c.layers.start + 1 for c in split.in_forward_order() if len(c.layers) == 4]
    assert starts == list(range(3, 79, 4))


def test_each_recipe_is_priced() -> None:
    for recipe in recipes.RECIPES:
        estimate = recipes.price(recipe)
        assert estimate.iteration_time_s > 0 and estimate.peak_memory_bytes > 0
