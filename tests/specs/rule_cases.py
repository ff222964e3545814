"""The table of `specs.rules` cases shared by the rule tests: `CASES`, one `Case` per rule
with a plan it rejects, a plan it accepts and the operands its message must name, as
`Change`s of the base specs (`tests.specs.rule_specs`); the hybrid and DeepSeek sparse
attention cases are `tests.specs.rule_cases_hybrid`'s."""

from __future__ import annotations

from specs.finetune import LoraSpec
from tests.specs.rule_cases_hybrid import HYBRID_CASES
from tests.specs.rule_specs import (
    FSDP_PLAN,
    GDN_HYBRID,
    LAYOUT_8,
    LORA,
    MIXTRAL,
    MLA_FIELDS,
    Case,
    Change,
)

CASES = [
    Case(
        "world_size_matches",
        Change(cluster={"num_gpus": 48}),
        Change(cluster={"num_gpus": 32}, plan={"dp": 4}),
        ("tp (2)", "pp (4)", "cp (1)", "dp (8)", "64", "num_gpus (48)", "dp=6"),
    ),
    Case(
        "heads_divisible_by_tp",
        Change(plan={"tp": 3}),
        Change(plan={"tp": 8}),
        ("num_attention_heads (32)", "tp (3)", "10.67"),
    ),
    Case(
        "query_groups_divisible_by_tp",
        # 48 heads in 12 KV groups: tp 8 neither divides 12 nor is a multiple of it
        Change(
            model={"hidden_size": 4608, "num_attention_heads": 48, "num_query_groups": 12},
            plan={"tp": 8},
        ),
        # tp 16 over 8 KV groups: Megatron-core sub-shards the QKV activations (tp % g == 0)
        Change(plan={"tp": 16}),
        ("num_query_groups (12)", "tp (8)", "1.50", "multiple or a divisor"),
    ),
    Case(
        "ffn_divisible_by_tp",
        Change(model={"ffn_hidden_size": 14330}, plan={"tp": 4}),
        # every layer is MoE, so the dense ffn size is never split
        Change(base=MIXTRAL, model={"ffn_hidden_size": 14330, "moe_ffn_hidden_size": 14336}),
        ("ffn_hidden_size (14330)", "tp (4)", "3582.50"),
    ),
    Case(
        "shared_expert_ffn_divisible_by_tp",
        Change(base=MIXTRAL, model={"moe_shared_expert_size": 2050}, plan={"tp": 4}),
        Change(base=MIXTRAL, model={"moe_shared_expert_size": 2048}, plan={"tp": 4}),
        ("moe_shared_expert_size (2050)", "tp (4)"),
    ),
    Case(
        "ep_needs_moe",
        Change(plan={"ep": 2}),
        Change(base=MIXTRAL, plan={"ep": 2}),
        ("ep (2)", "num_experts (0)"),
    ),
    Case(
        "etp_needs_moe",
        Change(plan={"etp": 4}),
        Change(base=MIXTRAL, plan={"etp": 4}),
        ("etp (4)", "tp (2)", "num_experts (0)", "drop etp"),
    ),
    Case(
        "experts_divisible_by_ep",
        Change(base=MIXTRAL, plan={"ep": 3}),
        Change(base=MIXTRAL, plan={"ep": 4}),
        ("num_experts (8)", "ep (3)"),
    ),
    Case(
        "expert_ffn_divisible_by_etp",
        Change(base=MIXTRAL, model={"moe_ffn_hidden_size": 1406}, plan={"etp": 4}),
        Change(base=MIXTRAL, model={"moe_ffn_hidden_size": 1406}, plan={"etp": 2}),
        ("(1406)", "etp (4)"),
    ),
    Case(
        "expert_grid_divides_world",
        # one stage holds tp·cp·dp = 16 ranks; etp·ep = 32 cannot fold into it
        Change(base=MIXTRAL, plan={"ep": 8, "etp": 4}),
        Change(base=MIXTRAL, plan={"ep": 8, "etp": 2}),
        ("etp (4)", "ep (8)", "= 16", "world (64)"),
    ),
    Case(
        "layers_divisible_by_pp",
        Change(model={"num_layers": 30}),
        Change(model={"num_layers": 30}, plan={"pp": 2, "dp": 16}),
        ("num_layers (30)", "pp (4)", "7.50"),
    ),
    Case(
        "layout_parses",
        Change(plan={"pipeline_model_parallel_layout": "Et*4|(t*4|)*6t*4X"}),
        Change(plan={"pipeline_model_parallel_layout": LAYOUT_8}),
        ("'X'", "virtual stage 7"),
    ),
    Case(
        "layout_excludes_other_split_flags",
        Change(
            plan={
                "pipeline_model_parallel_layout": LAYOUT_8,
                "account_for_loss_in_pipeline_split": True,
            }
        ),
        Change(plan={"pipeline_model_parallel_layout": LAYOUT_8}),
        ("account_for_loss_in_pipeline_split (True)", LAYOUT_8),
    ),
    Case(
        "uneven_split_excludes_account_flags",
        Change(
            plan={
                "decoder_first_pipeline_num_layers": 6,
                "account_for_embedding_in_pipeline_split": True,
            }
        ),
        Change(plan={"decoder_first_pipeline_num_layers": 6}),
        ("decoder_first_pipeline_num_layers (6)", "account_for_embedding_in_pipeline_split (True)"),
    ),
    Case(
        "layout_stages_match_pp_vpp",
        Change(plan={"pipeline_model_parallel_layout": "Et*8|t*8|t*8|t*8L"}),
        Change(plan={"pipeline_model_parallel_layout": LAYOUT_8}),
        ("4 virtual stages", "pp (4)", "vpp (2)", "vpp=1"),
    ),
    Case(
        "layout_embedding_first_loss_last",
        Change(plan={"pipeline_model_parallel_layout": "t*4|(t*4|)*6t*4L"}),
        Change(plan={"pipeline_model_parallel_layout": LAYOUT_8}),
        ("0 E", "1 L", "first 't'"),
    ),
    Case(
        "layout_covers_num_layers",
        Change(plan={"pipeline_model_parallel_layout": "Ettt|(t*4|)*6tttL"}),
        Change(
            model={"num_layers": 30}, plan={"pipeline_model_parallel_layout": "Ettt|(t*4|)*6tttL"}
        ),
        ("30 transformer layers", "num_layers is 32", "add 2 t"),
    ),
    Case(
        "layout_places_mtp",
        Change(plan={"pipeline_model_parallel_layout": "Et*4|(t*4|)*6t*4mL"}),
        Change(
            model={"mtp_num_layers": 1},
            plan={"pipeline_model_parallel_layout": "Et*4|(t*4|)*6t*4mL"},
        ),
        ("holds 1 m", "mtp_num_layers is 0"),
    ),
    Case(
        "uneven_layers_cover_model",
        Change(
            plan={"decoder_first_pipeline_num_layers": 20, "decoder_last_pipeline_num_layers": 20}
        ),
        Change(
            plan={"decoder_first_pipeline_num_layers": 8, "decoder_last_pipeline_num_layers": 8}
        ),
        ("decoder_first_pipeline_num_layers (20)", "leave -8", "2 middle ranks"),
    ),
    Case(
        "uneven_middle_layers_divisible_by_middle_stages",
        Change(
            plan={"decoder_first_pipeline_num_layers": 6, "decoder_last_pipeline_num_layers": 7}
        ),
        Change(
            plan={"decoder_first_pipeline_num_layers": 6, "decoder_last_pipeline_num_layers": 6}
        ),
        ("num_layers (32)", "(6)", "(7)", "= 19 middle layers", "2 middle ranks"),
    ),
    Case(
        "uneven_stage_layers_divisible_by_vpp",
        Change(
            plan={"decoder_first_pipeline_num_layers": 7, "decoder_last_pipeline_num_layers": 7}
        ),
        Change(
            plan={"decoder_first_pipeline_num_layers": 8, "decoder_last_pipeline_num_layers": 8}
        ),
        ("vpp (2)", "decoder_first_pipeline_num_layers (7)", "layers per middle rank (9)"),
    ),
    Case(
        "layers_per_stage_divisible_by_vpp",
        Change(plan={"vpp": 3}),
        Change(plan={"vpp": 4}),
        ("num_layers (32)", "pp (4)", "= 8", "vpp (3)"),
    ),
    Case(
        "schedule_matches_vpp",
        Change(plan={"schedule": "1f1b"}),
        Change(plan={"schedule": "1f1b", "vpp": 1}),
        ("'1f1b'", "vpp (2)"),
    ),
    Case(
        "interleaved_needs_pp_gt_1",
        Change(plan={"pp": 1, "dp": 32}),
        Change(plan={"pp": 2, "dp": 16}),
        ("vpp (2)", "pp (1)"),
    ),
    Case(
        "global_batch_divisible_by_mbs_dp",
        Change(job={"global_batch_size": 250}),
        Change(job={"global_batch_size": 224}),
        ("global_batch_size (250)", "micro_batch_size (1)", "dp (8)", "31.25"),
    ),
    Case(
        "interleaved_needs_microbatches_multiple_of_pp",
        Change(job={"global_batch_size": 48}),  # m = 6
        Change(job={"global_batch_size": 64}),  # m = 8
        ("global_batch_size (48)", "micro_batch_size (1)", "dp (8)", "= 6", "pp (4)"),
    ),
    Case(
        "seq_divisible_by_2cp",
        Change(job={"seq_length": 4098}, plan={"cp": 2, "dp": 4}),
        Change(plan={"cp": 2, "dp": 4}),
        ("seq_length (4098)", "cp (2)", "= 4"),
    ),
    Case(
        "packed_document_divisible_by_2cp",
        Change(job={"packed_document_tokens": 1030}, plan={"cp": 2, "dp": 4}),
        Change(job={"packed_document_tokens": 1028}, plan={"cp": 2, "dp": 4}),
        ("packed_document_tokens (1030)", "cp (2)", "= 4", "{1028, 1032}"),
    ),
    Case(
        "sequence_parallel_needs_tp",
        Change(plan={"tp": 1, "dp": 16, "tp_comm_overlap": False}),
        Change(plan={"tp": 1, "dp": 16, "tp_comm_overlap": False, "sequence_parallel": False}),
        ("sequence_parallel (True)", "tp (1)"),
    ),
    Case(
        "sequence_parallel_seq_divisible_by_tp",
        Change(job={"seq_length": 4100}, plan={"tp": 8, "dp": 2}),
        Change(job={"seq_length": 4104}, plan={"tp": 8, "dp": 2}),
        ("seq_length (4100)", "cp (1)", "tp (8)"),
    ),
    Case(
        "tp_comm_overlap_needs_sequence_parallel",
        Change(plan={"sequence_parallel": False}),
        Change(plan={"tp_comm_overlap": False, "sequence_parallel": False}),
        ("tp_comm_overlap (True)", "sequence_parallel (False)"),
    ),
    Case(
        "tp_comm_overlap_not_with_nvfp4",
        Change(job={"precision": "nvfp4"}),
        Change(job={"precision": "nvfp4"}, plan={"tp_comm_overlap": False}),
        ("tp_comm_overlap (True)", "precision (nvfp4)", "tp_comm_overlap=False"),
    ),
    Case(
        "overlap_param_gather_needs_distributed_optimizer",
        Change(plan={"distributed_optimizer": False}),
        Change(plan={"distributed_optimizer": False, "overlap_param_gather": False}),
        ("overlap_param_gather (True)", "distributed_optimizer (False)"),
    ),
    Case(
        "overlap_param_gather_needs_overlap_grad_reduce",
        Change(plan={"overlap_grad_reduce": False}),
        Change(plan={"overlap_grad_reduce": False, "overlap_param_gather": False}),
        ("overlap_param_gather (True)", "overlap_grad_reduce (False)"),
    ),
    Case(
        "recompute_num_layers_needs_full",
        Change(plan={"recompute": "selective", "recompute_num_layers": 2}),
        Change(plan={"recompute": "full", "recompute_num_layers": 2}),
        ("recompute_num_layers (2)", "'selective'"),
    ),
    Case(
        "recompute_num_layers_within_chunk",
        # 32 layers / (pp 4 · vpp 2) = 4 layers per chunk
        Change(plan={"recompute": "full", "recompute_num_layers": 5}),
        Change(plan={"recompute": "full", "recompute_num_layers": 4}),
        ("recompute_num_layers (5)", "num_layers (32)", "pp (4)", "vpp (2)", "= 4"),
    ),
    Case(
        "mtp_uniform_recompute_one_layer",
        # MultiTokenPredictionLayer._checkpointed_forward asserts recompute_num_layers == 1
        # under uniform; block skips the MTP checkpoint (multi_token_prediction.py)
        Change(
            model={"mtp_num_layers": 1},
            plan={"recompute": "full", "recompute_num_layers": 2},
        ),
        Change(
            model={"mtp_num_layers": 1},
            plan={"recompute": "full", "recompute_num_layers": 2, "recompute_method": "block"},
        ),
        ("recompute_num_layers (2)", "recompute_method ('uniform')", "mtp_num_layers (1)"),
    ),
    Case(
        "max_position_covers_seq_length",
        Change(model={"position_embedding": "learned", "max_position_embeddings": 2048}),
        # rope has no position table, so the limit does not bind
        Change(model={"position_embedding": "rope", "max_position_embeddings": 2048}),
        ("seq_length (4096)", "max_position_embeddings (2048)"),
    ),
    Case(
        "sharding_strategy_needs_megatron_fsdp",
        Change(plan={"data_parallel_sharding_strategy": "optim"}),
        Change(
            plan={
                "data_parallel_sharding_strategy": "optim",
                "use_megatron_fsdp": True,
                "distributed_optimizer": False,
            }
        ),
        ("data_parallel_sharding_strategy (optim)", "use_megatron_fsdp (False)"),
    ),
    Case(
        "megatron_fsdp_excludes_distributed_optimizer",
        Change(plan={"use_megatron_fsdp": True, "distributed_optimizer": True}),
        Change(plan={"use_megatron_fsdp": True, "distributed_optimizer": False}),
        ("use_megatron_fsdp (True)", "distributed_optimizer (True)"),
    ),
    Case(
        "muon_excludes_sharded_optimizer",
        Change(job={"optimizer": "dist_muon"}, plan={"distributed_optimizer": True}),
        Change(job={"optimizer": "dist_muon"}, plan={"distributed_optimizer": False}),
        ("optimizer (dist_muon)", "distributed_optimizer (True)"),
    ),
    Case(
        "muon_excludes_overlap",
        Change(job={"optimizer": "muon"}, plan={"overlap_grad_reduce": True}),
        Change(job={"optimizer": "dist_muon"}, plan={"overlap_grad_reduce": True}),
        ("optimizer (muon)", "overlap_grad_reduce (True)"),
    ),
    Case(
        "recompute_modules_need_selective",
        Change(plan={"recompute_modules": ("mlp",)}),
        Change(plan={"recompute_modules": ("mlp",), "recompute": "selective"}),
        ("recompute_modules (mlp)", "recompute ('none')"),
    ),
    Case(
        "recompute_modules_match_model",
        Change(plan={"recompute": "selective", "recompute_modules": ("moe_act", "mlp")}),
        Change(plan={"recompute": "selective", "recompute_modules": ("moe_act",)}, base=MIXTRAL),
        ("moe_act (no MoE layers)",),
    ),
    Case(
        "cpu_offloading_layers_below_num_layers",
        Change(plan={"cpu_offloading_num_layers": 32, "pp": 1, "vpp": 1, "dp": 32}),
        Change(plan={"cpu_offloading_num_layers": 31, "pp": 1, "vpp": 1, "dp": 32}),
        ("cpu_offloading_num_layers (32)", "num_layers (32)", "at most 31"),
    ),
    Case(
        "cpu_offloading_without_pipeline_or_recompute",
        Change(plan={"cpu_offloading_num_layers": 8}),
        Change(plan={"cpu_offloading_num_layers": 8, "pp": 1, "vpp": 1, "dp": 32}),
        ("cpu_offloading_num_layers (8)", "pp (4)", "recompute ('none')"),
    ),
    Case(
        "offload_modules_valid",
        Change(plan={"offload_modules": ("attn_proj",)}),
        Change(plan={"offload_modules": ("core_attn", "attn_proj")}),
        ("offload_modules (attn_proj)", "add core_attn"),
    ),
    Case(
        "lora_rank_divisible_by_tp",
        Change(job={"lora": LoraSpec(rank=3, targets=("linear_qkv",))}),
        Change(job={"lora": LoraSpec(rank=3, targets=("linear_proj",))}),
        ("tp (2)", "linear_qkv: rank (3)", "rank in {2, 4}"),
    ),
    Case(
        "lora_not_on_experts",
        Change(base=MIXTRAL, job={"lora": LORA}),
        Change(job={"lora": LORA}),
        ("'mixtral-like'", "8 experts"),
    ),
    Case(
        "lora_not_on_mla",
        Change(model=MLA_FIELDS, job={"lora": LORA}),
        Change(model=MLA_FIELDS),
        ("'llama3-8b-like'",),
    ),
    Case(
        "lora_not_on_gdn",
        Change(base=GDN_HYBRID, job={"lora": LORA}),
        Change(base=GDN_HYBRID),
        ("'qwen3-next-like'", "G"),
    ),
    Case(
        "lora_not_with_megatron_fsdp",
        Change(job={"lora": LORA}, plan=FSDP_PLAN),
        Change(job={"lora": LORA}),
        ("use_megatron_fsdp (True)", "--dist-opt"),
    ),
    Case(
        "lora_needs_adam",
        Change(job={"lora": LORA, "optimizer": "muon"}),
        Change(job={"optimizer": "muon"}),
        ("optimizer (muon)",),
    ),
    Case(
        "parallel_block_not_with_tp_comm_overlap",
        Change(model={"layer_block": "parallel"}),
        Change(model={"layer_block": "parallel"}, plan={"tp_comm_overlap": False}),
        ("layer_block ('parallel')", "tp_comm_overlap (True)", "tp_comm_overlap=False"),
    ),
    Case(
        "parallel_block_not_with_lora",
        Change(model={"layer_block": "parallel_shared_norm"}, job={"lora": LORA}),
        Change(job={"lora": LORA}),
        ("layer_block ('parallel_shared_norm')", "LoRA r", "layer_block='sequential'"),
    ),
    *HYBRID_CASES,
]
