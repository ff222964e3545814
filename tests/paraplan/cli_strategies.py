"""Hypothesis strategies of `paraplan estimate` and `paraplan plan` command lines: a model
preset, a stored hardware profile, a world size, a sequence, a batch and a subset of the
plan and recipe flags, each with values both valid and invalid.

Integer values lean on what can pass the rules (divisors of the world size and of the
model's layers and experts) so that the cost model is reached often, and keep 0, negative,
huge and non-numeric values so that the refusals are reached too."""

from __future__ import annotations

from typing import get_args

from hypothesis import strategies as st

from profiles.store import stored_profile_names
from specs.model import ModelSpec
from specs.plan import OffloadModule, RecomputeModule
from specs.presets import get_preset, preset_names

PRESETS = tuple(preset_names())
PROFILES = tuple(stored_profile_names())
PRECISIONS = ("bf16", "fp8", "nvfp4", "fp32")

RECOMPUTE_MODULES = (*get_args(RecomputeModule), "none", "bogus")
"""Megatron-core's selective-recompute modules, ``none`` and one no rule accepts."""
OFFLOAD_MODULES = (*get_args(OffloadModule), "bogus")
"""The activation-offload modules and one no rule accepts."""
CUDA_GRAPH_SCOPES = (
    "attn",
    "mlp",
    "moe",
    "moe_router",
    "moe_preprocess",
    "mamba",
    "full_iteration",
)
LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "in_proj", "out_proj")

Values = st.SearchStrategy[list[str]]


def _small_ints(model: ModelSpec, num_gpus: int) -> st.SearchStrategy[int]:
    """Sizes that can pass the rules (powers of two, divisors of the world size and of the
    model's layers and experts) and sizes that cannot (0, negative, huge, odd)."""
    divisors = sorted(
        {d for n in (num_gpus, model.num_layers, model.num_experts or 1) for d in _divisors(n)}
    )
    return st.one_of(
        st.sampled_from((1, 2, 4, 8)),
        st.sampled_from(divisors),
        st.integers(min_value=-2, max_value=64),
        st.sampled_from((0, 3, 5, 7, 1 << 20, 10**12)),
    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 4096) + 1) if n % d == 0]


def _int_value(ints: st.SearchStrategy[int]) -> Values:
    """One integer flag value, or a value argparse refuses."""
    text = st.one_of(ints.map(str), ints.map(str), st.sampled_from(("1.5", "x", "", "-0", "1e3")))
    return text.map(lambda v: [v])


def _modules(names: tuple[str, ...]) -> Values:
    return st.lists(st.sampled_from(names), min_size=1, max_size=4).map(lambda m: [",".join(m)])


def _layout(model: ModelSpec) -> Values:
    """Pipeline layouts: the model's layers over k stages (E first, L last), the same with
    MTP layers and repeats, a miscount, and strings outside the grammar."""

    @st.composite
    def split(draw: st.DrawFn) -> str:
        stages = draw(st.one_of(st.sampled_from((2, 4, 8, 16)), st.integers(1, 16)))
        layers = model.num_layers + draw(st.sampled_from((0, 0, 0, 1, -1)))
        cuts = sorted(
            draw(st.lists(st.integers(0, max(layers, 0)), min_size=stages - 1, max_size=stages - 1))
        )
        counts = [b - a for a, b in zip([0, *cuts], [*cuts, max(layers, 0)], strict=True)]
        parts = [f"t*{c}" if c > 1 and draw(st.booleans()) else "t" * c for c in counts]
        mtp = "m" * model.mtp_num_layers
        parts[0] = "E" + parts[0]
        parts[-1] = parts[-1] + mtp + "L"
        return "|".join(parts)

    odd = st.sampled_from(
        (
            "",
            "|",
            "E|L",
            "Et|(tt|)*30mL",
            "(t|)*0",
            "t*999999999999",
            "(t)*99999999999|L",
            "t*" + "9" * 5000,
            "(t|)*70000L",
            "X",
            "E(t|L",
        )
    )
    return st.one_of(split(), split(), odd).map(lambda s: [s])


def flag_values(model: ModelSpec, num_gpus: int) -> dict[str, Values]:
    """The flags of `paraplan estimate` beyond the problem's, each with a strategy of the
    arguments that follow it (an empty list for a switch)."""
    ints = _int_value(_small_ints(model, num_gpus))
    switch: Values = st.just([])

    def choice(*values: str) -> Values:
        return st.sampled_from(values).map(lambda v: [v])

    layers = _int_value(st.one_of(st.integers(-1, model.num_layers + 2), st.just(10**9)))
    return {
        "--tp": ints,
        "--pp": ints,
        "--vpp": ints,
        "--cp": ints,
        "--ep": ints,
        "--etp": ints,
        "--mbs": ints,
        "--sp": switch,
        "--no-sp": switch,
        "--recompute": choice("none", "selective", "full"),
        "--recompute-num-layers": layers,
        "--recompute-method": choice("uniform", "block"),
        "--recompute-modules": _modules(RECOMPUTE_MODULES),
        "--cpu-offloading-num-layers": layers,
        "--offload-modules": _modules(OFFLOAD_MODULES),
        "--dist-opt": switch,
        "--no-dist-opt": switch,
        "--use-megatron-fsdp": switch,
        "--data-parallel-sharding-strategy": choice(
            "no_shard", "optim", "optim_grads", "optim_grads_params"
        ),
        "--bucket-size": _int_value(st.sampled_from((0, -1, 1, 1000, 40_000_000, 10**15))),
        "--overlap-grad-reduce": switch,
        "--overlap-param-gather": switch,
        "--tp-comm-overlap": switch,
        "--decoder-first-pipeline-num-layers": layers,
        "--decoder-last-pipeline-num-layers": layers,
        "--account-for-embedding-in-pipeline-split": switch,
        "--account-for-loss-in-pipeline-split": switch,
        "--pipeline-model-parallel-layout": _layout(model),
        "--num-layers-per-virtual-pipeline-stage": layers,
        "--optimizer": choice("adam", "muon", "dist_muon"),
        "--packed-doc-len": _int_value(st.sampled_from((-1, 0, 1, 7, 128, 1024, 4096, 10**6))),
        "--lora-rank": _int_value(st.sampled_from((-1, 0, 1, 8, 16, 30, 64))),
        "--lora-alpha": _int_value(st.sampled_from((-1, 0, 16, 32))),
        "--lora-targets": _modules(LORA_TARGETS),
        "--gpus-per-node": _int_value(st.sampled_from((-1, 0, 1, 3, 4, 8, 16, 72))),
        "--nvlink-segment-nodes": _int_value(st.sampled_from((-1, 0, 1, 2, 3, 4, 18, 19))),
        **recipe_flag_values(),
    }


def recipe_flag_values() -> dict[str, Values]:
    """The recipe, optimizer-state and time flags (`paraplan/recipe_args.py`,
    `optimizer_args.py`, `time_args.py`) and `--runtime`."""
    switch: Values = st.just([])

    def choice(*values: str) -> Values:
        return st.sampled_from(values).map(lambda v: [v])

    dtypes = choice("fp32", "fp16", "bf16", "fp8")
    scopes = st.lists(st.sampled_from(CUDA_GRAPH_SCOPES), min_size=1, max_size=3)
    return {
        "--runtime": choice("megatron", "torch"),
        "--fp8-recipe": choice("delayed", "tensorwise", "mxfp8"),
        "--fp8-param-gather": switch,
        "--fp4-param-gather": switch,
        "--no-fp4-param-gather": switch,
        "--fp8-attention": switch,
        "--no-fp8-attention": switch,
        "--first-last-layers-bf16": switch,
        "--num-layers-at-start-in-bf16": _int_value(st.integers(-1, 8)),
        "--num-layers-at-end-in-bf16": _int_value(st.integers(-1, 8)),
        "--grad-reduce-in-bf16": switch,
        "--use-precision-aware-optimizer": switch,
        "--exp-avg-dtype": dtypes,
        "--exp-avg-sq-dtype": dtypes,
        "--main-params-dtype": choice("fp32", "fp16"),
        "--main-grads-dtype": choice("fp32", "bf16"),
        "--cross-entropy-loss-fusion": switch,
        "--cross-entropy-fusion-impl": choice("native", "te", "te_fp32_grad"),
        "--expandable-segments": switch,
        "--optimizer-cpu-offload": switch,
        "--optimizer-offload-fraction": choice("0", "0.5", "1", "1.5", "-0.1", "nan", "inf"),
        "--overlap-cpu-optimizer-d2h-h2d": switch,
        "--moe-token-dispatcher-type": choice("alltoall", "flex", "allgather"),
        "--overlap-moe-expert-parallel-comm": switch,
        "--cuda-graph-impl": choice("none", "local", "transformer_engine", "full_iteration"),
        "--cuda-graph-scope": st.one_of(scopes, scopes.map(lambda s: [",".join(s)])),
        "--rope-fusion": switch,
        "--no-rope-fusion": switch,
        "--cutedsl-fused-grouped-mlp": switch,
        "--cudnn-norm": switch,
        "--flash-attention-version": choice("2", "3"),
        "--tp-comm-overlap-rs-method": choice("pipeline", "ring_exchange"),
        "--tp-comm-overlap-bulk-sm-margin": switch,
        "--no-tp-comm-overlap-bulk-sm-margin": switch,
        "--tp-comm-overlap-pipeline-sm-margin": switch,
        "--no-tp-comm-overlap-pipeline-sm-margin": switch,
    }


def plan_flag_values() -> dict[str, Values]:
    """The flags `plan` takes beyond `estimate`'s: the `--no-` forms of its switches and the
    search's own bounds."""
    switch: Values = st.just([])
    flags = dict.fromkeys(
        (
            "--no-use-megatron-fsdp",
            "--no-overlap-grad-reduce",
            "--no-overlap-param-gather",
            "--no-tp-comm-overlap",
            "--no-account-for-embedding-in-pipeline-split",
            "--no-account-for-loss-in-pipeline-split",
            "--tp-beyond-scale-up",
        ),
        switch,
    )
    headroom = ("0", "0.05", "0.5", "0.99", "1", "-0.1", "nan")
    return flags | {
        "--memory-headroom": st.sampled_from(headroom).map(lambda v: [v]),
        "--max-mbs": st.sampled_from(("0", "1", "2", "-1")).map(lambda v: [v]),
    }


def num_gpus_values() -> st.SearchStrategy[int]:
    """World sizes 1..4096, powers of two and not."""
    return st.one_of(
        st.sampled_from([1 << k for k in range(13)]),
        st.sampled_from((6, 12, 24, 48, 72, 96, 144, 576, 1152, 3072)),
        st.integers(min_value=1, max_value=4096),
    )


def _problem(draw: st.DrawFn, max_gpus: int) -> tuple[ModelSpec, list[str]]:
    name = draw(st.sampled_from(PRESETS))
    model = get_preset(name)
    num_gpus = draw(num_gpus_values().filter(lambda n: n <= max_gpus))
    seq = draw(
        st.one_of(
            st.sampled_from((512, 1024, 2048, 4096, 8192, 32768, 131072)), st.integers(-1, 300_000)
        )
    )
    batch = draw(
        st.one_of(
            st.sampled_from((1, 8, 64, 256, 1024, 4096)),
            st.integers(-1, 20_000),
            st.sampled_from((1, 2, 4, 8, 32)).map(lambda k: k * num_gpus),
            st.sampled_from((1, 2, 4, 8, 32)).map(lambda k: k * num_gpus),
        )
    )
    argv = ["--model", name, "--hardware", draw(st.sampled_from(PROFILES))]
    argv += ["--num-gpus", str(num_gpus), "--seq-len", str(seq), "--global-batch", str(batch)]
    argv += ["--precision", draw(st.sampled_from(("bf16", "bf16", *PRECISIONS)))]
    return model, argv


def _flags(draw: st.DrawFn, table: dict[str, Values], max_flags: int) -> list[str]:
    names = draw(st.lists(st.sampled_from(sorted(table)), max_size=max_flags, unique=True))
    argv: list[str] = []
    for name in names:
        argv += [name, *draw(table[name])]
    return argv


@st.composite
def estimate_argv(draw: st.DrawFn, max_flags: int = 8) -> list[str]:
    """`paraplan estimate ... --json` with up to ``max_flags`` plan and recipe flags."""
    model, argv = _problem(draw, 4096)
    table = flag_values(model, int(argv[argv.index("--num-gpus") + 1]))
    table["--attention"] = st.sampled_from((["flash"], ["materialized"]))
    return ["estimate", *argv, *_flags(draw, table, max_flags), "--json"]


@st.composite
def plan_argv(draw: st.DrawFn, max_flags: int = 6, max_gpus: int = 4096) -> list[str]:
    """`paraplan plan ... --json --top 1 --time-limit 5` with up to ``max_flags`` pinned
    plan, recipe and search flags (the search is bounded, micro-batches to 2 unless
    `--max-mbs` is drawn, so that one example stays short)."""
    model, argv = _problem(draw, max_gpus)
    table = flag_values(model, int(argv[argv.index("--num-gpus") + 1])) | plan_flag_values()
    pinned = _flags(draw, table, max_flags)
    if "--max-mbs" not in pinned:
        pinned += ["--max-mbs", "2"]
    return ["plan", *argv, *pinned, "--json", "--top", "1", "--time-limit", "5"]
