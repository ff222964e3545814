"""The search space narrowed to the memory savers Transformer Engine runs under the job's
FP8 recipe.

Under delayed scaling (an fp8 job with `ExecutionOptions.fp8_recipe` ``delayed``)
Transformer Engine refuses the ``save_original_input`` that Megatron-core sets for some
recompute and offload modules (`costmodel.saved_inputs.delayed_scaling_problem`). The
search drops the recompute module sets that reach such a call, so that it never proposes
a plan Megatron-core cannot run; a fixed knob that reaches one is a `SpecError` with the
rule's message.
"""

from __future__ import annotations

import dataclasses

from costmodel.execution import ExecutionOptions
from costmodel.saved_inputs import DELAYED_SAVE_INPUT_RULE, delayed_scaling_problem
from planner.space import SearchSpace
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def _problem(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan, options: ExecutionOptions
) -> str | None:
    return delayed_scaling_problem(
        model,
        plan,
        precision=job.precision,
        fp8_recipe=options.fp8_recipe,
        fused_grouped_mlp=options.moe_fused_grouped_mlp,
    )


def _fixed_probe(space: SearchSpace) -> ParallelPlan:
    """The plan of the fixed recompute and offload knobs (selective when modules are fixed,
    as `paraplan.knob_args` fixes them)."""
    fixed = space.fixed
    modules = fixed.get("recompute_modules")
    recompute = fixed.get("recompute", "selective" if modules is not None else "none")
    offload = tuple(fixed.get("offload_modules") or ())
    return ParallelPlan(recompute=recompute, recompute_modules=modules, offload_modules=offload)


def space_for_fp8_recipe(
    space: SearchSpace, model: ModelSpec, job: TrainingJob, options: ExecutionOptions
) -> SearchSpace:
    """``space`` without the per-module recompute sets Transformer Engine refuses under the
    job's recipe (module docstring); unchanged outside fp8 delayed scaling. `SpecError`
    (with the rule id) when the fixed recompute or offload modules reach a refused call."""
    if job.precision != "fp8" or options.fp8_recipe != "delayed":
        return space
    problem = _problem(model, job, _fixed_probe(space), options)
    if problem is not None:
        raise SpecError(f"{DELAYED_SAVE_INPUT_RULE}: {problem}")
    sets = tuple(
        modules
        for modules in space.recompute_module_sets
        if _problem(
            model,
            job,
            ParallelPlan(recompute="selective", recompute_modules=tuple(modules)),
            options,
        )
        is None
    )
    return dataclasses.replace(space, recompute_module_sets=sets)
