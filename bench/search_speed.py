"""Search speed: candidate plans evaluated per second and wall time of full searches.

Cases (the full knob space, nothing fixed):
- llama3.1-405b on 16,384 H100 (seq 8192, global batch 2048: Llama 3.1's pre-training
  shape, arXiv 2407.21783 §3.3);
- deepseek-v3 on 2,048 H100 with expert parallelism (seq 4096, global batch 15,360: the
  DeepSeek-V3 technical report, arXiv 2412.19437 §4.2);
- deepseek-v3 on 1,024 H100 (seq 4096, global batch 8,192: Megatron-Bridge's DeepSeek-V3
  pre-training recipe size).

"Enumerated" counts every candidate the generators produced, "screened" those the
closed-form estimate evaluated (the others were rejected by a rule, by the model-state
memory floor, or by the time bound: "slower" counts the candidates whose lower bound of
iteration time is above the top_k-th screened plan's), "simulated" those the event
simulator ran. Rate = enumerated / wall time; "cpu" is the process's CPU time, which a
shared machine does not inflate. Target: each full search under 10 s on a 2-core machine.

Run: ``python bench/search_speed.py [--top K]``.
"""

from __future__ import annotations

import argparse
import time

from planner.search import search_plans
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.formats import percent
from specs.job import TrainingJob
from specs.presets import get_preset

CASES = (
    ("llama3.1-405b", "h100-sxm-80gb", 16_384, 8192, 2048),
    ("deepseek-v3", "h100-sxm-80gb", 2_048, 4096, 15_360),
    ("deepseek-v3", "h100-sxm-80gb", 1_024, 4096, 8_192),
)


def run_case(name: str, hardware: str, gpus: int, seq: int, batch: int, top_k: int) -> None:
    model = get_preset(name)
    cluster = ClusterSpec(hardware=hardware, num_gpus=gpus)
    job = TrainingJob(seq_length=seq, global_batch_size=batch)
    profile = load_profile(hardware)
    start, start_cpu = time.perf_counter(), time.process_time()
    result = search_plans(model, cluster, job, profile, top_k=top_k)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    simulated = len(result.top) + len(result.closest)
    print(f"{name} on {gpus} x {hardware} (seq {seq}, global batch {batch})")
    print(
        f"  enumerated {result.num_enumerated:,}  passed rules {result.num_valid:,}  "
        f"screened {result.num_screened:,}  slower {result.rejected.get('slower', 0):,}  "
        f"simulated {simulated}"
    )
    print(
        f"  wall {wall:.2f} s  cpu {cpu:.2f} s  "
        f"rate {result.num_enumerated / wall:,.0f} candidates/s"
    )
    if result.best is not None:
        est = result.best.estimate
        print(
            f"  best {result.best.plan.label()}: {est.tokens_per_s:,.0f} tokens/s, "
            f"MFU {percent(est.mfu)}, peak {est.peak_memory_gib:.1f} GiB"
        )
    else:
        closest = result.closest[0] if result.closest else None
        detail = (
            f"; closest {closest.plan.label()} at {closest.estimate.peak_memory_gib:.1f} GiB"
            if closest
            else ""
        )
        print(f"  no plan fits{detail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="plans simulated (default 10)")
    args = parser.parse_args()
    for case in CASES:
        run_case(*case, top_k=args.top)


if __name__ == "__main__":
    main()
