"""Megatron-Bridge's GLM-5.1 and GLM-5.2 performance recipes, priced by the cost model.

Megatron-Bridge v0.6.0 ships four SFT recipes of the GLM-5 family (``src/megatron/bridge/
perf_recipes/glm_moe_dsa/{gb200,h100}/glm5.py``), bf16, 131072-token packed sequences
(THD, ``packed_sequence_size`` 131072), micro batch 1, tp 1, cp 32 with
``cp_comm_type="allgather"``, ep 32, etp 1, the flex token dispatcher (HybridEP on GB200,
DeepEP on H100), full recompute of every layer (uniform, 1), the distributed optimizer, one
MTP depth, ``dsa_kernel_backend="cudnn"``, ``apply_rope_fusion`` False, the native cross
entropy, no CUDA graphs and no NaN checks:

- GB200, 192 GPUs (dp 1), pp 6 with 14 layers on the first stage and 16 on the last,
  global batch 56 (``glm51_sft_192gpu_gb200_bf16_config``, ``glm52_...``);
- H100, 416 GPUs (dp 1), pp 13 with vpp 2, global batch 520; GLM-5.1 splits evenly (3
  layers per virtual stage), GLM-5.2 takes the layout
  ``Et|t||tttt|...|ttttmL`` whose empty chunks keep its four-layer index-sharing groups
  within one chunk (rule ``dsa_index_share_within_chunk``).

No throughput of these recipes is published, so this prints only the model's figures:
iteration seconds, MFU (Megatron's count, in which a DSA layer is MLA's dense causal
layer: `costmodel.flops`), peak memory of the worst stage and whether it fits. The packed
rows are priced as one 131072-token causal sequence each (no
`TrainingJob.packed_document_tokens`): the recipes state the packed size and the padding of
each document to a multiple of 64 (``pad_seq_to_mult``, 2·cp) but not the length of the
documents, which is the dataset's (``_sft_common``'s, tokenized at run time), so no document
length is sourced; the attention work of a row of several shorter documents is less.

Usage: ``python bench/glm5_recipes.py``
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.estimate import Estimate, estimate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.formats import percent
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

SEQ_LENGTH = 131072
"""``cfg.model.seq_length`` of every recipe."""

H100_GLM52_LAYOUT = (
    "Et|t||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||"
    "tttt|tttt|tttt|tttt||tttt|tttt|ttttmL"
)
"""``pipeline_model_parallel_layout`` of ``glm52_sft_416gpu_h100_bf16_config``."""

OPTIONS = dataclasses.replace(
    DEFAULT_OPTIONS,
    moe_dispatcher="flex",
    rope_fusion=False,
    cross_entropy_fusion="unfused",
    grad_nan_check=False,
)
"""The recipes' runtime settings (module docstring)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Recipe:
    """One perf recipe: its function name, model preset, hardware and plan."""

    name: str
    model: str
    hardware: str
    profile: str
    num_gpus: int
    global_batch_size: int
    plan: ParallelPlan


def _plan(pp: int, **split: object) -> ParallelPlan:
    """The recipes' common plan at ``pp`` with a split."""
    return ParallelPlan(
        tp=1,
        pp=pp,
        cp=32,
        ep=32,
        etp=1,
        dp=1,
        micro_batch_size=1,
        recompute="full",
        recompute_method="uniform",
        recompute_num_layers=1,
        distributed_optimizer=True,
        cp_comm_type="all_gather",
        **split,  # type: ignore[arg-type]
    )


GB200_SPLIT = {"decoder_first_pipeline_num_layers": 14, "decoder_last_pipeline_num_layers": 16}
H100_INTERLEAVED = {"vpp": 2, "schedule": "interleaved"}

RECIPES = (
    *(
        Recipe(
            name=f"{name}_sft_192gpu_gb200_bf16_config",
            model=model,
            hardware="gb200-nvl72",
            profile="gb200-nvl72",
            num_gpus=192,
            global_batch_size=56,
            plan=_plan(6, **GB200_SPLIT),
        )
        for name, model in (("glm51", "glm-5.1"), ("glm52", "glm-5.2"))
    ),
    Recipe(
        name="glm51_sft_416gpu_h100_bf16_config",
        model="glm-5.1",
        hardware="h100-sxm-80gb",
        profile="h100-sxm-80gb",
        num_gpus=416,
        global_batch_size=520,
        plan=_plan(13, **H100_INTERLEAVED),
    ),
    Recipe(
        name="glm52_sft_416gpu_h100_bf16_config",
        model="glm-5.2",
        hardware="h100-sxm-80gb",
        profile="h100-sxm-80gb",
        num_gpus=416,
        global_batch_size=520,
        plan=_plan(13, pipeline_model_parallel_layout=H100_GLM52_LAYOUT, **H100_INTERLEAVED),
    ),
)
"""The four recipes of Megatron-Bridge v0.6.0 (module docstring)."""


def price(recipe: Recipe) -> Estimate:
    """`estimate_plan` of one recipe."""
    return estimate_plan(
        get_preset(recipe.model),
        ClusterSpec(hardware=recipe.hardware, num_gpus=recipe.num_gpus),
        TrainingJob(seq_length=SEQ_LENGTH, global_batch_size=recipe.global_batch_size),
        recipe.plan,
        load_profile(recipe.profile),
        options=OPTIONS,
    )


def main() -> None:
    header = ("recipe".ljust(40), "time s".rjust(9), "MFU".rjust(6), "peak GiB".rjust(9))
    print(*header, "fits".rjust(5))
    for recipe in RECIPES:
        e = price(recipe)
        utilization = percent(e.mfu).rjust(6)
        fits = "yes" if e.fits else "no"
        print(
            f"{recipe.name:<40} {e.iteration_time_s:9.1f} {utilization} "
            f"{e.peak_memory_gib:9.1f} {fits:>5}"
        )


if __name__ == "__main__":
    main()
