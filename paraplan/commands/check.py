"""`paraplan check`: validate one plan against Megatron-LM's rules."""

from __future__ import annotations

import argparse

from paraplan.args import add_problem_args, cluster_from_args, job_from_args, model_from_args
from paraplan.commands import COMMAND_HELP
from paraplan.fp8_args import check_fp8_device
from paraplan.output import print_verdict
from paraplan.plan_args import add_plan_args, plan_from_args
from profiles.store import load_profile
from specs.rules import check_plan

NAME = "check"
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_args(parser)
    add_plan_args(parser)
    parser.add_argument("--json", action="store_true", help='print {"valid", "violations"}')


def run(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    cluster = cluster_from_args(args)
    job = job_from_args(args)
    plan = plan_from_args(args)
    check_fp8_device(job, load_profile(cluster.hardware))
    violations = check_plan(model, cluster, job, plan)
    where = f"{model.name} on {cluster.num_gpus} GPUs"
    print_verdict(plan.label(), where, violations, as_json=args.json)
    if not violations and not args.json:
        print(f"valid: {plan.label()} for {where}")
    return 1 if violations else 0
