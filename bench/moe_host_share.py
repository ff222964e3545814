"""How much of a published MoE row's prediction the host-launch floor carries, and what its
device work alone leaves unexplained.

For each row (``--rows``, matched like `bench/validate_published.py`), at the shipped
defaults: the published and predicted seconds, the share of the prediction the floor adds
(priced again with `ExecutionOptions.moe_host_launch_s` and ``moe_expert_launch_s`` = 0,
`NO_FLOOR`), the prediction with the floor and the fitted device time per token off (also
`ExecutionOptions.moe_token_device_s` = 0:
the priced kernels, exposed communication and the pipeline only, "device only"), and the
published time the device-only prediction leaves unexplained per token and layer of the
critical stage, (published - device only) / (microbatches x tokens of one microbatch on a
rank x layers), in nanoseconds.

Rows of one model whose device-only predictions leave the same time per token unexplained
at every micro-batch size, while only some of them are host-bound in the prediction, are
priced right there because the fitted launch time stands in for device work the model
lacks, not because their host is the bottleneck; that unexplained time per token is what
`costmodel.fitted_rates.MOE_TOKEN_DEVICE_S` prices. A layer captured whole in CUDA graphs
(``--cuda-graph-scope`` of the whole layer, or ``full_iteration``) has no floor: its
prediction is device-only but for that fitted time.

Usage: ``python bench/moe_host_share.py --rows 307,308,324,333,367``
"""

from __future__ import annotations

import dataclasses
import sys

from published_csv import rows_main
from row_figures import case_estimate, published_case

from profiles.store import load_profile

NO_FLOOR = {"moe_host_launch_s": 0.0, "moe_expert_launch_s": 0.0}
"""`ExecutionOptions` fields that turn the MoE host-launch floor off: both launch prices 0."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HostShare:
    """One row's prediction with and without the MoE host-launch floor, and device only
    (seconds)."""

    row_id: str
    label: str
    published_s: float
    predicted_s: float
    no_floor_s: float
    device_only_s: float
    microbatches: int
    tokens_per_microbatch: float
    stage_layers: int

    @property
    def floor_share(self) -> float:
        """Share of the prediction the host-launch floor adds."""
        return 1.0 - self.no_floor_s / self.predicted_s

    @property
    def unexplained_ns_per_token_layer(self) -> float:
        """Published time the device-only prediction does not reach, per token of a
        microbatch on one rank and per layer of the critical stage, in nanoseconds."""
        work = self.microbatches * self.tokens_per_microbatch * self.stage_layers
        return (self.published_s - self.device_only_s) / work * 1e9


def host_share(raw: dict[str, str]) -> HostShare:
    """`HostShare` of one CSV row priced as `bench/validate_published.py` prices it."""
    case, published_s = published_case(raw)
    profile = load_profile(case.profile)
    full = case_estimate(case, profile=profile)
    no_floor = case_estimate(
        case, options=dataclasses.replace(case.options, **NO_FLOOR), profile=profile
    )
    bare_options = dataclasses.replace(case.options, **NO_FLOOR, moe_token_device_s=0.0)
    bare = case_estimate(case, options=bare_options, profile=profile)
    plan = case.plan
    return HostShare(
        row_id=raw["row_id"],
        label=f"{raw['model']} {raw['gpu_type'].split(' ')[0]} {raw['source_id']} {plan.label()}",
        published_s=published_s,
        predicted_s=full.iteration_time_s,
        no_floor_s=no_floor.iteration_time_s,
        device_only_s=bare.iteration_time_s,
        microbatches=plan.num_microbatches(case.job.global_batch_size),
        tokens_per_microbatch=case.job.seq_length * plan.micro_batch_size / plan.cp,
        stage_layers=full.stage_times[full.critical_stage].num_layers,
    )


def report(shares: list[HostShare]) -> str:
    """The rows as a text table."""
    lines = [
        "  row  published  predicted    error  device only    error  floor share  "
        "unexplained ns/token/layer  row"
    ]
    for s in shares:
        lines.append(
            f"{s.row_id:>5}  {s.published_s:9.3f}  {s.predicted_s:9.3f}  "
            f"{s.predicted_s / s.published_s - 1:+7.1%}  {s.device_only_s:11.3f}  "
            f"{s.device_only_s / s.published_s - 1:+7.1%}  {s.floor_share:11.1%}  "
            f"{s.unexplained_ns_per_token_layer:26.0f}  {s.label}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return rows_main(
        __doc__.splitlines()[0], lambda rows: [report([host_share(raw) for raw in rows])], argv
    )


if __name__ == "__main__":
    sys.exit(main())
