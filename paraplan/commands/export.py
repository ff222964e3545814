"""`paraplan export`: turn a plan.json into the arguments of the engine that trains with it.

``--to megatron`` prints a shell snippet: the environment the run needs and a `torchrun
pretrain_gpt.py` line (`pretrain_hybrid.py` for a hybrid model) with the Megatron-LM
arguments of the plan; ``--to torchtitan``
prints the equivalent torchtitan TOML. The plan is checked against the rules first
(exit 1 with the violations when it breaks one, each fix in `paraplan plan`'s flags:
`paraplan.fix_flags.cli_fix`).
"""

from __future__ import annotations

import argparse
import sys

from paraplan.commands import COMMAND_HELP
from paraplan.fix_flags import cli_fix
from paraplan.nodes import partial_nodes_problem
from planner.export import TARGETS, export_text
from planner.export_torchtitan import torchtitan_sharding_note
from profiles import load_profile
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.rules import check_plan
from specs.serde import load

NAME = "export"
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", help="plan.json written by `paraplan plan --out`")
    parser.add_argument("--to", choices=TARGETS, required=True, help="target engine")
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        help="GPUs per node for the launch line (default: the plan's cluster, else its profile)",
    )


def run(args: argparse.Namespace) -> int:
    bundle = load(PlanBundle, args.plan)
    violations = check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan)
    if violations:
        sys.stderr.write(f"plan {bundle.plan.label()!r} breaks {len(violations)} rule(s):\n")
        for v in violations:
            sys.stderr.write(f"  [{v.rule}] {cli_fix(v.message)}\n")
        return 1
    per_node = args.gpus_per_node or bundle.cluster.gpus_per_node
    if per_node is None:
        per_node = load_profile(bundle.cluster.hardware).topology.gpus_per_node
    if args.to == "megatron":
        refuse_partial_nodes(bundle.cluster.num_gpus, per_node)
    sys.stdout.write(export_text(bundle, args.to, per_node))
    note = torchtitan_sharding_note(bundle.plan) if args.to == "torchtitan" else None
    if note is not None:
        sys.stderr.write(f"paraplan export: note: {note}\n")
    return 0


def refuse_partial_nodes(num_gpus: int, gpus_per_node: int) -> None:
    """`SpecError` when ``num_gpus`` ranks do not fill whole nodes of ``gpus_per_node``
    (`paraplan.nodes.partial_nodes_problem`)."""
    problem = partial_nodes_problem(num_gpus, gpus_per_node)
    if problem is not None:
        raise SpecError(problem)
