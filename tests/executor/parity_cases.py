"""Parity cases: tiny models, one plan each, run on a gloo world and in one process.

A case trains ``STEPS`` steps from the same seed and the same global batches twice: with
its plan on a spawned world (`world_worker`, all cases of one world size in one spawn) and
with the one-rank plan of the same micro-batch size in the test process (`reference`).
Each records the loss of every step and the gradients after the first backward, keyed by
full-model parameter name (DTensors gathered with ``full_tensor()``; routed experts keyed
with the global index of their first expert). The first step's gradients are read between
`Engine.forward_backward` and `Engine.optimizer_step`.

Why the single-process reference uses the same micro-batch size: the MoE load-balancing
loss and token dropping are per micro-batch statistics (as in Megatron), so the reference
must see the same micro-batches; for dense models it makes no difference.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from executor.context import ParallelContext
from executor.data_parallel import is_expert_parameter
from executor.engine import Engine
from specs import ClusterSpec, ModelSpec, ParallelPlan, PlanBundle, TrainingJob
from specs.layout import RankLayout

STEPS = 3
SEED = 1234
LEARNING_RATE = 1e-3


def tiny_model(**changes: object) -> ModelSpec:
    """2 layers, hidden 32, 4 query heads in 2 groups (GQA), SwiGLU, RMSNorm, RoPE, vocab 256
    (a multiple of 128·tp for tp <= 2, so no split pads the vocabulary differently)."""
    base = ModelSpec(
        name="parity-tiny",
        num_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=64,
        vocab_size=256,
        max_position_embeddings=64,
    )
    return base.replace(**changes)


def tiny_moe(**changes: object) -> ModelSpec:
    """The tiny model with 4 experts, top-2, a shared expert and capacity factor 1.5."""
    moe = {
        "num_experts": 4,
        "moe_top_k": 2,
        "moe_ffn_hidden_size": 48,
        "moe_shared_expert_size": 32,
        "moe_capacity_factor": 1.5,
    }
    return tiny_model(**(moe | changes))


@dataclass(frozen=True)
class Case:
    """One plan to check against the single-process reference."""

    name: str
    model: ModelSpec
    plan: ParallelPlan
    seq_length: int = 16
    global_batch_size: int = 4
    profile: bool = False
    """Run one more step under torch.profiler and record the ``paraplan/`` range names."""

    def bundle(self, plan: ParallelPlan | None = None) -> PlanBundle:
        plan = plan or self.plan
        return PlanBundle(
            model=self.model,
            cluster=ClusterSpec(hardware="cpu", num_gpus=plan.world_size),
            job=TrainingJob(
                seq_length=self.seq_length,
                global_batch_size=self.global_batch_size,
                precision="fp32",
            ),
            plan=plan,
        )

    def reference_plan(self) -> ParallelPlan:
        return ParallelPlan(micro_batch_size=self.plan.micro_batch_size)

    def batches(self) -> list[torch.Tensor]:
        """One (global_batch, seq + 1) token batch per step."""
        generator = torch.Generator().manual_seed(SEED)
        vocab = self.model.vocab_size
        shape = (STEPS, self.global_batch_size, self.seq_length + 1)
        return list(torch.randint(0, vocab, shape, generator=generator))


def _plan(**degrees: object) -> ParallelPlan:
    return ParallelPlan(**degrees)  # type: ignore[arg-type]


CASES_2 = {
    c.name: c
    for c in [
        Case(name="tp2", model=tiny_model(), plan=_plan(tp=2, micro_batch_size=2)),
        Case(
            name="tp2_sp",
            # Learned positions, LayerNorm, GELU, biases and tied embeddings under SP,
            # plus selective recompute.
            model=tiny_model(
                position_embedding="learned",
                normalization="layernorm",
                activation="gelu",
                add_bias_linear=True,
                tied_embeddings=True,
            ),
            plan=_plan(tp=2, sequence_parallel=True, recompute="selective", micro_batch_size=2),
        ),
        Case(
            name="pp2_1f1b",
            # Tied embeddings across stages (embedding group) and full recompute.
            model=tiny_model(tied_embeddings=True),
            plan=_plan(pp=2, micro_batch_size=1, recompute="full"),
        ),
        Case(
            name="pp2_interleaved",
            model=tiny_model(num_layers=4),
            plan=_plan(pp=2, vpp=2, schedule="interleaved", micro_batch_size=1),
            profile=True,
        ),
        Case(
            name="dp2_ddp",
            model=tiny_model(),
            plan=_plan(dp=2, micro_batch_size=1, ddp_bucket_size=2000),
            global_batch_size=8,
            profile=True,
        ),
        Case(
            name="dp2_fsdp",
            model=tiny_model(tied_embeddings=True),
            plan=_plan(dp=2, micro_batch_size=2, distributed_optimizer=True),
            global_batch_size=8,
        ),
        Case(
            name="ep2_moe",
            model=tiny_moe(),
            plan=_plan(dp=2, ep=2, micro_batch_size=2),
            global_batch_size=8,
        ),
        Case(name="cp2", model=tiny_model(), plan=_plan(cp=2, micro_batch_size=2)),
        # MoE with its sequences split: experts over the TP group under SP, and over the CP
        # group. Dropless: capacity is computed on each rank's tokens (as in Megatron), so
        # with split sequences drops would differ from the single-process reference.
        Case(
            name="tp2_sp_ep2_moe",
            model=tiny_moe(moe_capacity_factor=None),
            plan=_plan(tp=2, sequence_parallel=True, ep=2, etp=1, micro_batch_size=2),
        ),
        Case(
            name="cp2_ep2_moe",
            model=tiny_moe(moe_capacity_factor=None),
            plan=_plan(cp=2, ep=2, micro_batch_size=2, recompute="full", recompute_method="block"),
        ),
    ]
}

CASES_4 = {
    c.name: c
    for c in [
        Case(name="tp2_pp2", model=tiny_model(), plan=_plan(tp=2, pp=2, micro_batch_size=1)),
        Case(
            name="dp2_tp2",
            model=tiny_model(),
            plan=_plan(dp=2, tp=2, micro_batch_size=1, ddp_bucket_size=3000),
            global_batch_size=8,
        ),
        Case(
            name="dp2_tp2_sp_fsdp",
            model=tiny_model(),
            plan=_plan(dp=2, tp=2, sequence_parallel=True, distributed_optimizer=True),
            global_batch_size=8,
        ),
        # Experts replicated over dp (expert-dp 2): FSDP2 shards them over their own mesh.
        Case(
            name="pp2_dp2_fsdp_moe",
            model=tiny_moe(),
            plan=_plan(pp=2, dp=2, micro_batch_size=1, distributed_optimizer=True),
            global_batch_size=8,
        ),
        # Experts over ep 2 with expert-dp 2, reduced by the bucketed all-reduce.
        Case(
            name="dp2_cp2_ep2_moe",
            model=tiny_moe(moe_capacity_factor=None),
            plan=_plan(dp=2, cp=2, ep=2, micro_batch_size=2),
            global_batch_size=8,
        ),
    ]
}


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def gradients(engine: Engine) -> dict[str, tuple[int, torch.Tensor]]:
    """Whole gradients of this rank's parameters, by full-model name (collective for
    DTensors: every rank of a mesh visits its parameters in the same order)."""
    out: dict[str, tuple[int, torch.Tensor]] = {}
    for chunk in engine.chunks:
        for name, param in chunk.named_parameters():
            grad = param.grad if param.grad is not None else torch.zeros_like(param)
            offset = 0
            if is_expert_parameter(name):
                offset = engine.ctx.coords["ep"] * param.shape[0]
            if name == "output.weight" and chunk.spec.tied_embeddings:
                name = "embedding.token.weight"  # the last stage's copy of the tied matrix
            out[name] = (offset, _full(grad))
    return out


def train(engine: Engine, case: Case, dp: int, dp_rank: int) -> dict[str, object]:
    """Run the case's steps; losses of every step and the first step's gradients."""
    rows = case.global_batch_size // dp
    losses, grads = [], {}
    batches = case.batches()
    for step, batch in enumerate(batches):
        tokens = batch[dp_rank * rows : (dp_rank + 1) * rows]
        losses.append(engine.forward_backward(tokens))
        if step == 0:
            grads = gradients(engine)
        engine.optimizer_step()
    result = {"losses": losses, "grads": grads, "num_parameters": engine.num_parameters}
    if case.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            engine.train_step(batches[0][dp_rank * rows : (dp_rank + 1) * rows])
        names = {e.name for e in prof.events() if e.name.startswith("paraplan/")}
        result["range_names"] = sorted(names)
    return result


def reference(case: Case) -> dict[str, object]:
    """The case trained by one process with no parallelism."""
    plan = case.reference_plan()
    engine = Engine.build(
        case.bundle(plan), ParallelContext.single(plan), seed=SEED, learning_rate=LEARNING_RATE
    )
    return train(engine, case, dp=1, dp_rank=0)


def world_worker(rank: int, save, case_names: list[str], cases: dict[str, Case]) -> None:
    """Run every named case on this rank, saving results after each; stop at the first
    failure (the other ranks would wait in a collective) after recording it."""
    results: dict[str, object] = {}
    for name in case_names:
        case = cases[name]
        try:
            ctx = ParallelContext.create(case.plan)
            engine = Engine.build(case.bundle(), ctx, seed=SEED, learning_rate=LEARNING_RATE)
            results[name] = train(engine, case, case.plan.dp, ctx.coords["dp"])
            results[name]["groups"] = {
                group: tuple(dist.get_process_group_ranks(pg)) for group, pg in ctx.groups.items()
            }
            assert ctx.mesh is not None
            results[name]["mesh_coordinate"] = tuple(ctx.mesh.get_coordinate() or ())
        except Exception:
            results[name] = {"error": traceback.format_exc()}
            save(results)
            raise
        save(results)


LOSS_ATOL = 1e-5
"""Largest loss difference accepted. fp32 (eps 1.2e-7) with reductions in another order
(TP partial sums, all-reduce and reduce-scatter order, micro-batch accumulation, attention
over gathered keys) moves a loss of ~5.5 by ~1e-6 over three steps; a wrong gradient scale
or a missing reduction moves it by 1e-3 or more (or, because Adam normalizes the step, not
at all: hence the gradient check below)."""
GRAD_RTOL = 1e-4
GRAD_ATOL_FRACTION = 1e-5
"""Gradients must agree to 1e-4 relative, plus 1e-5 of the largest reference gradient in
absolute terms, for gradients that are zero up to rounding (e.g. key biases, to which
softmax is invariant). Observed differences are below 1e-6 relative."""


def check_case(case: Case, results: list, error: str | None, expected: dict) -> None:
    """Assert the world's results for ``case`` match the single-process ``expected``."""
    per_rank = [r.get(case.name) if r else None for r in results]
    for rank, res in enumerate(per_rank):
        assert res is not None, f"rank {rank} has no result for {case.name}; world error: {error}"
        assert "error" not in res, f"rank {rank} failed {case.name}:\n{res['error']}"
    ref_losses = torch.tensor(expected["losses"])
    for rank, res in enumerate(per_rank):
        assert res["losses"] == per_rank[0]["losses"], f"rank {rank} reports another loss"
        torch.testing.assert_close(torch.tensor(res["losses"]), ref_losses, rtol=0, atol=LOSS_ATOL)
        assert res["num_parameters"] == expected["num_parameters"]
    ref_grads = expected["grads"]
    scale = max(g.abs().max().item() for _, g in ref_grads.values())
    seen: set[str] = set()
    for rank, res in enumerate(per_rank):
        for name, (offset, grad) in res["grads"].items():
            ref = ref_grads[name][1]
            if offset or grad.shape != ref.shape:
                ref = ref[offset : offset + grad.shape[0]]  # this rank's experts
            torch.testing.assert_close(
                grad,
                ref,
                rtol=GRAD_RTOL,
                atol=GRAD_ATOL_FRACTION * scale,
                msg=lambda m, n=name, r=rank: f"rank {r}, gradient of {n}: {m}",
            )
            seen.add(name)
    assert seen == set(ref_grads), f"gradients never checked: {set(ref_grads) - seen}"


def check_groups(case: Case, results: list) -> None:
    """Each rank's mesh coordinate and process groups are those of `specs.layout`."""
    layout = RankLayout.from_plan(case.plan)
    for rank, res in enumerate(results):
        assert res is not None and "groups" in res.get(case.name, {}), f"rank {rank}: no result"
        c = layout.coordinates(rank)
        assert res[case.name]["mesh_coordinate"] == (c.pp, c.dp, c.cp, c.tp)
        for group, ranks in res[case.name]["groups"].items():
            if group == "embedding":
                pipeline = layout.group_of(rank, "pp")
                assert ranks == (pipeline[0], pipeline[-1])
            else:
                axes = {"dp_cp": "dp-cp", "tp_cp": "tp-cp"}.get(group, group)
                assert ranks == layout.group_of(rank, axes), (case.name, group, rank)
