"""Published rows whose plan is complete except the virtual-pipeline degree, priced at every
degree Megatron admits.

A row that runs the interleaved schedule without printing its degree
(`published_rows.vpp_stated`) is not expressible as one plan, so the headline statistics
of `bench/validate_published.py` leave it out. This module prices it once per degree
instead, each time with exactly what the row states otherwise (`published_rows.case_for_row`
with the degree filled in: the same model, cluster, job, sharding, recompute, notes-stated
split and execution options), and reports the band of signed errors the degrees span.
Nothing here enters the headline statistics.

- Degrees: every vpp > 1 (the row says interleaved, so vpp 1 is not among them) whose plan
  passes every rule of `specs.rules.check_plan`: layers per virtual stage (with the row's
  account-for flags or first/last counts), the interleaved schedule's microbatch count a
  multiple of pp, and the rest.
- Micro-batch size: the printed one, else 1 (Megatron-LM's ``--micro-batch-size``
  default); each entry says which (``micro_batch_size_stated``).
- Sharding: the row's mapped sharding (`published_rows`: the distributed optimizer for
  "distributed optimizer", ZeRO-1 and FSDP without parameter resharding), and for a row
  that states gradients sharded with parameters kept after forward (`ZERO2_MARKERS`) also
  Megatron-FSDP's ``optim_grads`` (`fsdp_optim_grads`, whose docstring says where the two
  differ).
- Published seconds: as for every row (`row_figures.published_iteration_time_s`: the
  printed time, else tokens/s per GPU, else TFLOP/s per GPU through the source's FLOPs
  convention), with the field it came from (``published_from``).
"""

from __future__ import annotations

import dataclasses

from published_rows import (
    NotExpressible,
    RowCase,
    case_for_row,
    vpp_stated,
)
from row_figures import case_estimate, published_iteration_time_s

from profiles.store import load_profile
from specs.errors import SpecError
from specs.pipeline_split_checks import accounted_layers
from specs.plan import ParallelPlan
from specs.rules import check_plan

TRUSTED = ("A", "B")
"""Trust levels priced, as in `bench/validate_published.py`."""

ZERO2_MARKERS = ("grads sharded", "not resharded after forward")
"""Words of an ``fsdp_or_zero`` text that states optimizer state and gradients sharded with
parameters kept whole from the forward to the backward (Llama 3: "FSDP (optimizer states +
grads sharded; params not resharded after forward)"); both must appear."""


def with_vpp(raw: dict[str, str], vpp: int) -> dict[str, str]:
    """The row with its ``vpp`` column set to ``vpp``: what it would print had it stated it."""
    return raw | {"vpp": str(vpp)}


def admitted_degrees(raw: dict[str, str]) -> list[int]:
    """Every vpp > 1 whose plan for the row passes `check_plan`, smallest first (module
    docstring). NotExpressible when the row has a gap besides the degree."""
    base = case_for_row(with_vpp(raw, 1))
    most = max(accounted_layers(base.model, base.plan) // base.plan.pp, 1)
    degrees = []
    for vpp in range(2, most + 1):
        case = case_for_row(with_vpp(raw, vpp))
        if not check_plan(case.model, case.cluster, case.job, case.plan):
            degrees.append(vpp)
    return degrees


def states_zero2(raw: dict[str, str]) -> bool:
    """True when ``fsdp_or_zero`` states gradients sharded and parameters not resharded
    after forward (`ZERO2_MARKERS`)."""
    text = (raw.get("fsdp_or_zero") or "").lower()
    return all(marker in text for marker in ZERO2_MARKERS)


def fsdp_optim_grads(plan: ParallelPlan) -> ParallelPlan:
    """``plan`` under Megatron-FSDP ``optim_grads`` in place of the distributed optimizer.

    The same sharding of the state: optimizer state and gradients over dp·cp, bf16 weights
    whole through the forward and backward passes, gradients reduce-scattered in every
    backward (`costmodel.runtimes.megatron.megatron_fsdp`), as PyTorch FSDP does with
    gradients sharded and parameters not resharded after forward. Not the same engine: the
    row's FSDP also shards the parameters between iterations and gathers them before the
    first forward, where ``optim_grads`` keeps them replicated and gathers the updated
    shards after the optimizer step (one all-gather of the weights per iteration either
    way); and Meta's stack (NCCLX, its own schedule) is not Megatron-core. The
    distributed optimizer differs from both by keeping a whole gradient buffer and
    reducing it once per iteration."""
    return dataclasses.replace(
        plan,
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads",
        distributed_optimizer=False,
    )


def sharding_name(plan: ParallelPlan) -> str:
    """How the plan shards model state, in words."""
    if plan.use_megatron_fsdp:
        return f"Megatron-FSDP {plan.data_parallel_sharding_strategy}"
    return "distributed optimizer" if plan.distributed_optimizer else "none"


def published_from(raw: dict[str, str]) -> str:
    """The column the published seconds come from, in the order
    `published_iteration_time_s` tries them."""
    for column in ("iteration_time_s", "tokens_per_sec_per_gpu", "derived_tokens_per_sec_per_gpu"):
        try:
            if float((raw.get(column) or "").strip()):
                return column
        except ValueError:
            continue
    return "tflops_per_gpu"


def price(case: RowCase, plan: ParallelPlan, published_s: float) -> dict[str, object]:
    """One degree and sharding of a row: predicted seconds, signed error against
    ``published_s``, peak GiB and whether it fits."""
    est = case_estimate(case, plan=plan)
    return {
        "sharding": sharding_name(plan),
        "vpp": plan.vpp,
        "plan": plan.label(),
        "predicted_s": est.iteration_time_s,
        "error": est.iteration_time_s / published_s - 1.0,
        "peak_memory_gib": est.peak_memory_gib,
        "fits": est.fits,
    }


def band(results: list[dict[str, object]]) -> dict[str, object]:
    """Smallest and largest signed error over ``results`` and whether any fits."""
    errors = [float(r["error"]) for r in results]  # type: ignore[arg-type]
    return {
        "min_error": min(errors) if errors else None,
        "max_error": max(errors) if errors else None,
        "any_fits": any(bool(r["fits"]) for r in results),
    }


def row_entry(raw: dict[str, str]) -> dict[str, object]:
    """One row's entry (module docstring): the degrees, a result per degree and sharding,
    the error band over all of them and per sharding. NotExpressible or SpecError when the
    row has a gap besides the degree."""
    degrees = admitted_degrees(raw)
    base = case_for_row(with_vpp(raw, 1))
    published_s = published_iteration_time_s(raw, base)
    results = []
    for vpp in degrees:
        case = case_for_row(with_vpp(raw, vpp))
        plans = [case.plan] + ([fsdp_optim_grads(case.plan)] if states_zero2(raw) else [])
        results += [price(case, plan, published_s) for plan in plans]
    shardings = list(dict.fromkeys(str(r["sharding"]) for r in results))
    mbs_text = (raw.get("micro_batch_size") or "").strip()
    return {
        "row_id": raw["row_id"],
        "source_id": raw["source_id"],
        "model": raw["model"],
        "trust": raw["trust"],
        "num_gpus": base.cluster.num_gpus,
        "plan": base.plan.label(),
        "published_s": published_s,
        "published_from": published_from(raw),
        "micro_batch_size": base.plan.micro_batch_size,
        "micro_batch_size_stated": mbs_text.isdigit(),
        "device_memory_gib": load_profile(base.profile).device.memory_gib,
        "degrees": degrees,
        "results": results,
        **band(results),
        "by_sharding": {s: band([r for r in results if r["sharding"] == s]) for s in shardings},
    }


def unstated_vpp_report(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    """An entry per trust A/B row of ``rows`` whose only missing plan field is the
    virtual-pipeline degree (`row_entry`); a row with another gap gets its reason
    (``not_priced``) and no results."""
    entries: list[dict[str, object]] = []
    for raw in rows:
        if raw["trust"] not in TRUSTED or vpp_stated(raw):
            continue
        try:
            entries.append(row_entry(raw))
        except (NotExpressible, SpecError) as err:
            reason = str(err).splitlines()[0]
            entries.append(
                {k: raw[k] for k in ("row_id", "source_id", "model", "trust")}
                | {"not_priced": reason, "results": []}
            )
    return entries


def print_unstated_vpp(entries: list[dict[str, object]]) -> None:
    """One line per row, sharding and degree, as text."""
    for e in entries:
        if "not_priced" in e:
            print(f"unstated vpp: row {e['row_id']} {e['model']}: not priced ({e['not_priced']})")
            continue
        mbs = "" if e["micro_batch_size_stated"] else " (mbs not stated: 1)"
        print(
            f"unstated vpp: row {e['row_id']} {e['model']} {e['plan']}{mbs}, published "
            f"{e['published_s']:.2f} s ({e['published_from']}), degrees {e['degrees']}"
        )
        for r in e["results"]:  # type: ignore[attr-defined]
            print(
                f"    vpp {r['vpp']:>2} {r['sharding']:<26} {r['predicted_s']:>8.2f} s "
                f"{r['error']:>+7.1%} {r['peak_memory_gib']:>6.1f} GiB fits {r['fits']}"
            )
