"""The virtual pipeline size that Megatron-LM derives from
``--num-layers-per-virtual-pipeline-stage`` (`validate_args` in
megatron/training/arguments.py, "Uneven virtual pipeline parallelism"; megatron-facts.md
§8.2).

Megatron-LM takes at most one of ``--num-layers-per-virtual-pipeline-stage``,
``--num-virtual-stages-per-pipeline-rank`` and ``--pipeline-model-parallel-layout``; with
the first, ``L`` (num_layers, plus one for each account-for flag) must split evenly over
pp, and the layers per stage ``L / pp`` evenly into chunks of N layers:
``vpp = (L / pp) / N``. First/last stage layer counts are refused with it.
"""

from __future__ import annotations

from specs.errors import SpecError

LAYERS_PER_VIRTUAL_STAGE_FLAG = "--num-layers-per-virtual-pipeline-stage"
"""Megatron-LM's argument; messages name it as the user typed it."""


def split_layer_count(num_layers: int, *, embedding: bool, loss: bool) -> int:
    """Layers the even pipeline split divides: num_layers, plus one for the embedding and
    one for the loss when the account-for flags count them (`validate_args`)."""
    return num_layers + int(embedding) + int(loss)


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


def vpp_from_layers_per_virtual_stage(
    *, num_layers: int, pp: int, layers_per_virtual_stage: int, embedding: bool, loss: bool
) -> int:
    """``(L / pp) / N`` with ``L`` = `split_layer_count` and N = ``layers_per_virtual_stage``
    (Megatron-LM `validate_args`). Raises `SpecError` naming the rule, the values and a fix
    when N < 1 or pp < 1, when pp does not divide L, or when N does not divide L / pp."""
    flag = LAYERS_PER_VIRTUAL_STAGE_FLAG
    n = layers_per_virtual_stage
    if n < 1:
        raise SpecError(f"{flag} must be a positive integer, got {n}")
    if pp < 1:  # the message of `ParallelPlan`'s own check, which runs after this one
        raise SpecError(f"ParallelPlan.pp must be a positive integer, got {pp!r}")
    layers = split_layer_count(num_layers, embedding=embedding, loss=loss)
    counted = f"num_layers ({num_layers})" + (
        f" + {layers - num_layers} accounted = {layers}" if layers != num_layers else ""
    )
    if layers % pp:
        raise SpecError(
            f"{flag} ({n}) needs {counted} divisible by pp ({pp}), as Megatron-LM splits the "
            f"layers evenly over the pipeline stages before the chunks: use pp in "
            f"{divisors(layers)}, or give --num-virtual-stages-per-pipeline-rank with an "
            "uneven split"
        )
    per_stage = layers // pp
    if per_stage % n:
        raise SpecError(
            f"{flag} ({n}) must divide the layers per pipeline stage, {counted} / pp ({pp}) "
            f"= {per_stage}: use N in {divisors(per_stage)}"
        )
    return per_stage // n
