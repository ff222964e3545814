"""Megatron-LM's ``--num-layers-per-virtual-pipeline-stage`` on the command line of
`check`, `estimate` and `plan`: the flag, the arguments it excludes, and the virtual
pipeline size it sets (`specs.virtual_stages`)."""

from __future__ import annotations

import argparse

from specs.errors import SpecError
from specs.loading import load_model
from specs.virtual_stages import LAYERS_PER_VIRTUAL_STAGE_FLAG, vpp_from_layers_per_virtual_stage

EXCLUDED_FLAGS = {
    "vpp": "--num-virtual-stages-per-pipeline-rank/--vpp",
    "pipeline_model_parallel_layout": "--pipeline-model-parallel-layout",
    "decoder_first_pipeline_num_layers": "--decoder-first-pipeline-num-layers",
    "decoder_last_pipeline_num_layers": "--decoder-last-pipeline-num-layers",
}
"""argparse dest -> flag of the arguments Megatron-LM's `validate_args` refuses next to
``--num-layers-per-virtual-pipeline-stage`` (the other two ways to set vpp, and the
first/last stage counts, which need --num-virtual-stages-per-pipeline-rank)."""


def add_layers_per_virtual_stage_arg(group: argparse._ArgumentGroup) -> None:
    """``--num-layers-per-virtual-pipeline-stage N`` (default None: not given)."""
    group.add_argument(
        LAYERS_PER_VIRTUAL_STAGE_FLAG,
        type=int,
        default=None,
        metavar="N",
        help="Megatron-LM's: N transformer layers per model chunk, so vpp = (num_layers / "
        "pp) / N (the account-for flags count in num_layers); excludes --vpp and "
        "--pipeline-model-parallel-layout",
    )


def layers_per_virtual_stage_vpp(args: argparse.Namespace) -> int | None:
    """The vpp that ``--num-layers-per-virtual-pipeline-stage`` sets, or None when it is not
    given. Raises `SpecError` when it is given with an excluded flag, without --pp, or
    with a count that does not divide (`specs.virtual_stages`)."""
    n = getattr(args, "num_layers_per_virtual_pipeline_stage", None)
    if n is None:
        return None
    flag = f"{LAYERS_PER_VIRTUAL_STAGE_FLAG} ({n})"
    for dest, other in EXCLUDED_FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            raise SpecError(
                f"{flag} and {other} ({value!r}) cannot be combined, as in Megatron-LM: "
                f"{LAYERS_PER_VIRTUAL_STAGE_FLAG} sets vpp from the even split; drop one "
                "(give --num-virtual-stages-per-pipeline-rank for an uneven split)"
            )
    if args.pp is None:
        raise SpecError(
            f"{flag} sets vpp = (num_layers / pp) / N, so it needs a fixed pp: give --pp, "
            "or give --vpp to search pp"
        )
    return vpp_from_layers_per_virtual_stage(
        num_layers=load_model(args.model).num_layers,
        pp=args.pp,
        layers_per_virtual_stage=n,
        embedding=bool(args.account_for_embedding_in_pipeline_split),
        loss=bool(args.account_for_loss_in_pipeline_split),
    )
