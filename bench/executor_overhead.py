"""Executor overhead: tokens/s of `paraplan execute` on one process against a plain PyTorch
training loop of the same model, batch, optimizer and thread count, measured side by side.

Both sides run in a spawned one-rank process (`executor.launch`, so the same thread count
and environment), train the model of `executor.model.build_model` with AdamW (the
engine's hyperparameters) on the same synthetic batches, time each step with a wall clock
around the step only (batches are ready beforehand), and report the median step. The executor's
figure is its own ``metrics.json`` ``tokens_per_s`` (median over its unprofiled measured
steps). Rounds alternate plain / executor so both see the same machine load; the best
round of each side is compared. Target: executor / plain >= 0.9.

    .venv/bin/python bench/executor_overhead.py [--model tiny] [--seq-len 128] [--batch 4]
        [--steps 10] [--warmup 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from executor.data import SyntheticStream, rank_batch
from executor.launch import RankInfo, launch
from executor.model import build_model
from executor.pipeline import lm_loss
from executor.run import RunConfig, execute
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

TARGET_RATIO = 0.9


def plain_tokens_per_s(bundle: PlanBundle, *, steps: int, warmup: int, seed: int) -> float:
    """Median-step tokens/s of a hand-written loop (forward, loss, backward, AdamW), run in
    a spawned process like the executor's rank, with the same thread count."""
    return launch(_plain_loop, (bundle, steps, warmup, seed), world_size=1)[0]


def _plain_loop(_: RankInfo, bundle: PlanBundle, steps: int, warmup: int, seed: int) -> float:
    model = build_model(bundle.model, seed=seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0
    )
    job = bundle.job
    stream = SyntheticStream(bundle.model.vocab_size, job.seq_length, seed)
    batches = [
        rank_batch(stream, s, global_batch_size=job.global_batch_size, dp_rank=0, dp_size=1)
        for s in range(warmup + steps)
    ]
    times = []
    for i, tokens in enumerate(batches):
        start = time.perf_counter()
        inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        loss = lm_loss(model(inputs), targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return job.tokens_per_iteration / statistics.median(times)


def executor_tokens_per_s(bundle: PlanBundle, *, steps: int, warmup: int, seed: int) -> float:
    """tokens/s that `paraplan execute` reports for the same bundle (one spawned rank)."""
    with tempfile.TemporaryDirectory() as out:
        execute(
            RunConfig(
                bundle=bundle, out_dir=out, steps=steps, warmup=warmup, seed=seed, profile_steps=1
            )
        )
        return json.loads((Path(out) / "metrics.json").read_text())["tokens_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="model preset (default tiny)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4, help="global batch, one microbatch")
    parser.add_argument("--steps", type=int, default=10, help="measured steps per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bundle = PlanBundle(
        model=get_preset(args.model),
        cluster=ClusterSpec(hardware="cpu", num_gpus=1),
        job=TrainingJob(seq_length=args.seq_len, global_batch_size=args.batch, precision="fp32"),
        plan=ParallelPlan(micro_batch_size=args.batch),
    )
    plain, executed = [], []
    for r in range(args.rounds):
        kw = {"steps": args.steps, "warmup": args.warmup, "seed": r}
        plain.append(plain_tokens_per_s(bundle, **kw))
        executed.append(executor_tokens_per_s(bundle, **kw))
        print(f"round {r}: plain {plain[-1]:,.0f} tokens/s, executor {executed[-1]:,.0f} tokens/s")
    ratio = max(executed) / max(plain)
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(
        f"{args.model} seq {args.seq_len} batch {args.batch}: "
        f"plain {max(plain):,.0f} tokens/s, executor {max(executed):,.0f} tokens/s, "
        f"ratio {ratio:.3f} ({verdict} the target {TARGET_RATIO})"
    )


if __name__ == "__main__":
    main()
