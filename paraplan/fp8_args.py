"""Checks of the FP8 recipe flags against the job and the device, before anything is priced,
and the ``--fp8-attention`` flag.

``--fp8-recipe`` and ``--fp8-param-gather`` configure Transformer Engine's FP8 training:
they mean nothing in a bf16 or fp32 job (the cost model would price the job without them,
and `paraplan export` refuses them), MXFP8 scaling runs only on Blackwell, and Megatron-LM
takes ``--fp8-param-gather`` only with the distributed optimizer or Megatron-FSDP.
``--fp8-attention`` (`ExecutionOptions.fp8_attention`) is checked by the cost model
(`costmodel.fp8_attention`: an fp8 job, a recipe that passes ``fp8_dpa``, a profile with the
curves), and so are ``--first-last-layers-bf16`` and its counts (`costmodel.bf16_layer_rules`:
an fp8 or nvfp4 job, not the delayed recipe, no more layers than the model's, and for fp8
at most ``num_layers // pp`` at either end).
"""

from __future__ import annotations

import argparse

from costmodel.compute import check_precision_device
from costmodel.execution import ExecutionOptions
from costmodel.saved_inputs import DELAYED_SAVE_INPUT_RULE, delayed_scaling_problem
from profiles.schema import HardwareProfile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import Violation

MXFP8_GENERATIONS: frozenset[str] = frozenset(("blackwell", "blackwell_ultra"))
"""`DeviceSpec.generation` names that run MXFP8: Transformer Engine's
``check_mxfp8_support`` (``transformer_engine/pytorch/fp8.py``) needs compute capability
10.0 or later (B200 and GB200 10.0, B300 and GB300 10.3); Hopper (9.0), Ampere and CDNA 3
have no MX block-scaled tensor cores."""


def add_fp8_attention_arg(group: argparse._ArgumentGroup) -> None:
    """``--fp8-attention`` / ``--no-fp8-attention``, added to the recipe settings ``group``."""
    group.add_argument(
        "--fp8-attention",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --precision fp8: attention in FP8 with the recipe's scaling (Megatron-core "
        "fp8_dot_product_attention, set by Megatron-Bridge's 26.06 MXFP8 MoE recipes; "
        "Megatron-LM has no flag for it, so the export refuses it), priced on the profile's "
        "cuDNN fp8 (delayed, tensorwise) or mxfp8 attention curves; --no-fp8-attention "
        "(default): bf16 attention",
    )


def fp8_attention_fields(args: argparse.Namespace) -> dict[str, bool]:
    """``fp8_attention`` of ``--[no-]fp8-attention``; empty where the flag is not given."""
    value = getattr(args, "fp8_attention", None)
    return {} if value is None else {"fp8_attention": value}


def add_bf16_layer_args(group: argparse._ArgumentGroup) -> None:
    """``--first-last-layers-bf16``, ``--num-layers-at-start-in-bf16`` and
    ``--num-layers-at-end-in-bf16`` (`ExecutionOptions.first_last_layers_bf16`), added to the
    recipe settings ``group``."""
    group.add_argument(
        "--first-last-layers-bf16",
        action="store_true",
        help="with --precision fp8 (tensorwise or mxfp8) or nvfp4: keep the first and last "
        "decoder layers in bf16 (Megatron --first-last-layers-bf16): their GEMMs, attention, "
        "activations and weights priced as a bf16 job's",
    )
    for end, default in (("start", 1), ("end", 1)):
        group.add_argument(
            f"--num-layers-at-{end}-in-bf16",
            type=int,
            default=None,
            metavar="N",
            help=f"with --first-last-layers-bf16: decoder layers at the {end} of the model "
            f"kept in bf16 (Megatron --num-layers-at-{end}-in-bf16; default {default})",
        )


BF16_COUNT_FLAGS = ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
"""`ExecutionOptions` fields of the two counts, named as their ``argparse`` destinations."""


def bf16_layer_fields(args: argparse.Namespace) -> dict[str, object]:
    """The `ExecutionOptions` fields of `add_bf16_layer_args`' flags; empty where none is
    given. `SpecError` for a count given without ``--first-last-layers-bf16``, which
    Megatron-core reads only with it."""
    counts = {f: getattr(args, f, None) for f in BF16_COUNT_FLAGS}
    given = {f: n for f, n in counts.items() if n is not None}
    if not getattr(args, "first_last_layers_bf16", False):
        if given:
            flags = " and ".join(f"--{f.replace('_', '-')} {n}" for f, n in given.items())
            raise SpecError(
                f"{flags} count layers kept in bf16 only with --first-last-layers-bf16 "
                "(Megatron-core reads them under first_last_layers_bf16): add "
                f"--first-last-layers-bf16, or drop {flags}"
            )
        return {}
    return {"first_last_layers_bf16": True, **given}


FP8_PARAM_RULE = "fp8_param_gather_needs_distributed_optimizer"
"""`Violation.rule` of `fp8_param_violations`."""


def check_fp8_device(job: TrainingJob, profile: HardwareProfile) -> None:
    """`SpecError` for an fp8 job on a profile without an fp8 GEMM curve: a device without
    FP8 tensor cores (Transformer Engine needs compute capability 8.9 or later for FP8);
    for an nvfp4 job on a device without FP4 tensor cores, the cost model's rule
    (`costmodel.compute.check_precision_device`), so that `check` and `plan` refuse it
    before any search as `estimate` does."""
    check_precision_device(job.precision, profile)
    curves = profile.compute.gemm_efficiency
    if job.precision == "fp8" and "fp8" not in curves:
        raise SpecError(
            f"--precision fp8 needs FP8 tensor cores, and profile {profile.name!r} has GEMM "
            f"curves for {', '.join(sorted(curves))} only: choose one of those precisions, or "
            "a --hardware with FP8 (H100, H200, B200, GB200, B300, GB300, MI300X)"
        )


def check_fp8_flags(args: argparse.Namespace, job: TrainingJob, profile: HardwareProfile) -> None:
    """`SpecError` for an fp8 job on a device without FP8 (`check_fp8_device`), for FP8
    recipe flags given to a job that is not fp8, for ``--[no-]fp4-param-gather`` given to a
    job that is not nvfp4, and for ``--fp8-recipe mxfp8`` on a device
    of a known generation outside `MXFP8_GENERATIONS`."""
    check_fp8_device(job, profile)
    recipe = getattr(args, "fp8_recipe", None)
    given = [f"--fp8-recipe {recipe}"] if recipe is not None else []
    if getattr(args, "fp8_param_gather", False):
        given.append("--fp8-param-gather")
    if given and job.precision != "fp8":
        raise SpecError(
            f"{' and '.join(given)} set Transformer Engine's FP8 training, but the job is "
            f"--precision {job.precision}: add --precision fp8, or drop {' and '.join(given)}"
        )
    fp4 = getattr(args, "fp4_param_gather", None)
    if fp4 is not None and job.precision != "nvfp4":
        flag = "--fp4-param-gather" if fp4 else "--no-fp4-param-gather"
        raise SpecError(
            f"{flag} sets Transformer Engine's NVFP4 weights, but the job is --precision "
            f"{job.precision}: add --precision nvfp4, or drop {flag}"
        )
    generation = profile.device.generation
    if recipe == "mxfp8" and generation and generation not in MXFP8_GENERATIONS:
        raise SpecError(
            f"--fp8-recipe mxfp8 needs Blackwell's MX block-scaled tensor cores (Transformer "
            f"Engine's check_mxfp8_support: compute capability 10.0 or later); the "
            f"{profile.name} is {generation}: use --fp8-recipe tensorwise or delayed, or a "
            "Blackwell --hardware (b200, gb200-nvl72, b300, gb300-nvl72)"
        )


def fp8_param_violations(
    job: TrainingJob, plan: ParallelPlan, options: ExecutionOptions
) -> list[Violation]:
    """Megatron-LM's ``--fp8-param-gather`` of an Adam job needs the distributed optimizer or
    Megatron-FSDP (``validate_args``: only a sharded optimizer gathers FP8 parameters), as a
    plan violation that `paraplan estimate` reports before pricing. Muon jobs are left to
    the Muon rules: ``dist_muon`` gathers its parameters layer-wise, and Megatron-Bridge runs
    it with FP8 parameters."""
    sharded = plan.distributed_optimizer or plan.use_megatron_fsdp
    if not options.fp8_param or sharded or job.optimizer != "adam":
        return []
    return [
        Violation(
            rule=FP8_PARAM_RULE,
            message="--fp8-param-gather (fp8_param) gathers FP8 parameters after the step of "
            "a sharded optimizer, got distributed_optimizer (False) and use_megatron_fsdp "
            "(False): add --dist-opt or --use-megatron-fsdp, or drop --fp8-param-gather",
        )
    ]


def delayed_scaling_violations(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, options: ExecutionOptions
) -> list[Violation]:
    """The memory savers Transformer Engine refuses under delayed scaling
    (`costmodel.saved_inputs.delayed_scaling_problem`), as a plan violation that `paraplan
    estimate` reports before pricing."""
    problem = delayed_scaling_problem(
        model,
        plan,
        precision=job.precision,
        fp8_recipe=options.fp8_recipe,
        fused_grouped_mlp=options.moe_fused_grouped_mlp,
    )
    return [] if problem is None else [Violation(rule=DELAYED_SAVE_INPUT_RULE, message=problem)]
