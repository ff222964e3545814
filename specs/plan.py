"""`ParallelPlan`: how a job is sharded, the planner's output and the executor's input.

Each field maps onto one Megatron-LM argument (see DESIGN.md). Field-local checks live in
``__post_init__``; rules that relate the plan to the model, cluster and job are the named
functions of `specs.rules`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from specs.errors import SpecError
from specs.fieldcheck import (
    require_choice,
    require_choices,
    require_non_negative,
    require_optional_positive,
    require_positive,
)
from specs.pipeline_layout import require_layout_text

Recompute = Literal["none", "selective", "full"]
RecomputeMethod = Literal["uniform", "block"]
Schedule = Literal["1f1b", "interleaved"]
CpCommType = Literal["p2p", "all_gather"]
ShardingStrategy = Literal["no_shard", "optim", "optim_grads", "optim_grads_params"]
RecomputeModule = Literal[
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
    "gdn_norm_out",
]
"""Megatron-core's selective-recompute modules (``TransformerConfig.recompute_modules``,
`megatron/core/transformer/transformer_config.py`)."""
OffloadModule = Literal[
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"
]
"""Megatron-core's fine-grained activation-offloading modules, each offloading its input
(``TransformerConfig.offload_modules``, `megatron/core/transformer/transformer_config.py`)."""

MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
"""Megatron's default gradient bucket floor: max(40M, 1M x dp·cp) parameters
(`resolve_ddp_bucket_size`, megatron-facts.md §5.1)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelPlan:
    """Parallel degrees, batch split, memory savers and overlap switches of one run."""

    tp: int = 1
    """Tensor-parallel size (`--tensor-model-parallel-size`)."""
    pp: int = 1
    """Pipeline stages (`--pipeline-model-parallel-size`)."""
    vpp: int = 1
    """Model chunks per pipeline rank; 1 means no interleaving
    (`--num-layers-per-virtual-pipeline-stage` = layers / (pp·vpp))."""
    cp: int = 1
    """Context-parallel size (`--context-parallel-size`)."""
    ep: int = 1
    """Expert-parallel size (`--expert-model-parallel-size`); carved out of tp·cp·dp."""
    etp: int | None = None
    """Tensor-parallel size inside experts (`--expert-tensor-parallel-size`); None means tp,
    Megatron's default."""
    dp: int = 1
    """Data-parallel size; always world / (tp·pp·cp), checked by `world_size_matches`."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism over the TP group (`--sequence-parallel`, needs tp > 1)."""
    micro_batch_size: int = 1
    """Sequences per microbatch (`--micro-batch-size`)."""
    recompute: Recompute = "none"
    """Activation recomputation: none, selective (attention core) or full (whole layers)."""
    recompute_num_layers: int | None = None
    """With full recompute: layers per pipeline stage (chunk) that are recomputed
    (`--recompute-num-layers`); None means all of them."""
    recompute_method: RecomputeMethod = "uniform"
    """With full recompute: `uniform` or `block` (`--recompute-method`)."""
    distributed_optimizer: bool = False
    """Shard optimizer state over dp·cp (`--use-distributed-optimizer`)."""
    ddp_bucket_size: int | None = None
    """Gradient bucket in parameters (`--ddp-bucket-size`); None means Megatron's default
    max(40M, 1M·dp·cp)."""
    overlap_grad_reduce: bool = False
    """Reduce gradient buckets during the backward pass (`--overlap-grad-reduce`)."""
    overlap_param_gather: bool = False
    """All-gather parameter buckets during the next forward (`--overlap-param-gather`)."""
    tp_comm_overlap: bool = False
    """Pipeline TP collectives with GEMMs (`--tp-comm-overlap`, needs sequence parallel)."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule: `1f1b`, or `interleaved` when vpp > 1."""
    cp_comm_type: CpCommType = "p2p"
    """Context-parallel K/V exchange: `p2p` (ring, overlapped) or `all_gather`."""
    # ---- Megatron-FSDP ---------------------------------------------------------------
    use_megatron_fsdp: bool = False
    """Shard over dp·cp with Megatron-FSDP (`--use-megatron-fsdp`) instead of DDP and the
    distributed optimizer."""
    data_parallel_sharding_strategy: ShardingStrategy = "no_shard"
    """With Megatron-FSDP, what is sharded over dp·cp (`--data-parallel-sharding-strategy`):
    `no_shard`, `optim` (optimizer state), `optim_grads` (+ gradients) or
    `optim_grads_params` (+ weights, gathered per layer; Megatron's default under
    `--use-megatron-fsdp`). Without Megatron-FSDP it stays `no_shard`."""

    # ---- uneven pipeline split (Megatron's semantics: `specs.pipeline_split`) ----------
    decoder_first_pipeline_num_layers: int | None = None
    """Transformer layers on the first pipeline stage, over all its chunks
    (`--decoder-first-pipeline-num-layers`); None means the even split."""
    decoder_last_pipeline_num_layers: int | None = None
    """Transformer layers on the last pipeline stage, over all its chunks
    (`--decoder-last-pipeline-num-layers`); None means the even split."""
    account_for_embedding_in_pipeline_split: bool = False
    """Count the embedding as one layer of the first chunk in the even split
    (`--account-for-embedding-in-pipeline-split`)."""
    account_for_loss_in_pipeline_split: bool = False
    """Count the output layer and loss as one layer of the last chunk in the even split
    (`--account-for-loss-in-pipeline-split`)."""
    pipeline_model_parallel_layout: str | None = None
    """Explicit layout (`--pipeline-model-parallel-layout`): `E` embedding, `t` transformer
    layer, `m` MTP layer, `L` loss, `|` between virtual stages (ordered by virtual stage,
    then rank), `(...)*n` and `x*n` repetition, commas ignored; None means no layout."""

    # ---- per-module recompute and CPU activation offloading ------------------------------
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    """With selective recompute, the Megatron-core modules recomputed in backward
    (`--recompute-modules`): `core_attn`, `moe_act`, `layernorm`, `mla_up_proj`, `mlp`,
    `moe`, `shared_experts`, `gdn_norm_out` (a gated DeltaNet's output norm); None means
    Megatron's default, `core_attn` alone; an empty tuple recomputes nothing."""
    cpu_offloading_num_layers: int = 0
    """Layers whose activations are offloaded to host memory during forward and reloaded
    in backward (`--cpu-offloading` with `--cpu-offloading-num-layers`); 0 means off."""
    offload_modules: tuple[OffloadModule, ...] = ()
    """Fine-grained activation offloading (`--fine-grained-activation-offloading` with
    `--offload-modules`): the modules whose input is offloaded to host memory, in every
    layer; empty means off."""

    def __post_init__(self) -> None:
        require_positive(self, "tp", "pp", "vpp", "cp", "ep", "dp", "micro_batch_size")
        require_optional_positive(
            self,
            "etp",
            "recompute_num_layers",
            "ddp_bucket_size",
            "decoder_first_pipeline_num_layers",
            "decoder_last_pipeline_num_layers",
        )
        require_choice(self, "recompute", Recompute)
        require_choice(self, "recompute_method", RecomputeMethod)
        require_choice(self, "schedule", Schedule)
        require_choice(self, "cp_comm_type", CpCommType)
        require_choice(self, "data_parallel_sharding_strategy", ShardingStrategy)
        require_non_negative(self, "cpu_offloading_num_layers")
        require_choices(self, "recompute_modules", RecomputeModule)
        require_choices(self, "offload_modules", OffloadModule)
        require_layout_text(self.pipeline_model_parallel_layout)

    @classmethod
    def for_world(cls, world_size: int, **degrees: object) -> ParallelPlan:
        """Build a plan whose dp is derived from the world size: world / (tp·pp·cp).

        When the world is not divisible, dp is rounded down (at least 1) and
        `specs.rules.world_size_matches` reports the mismatch. An interleaved schedule is
        chosen when vpp > 1 unless ``schedule`` is given.
        """
        if world_size < 1:
            raise SpecError(f"world size must be a positive integer, got {world_size}")
        model_parallel = 1
        for key in ("tp", "pp", "cp"):
            value = degrees.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"ParallelPlan.{key} must be a positive integer, got {value!r}")
            model_parallel *= value
        degrees.setdefault("dp", max(1, world_size // model_parallel))
        vpp = degrees.get("vpp", 1)
        if isinstance(vpp, int) and vpp > 1:
            degrees.setdefault("schedule", "interleaved")
        return cls(**degrees)  # type: ignore[arg-type]

    # ---- derived values ------------------------------------------------------------

    @property
    def world_size(self) -> int:
        """tp·pp·cp·dp, the ranks this plan uses."""
        return self.tp * self.pp * self.cp * self.dp

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel size inside experts."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel size: world / (etp·ep·pp) (Megatron's EDP); 0 if not whole."""
        denom = self.expert_tp * self.ep * self.pp
        return self.world_size // denom if self.world_size % denom == 0 else 0

    def num_microbatches(self, global_batch_size: int) -> int:
        """Microbatches per iteration per pipeline: global / (mbs·dp), rounded down."""
        return global_batch_size // (self.micro_batch_size * self.dp)

    def bucket_size_params(self) -> int:
        """Gradient bucket in parameters, with Megatron's default when unset."""
        if self.ddp_bucket_size is not None:
            return self.ddp_bucket_size
        return max(MEGATRON_MIN_BUCKET_PARAMS, 1_000_000 * self.dp * self.cp)

    def label(self) -> str:
        """Compact one-line description, e.g. ``tp2 pp4 vpp2 dp8 mbs1 sp sel``."""
        parts = [f"tp{self.tp}", f"pp{self.pp}"]
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp{self.etp}")
        parts += [f"dp{self.dp}", f"mbs{self.micro_batch_size}"]
        if self.sequence_parallel:
            parts.append("sp")
        if self.recompute != "none":
            parts.append({"selective": "rc-sel", "full": "rc-full"}[self.recompute])
        saver = self.saver_label()
        if saver:
            parts.append(saver)
        if self.distributed_optimizer:
            parts.append("distopt")
        if self.use_megatron_fsdp:
            parts.append(f"fsdp-{self.data_parallel_sharding_strategy}")
        split = self.split_label()
        if split:
            parts.append(split)
        return " ".join(parts)

    @property
    def has_uneven_split(self) -> bool:
        """True when any uneven pipeline split field is set."""
        return (
            self.decoder_first_pipeline_num_layers is not None
            or self.decoder_last_pipeline_num_layers is not None
            or self.account_for_embedding_in_pipeline_split
            or self.account_for_loss_in_pipeline_split
            or self.pipeline_model_parallel_layout is not None
        )

    def split_label(self) -> str:
        """The uneven split in `label` form (``first7 last7``, ``acc-emb acc-loss``,
        ``layout=Et|(tt|)*30mL``); empty for the even split."""
        parts = []
        if self.decoder_first_pipeline_num_layers is not None:
            parts.append(f"first{self.decoder_first_pipeline_num_layers}")
        if self.decoder_last_pipeline_num_layers is not None:
            parts.append(f"last{self.decoder_last_pipeline_num_layers}")
        if self.account_for_embedding_in_pipeline_split:
            parts.append("acc-emb")
        if self.account_for_loss_in_pipeline_split:
            parts.append("acc-loss")
        if self.pipeline_model_parallel_layout is not None:
            parts.append(f"layout={self.pipeline_model_parallel_layout}")
        return " ".join(parts)

    @property
    def selective_modules(self) -> tuple[str, ...]:
        """The modules selective recompute reruns: `recompute_modules`, or Megatron's
        default ``("core_attn",)`` when it is None; empty unless recompute is selective."""
        if self.recompute != "selective":
            return ()
        return ("core_attn",) if self.recompute_modules is None else self.recompute_modules

    @property
    def checkpoints_mtp_depths(self) -> bool:
        """True when Megatron-core checkpoints each multi-token-prediction depth: full
        recompute with the ``uniform`` method. ``MultiTokenPredictionLayer.forward``
        (``megatron/core/transformer/multi_token_prediction.py``, NVIDIA/Megatron-LM
        d98e8a64) calls ``_checkpointed_forward`` when ``recompute_granularity == "full"``;
        that checkpoints ``_proj_and_transformer_layer`` under ``recompute_method ==
        "uniform"`` (asserting ``recompute_num_layers == 1``, the rule
        ``mtp_uniform_recompute_one_layer``) and runs it without a checkpoint under
        ``"block"`` (a warning, "not supported for MTP yet"). Selective recompute reaches
        the depth's layers as any layer's; this is about the depth's checkpoint. The
        simulator, the screen, the activation count and HFU read it."""
        return self.recompute == "full" and self.recompute_method == "uniform"

    @property
    def offloads_activations(self) -> bool:
        """True when layer-level or fine-grained activation offloading is on."""
        return self.cpu_offloading_num_layers > 0 or bool(self.offload_modules)

    def saver_label(self) -> str:
        """Per-module recompute and offloading in `label` form (``rc=mla_up_proj+mlp``,
        ``offload20``, ``offload=core_attn+attn_proj``); empty when neither is set."""
        parts = []
        if self.recompute == "selective" and self.recompute_modules is not None:
            parts.append("rc=" + ("+".join(self.recompute_modules) or "-"))
        if self.cpu_offloading_num_layers:
            parts.append(f"offload{self.cpu_offloading_num_layers}")
        if self.offload_modules:
            parts.append("offload=" + "+".join(self.offload_modules))
        return " ".join(parts)

    def replace(self, **changes: object) -> ParallelPlan:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
