"""Rows of ``published-runs-dev.csv`` shared by the tests of bench/published_rows.py and the
recipe modules (`row_model`, `row_options`, `row_recipes`, `pipeline_recipes`,
`saver_recipes`, `precision_recipes`, `gpt_oss_recipes`, `nemo_recipes`, `hybrid_recipes`),
and the architecture columns of a model that several of them (and bench/unstated_vpp.py's)
state (`*_SHAPE`).

Each case is one row (the columns the mapping reads, copied from the row named), worked by
hand against the recipe file cited in the module under test.
"""

from __future__ import annotations


def row_with(row: dict[str, str], **changes: str) -> dict[str, str]:
    """``row`` with the columns of ``changes`` replaced or added."""
    return row | changes


GPT_OSS_120B_SHAPE = {
    "num_layers": "36",
    "hidden_size": "2880",
    "num_attention_heads": "64",
    "num_query_groups": "8",
    "ffn_hidden_size": "2880",
    "vocab_size": "201088",
    "seq_length": "4096",
    "num_experts": "128",
    "moe_top_k": "4",
    "moe_ffn_hidden_size": "2880",
}
"""GPT-OSS 120B's architecture columns and 4096-token sequence, shared by its cases."""


LLAMA3_70B_SHAPE = {
    "num_layers": "80",
    "hidden_size": "8192",
    "num_attention_heads": "64",
    "num_query_groups": "8",
    "ffn_hidden_size": "28672",
    "vocab_size": "128256",
    "seq_length": "8192",
}
"""Llama 3 70B's architecture columns and 8192-token sequence, shared by its cases
(Megatron-Bridge and NeMo 2.0 rows)."""

LLAMA3_405B_SHAPE = {
    "num_layers": "126",
    "hidden_size": "16384",
    "num_attention_heads": "128",
    "num_query_groups": "8",
    "ffn_hidden_size": "53248",
    "vocab_size": "128256",
    "seq_length": "8192",
}
"""Llama 3 (3.1) 405B's architecture columns and 8192-token sequence, shared by its cases
(Megatron-Bridge and the Llama 3 paper's rows)."""


LLAMA405_GB200 = {
    # row 119 (MBRIDGE-26.06, Llama 3.1 405B on 256 GB200, FP8).
    "row_id": "119",
    "source_id": "MBRIDGE-26.06",
    "model": "LLAMA3.1_405B",
    "arch_notes": "SwiGLU, GQA; NeMo Llama31Config405B",
    **LLAMA3_405B_SHAPE,
    "gpu_type": "GB200 (NVL72)",
    "num_gpus": "256",
    "tp": "4",
    "pp": "16",
    "vpp": "4",
    "cp": "1",
    "ep": "n/a",
    "micro_batch_size": "1",
    "global_batch_size": "1536",
    "precision": "FP8",
}


DEEPSEEK_GB200 = {
    # row 103 (MBRIDGE-26.06.01, DeepSeek-V3 on 256 GB200, MXFP8).
    "row_id": "103",
    "source_id": "MBRIDGE-26.06.01",
    "model": "DeepSeekV3",
    "arch_notes": "MLA (q_lora 1536, kv_lora 512); first 3 layers dense (ffn 18432); "
    "1 shared expert; MTP 1 layer unless stated",
    "num_layers": "61",
    "hidden_size": "7168",
    "num_attention_heads": "128",
    "ffn_hidden_size": "18432",
    "vocab_size": "129280",
    "seq_length": "4096",
    "num_experts": "256",
    "moe_top_k": "8",
    "moe_ffn_hidden_size": "2048",
    "moe_shared_expert_ffn": "2048",
    "gpu_type": "GB200 (NVL72)",
    "num_gpus": "256",
    "tp": "1",
    "pp": "4",
    "vpp": "4",
    "cp": "1",
    "ep": "64",
    "micro_batch_size": "1",
    "global_batch_size": "4096",
    "precision": "MXFP8",
}


GPT_OSS_B300 = {
    # row 129 (MBRIDGE-26.06, GPT-OSS 120B on 64 B300, MXFP8).
    "row_id": "129",
    "source_id": "MBRIDGE-26.06",
    "model": "GPT OSS 120B",
    "arch_notes": "kv_channels 64; alternating sliding-window (128) attention; "
    "NeMo GPTOSSConfig120B",
    **GPT_OSS_120B_SHAPE,
    "gpu_type": "B300",
    "num_gpus": "64",
    "tp": "1",
    "pp": "1",
    "vpp": "n/a",
    "cp": "1",
    "ep": "8",
    "micro_batch_size": "4",
    "global_batch_size": "1280",
    "precision": "MXFP8",
}


LLAMA70_FSDP = {
    # row 160 (MBRIDGE-26.04.01, Llama 3 70B with Megatron-FSDP on 64 GB200, FP8).
    "row_id": "160",
    "source_id": "MBRIDGE-26.04.01",
    "model": "LLAMA3_70B",
    "arch_notes": "SwiGLU, GQA; NeMo Llama3Config70B",
    **LLAMA3_70B_SHAPE,
    "gpu_type": "GB200 (NVL72)",
    "num_gpus": "64",
    "tp": "1",
    "pp": "1",
    "vpp": "n/a",
    "cp": "1",
    "ep": "n/a",
    "fsdp_or_zero": "Megatron-FSDP, sharding group = GPUs/(TP*PP)=64",
    "micro_batch_size": "2",
    "global_batch_size": "256",
    "precision": "FP8",
}


LLAMA70_LORA_GB300 = {
    # row 152 (MBRIDGE-26.06, Llama 3 70B LoRA on 8 GB300, FP8).
    "row_id": "152",
    "source_id": "MBRIDGE-26.06",
    "task": "LoRA (fine-tune)",
    "model": "LLAMA3_70B",
    "arch_notes": "SwiGLU, GQA; NeMo Llama3Config70B",
    **LLAMA3_70B_SHAPE,
    "seq_length": "4096",
    "gpu_type": "GB300 (NVL72)",
    "num_gpus": "8",
    "tp": "1",
    "pp": "2",
    "vpp": "20",
    "cp": "1",
    "ep": "n/a",
    "micro_batch_size": "1",
    "global_batch_size": "32",
    "precision": "FP8",
    "tokens_per_sec_per_gpu": "7481",
}


ZERO3_SC21 = {
    # row 11 (SC21 Table 2, GPT 174.6B with ZeRO-3 on 384 A100).
    "row_id": "11",
    "source_id": "SC21-T2",
    "model": "GPT 174.6B",
    "arch_notes": "GPT-3-style; 175B = GPT-3 (96 layers, 96 heads, h 12288); 530B = Table 1 config",
    "num_layers": "96",
    "hidden_size": "12288",
    "num_attention_heads": "96",
    "vocab_size": "51200",
    "seq_length": "2048",
    "gpu_type": "A100-SXM4-80GB",
    "num_gpus": "384",
    "tp": "1",
    "pp": "1",
    "vpp": "",
    "cp": "1",
    "fsdp_or_zero": "ZeRO-3 (DeepSpeed), no TP/PP",
    "micro_batch_size": "4",
    "global_batch_size": "1536",
    "precision": "mixed (fp16 per repo scripts)",
}


MLM_README_32B = {
    # row 41 (MLM-README-2024, GPT 32B on 384 H100).
    "row_id": "41",
    "source_id": "MLM-README-2024",
    "model": "GPT 32B",
    "arch_notes": "GPT-style; 'Varied hidden size, attention heads, and layers'; ffn size / "
    "GQA / activation not stated",
    "num_layers": "48",
    "hidden_size": "7168",
    "num_attention_heads": "56",
    "vocab_size": "131072",
    "seq_length": "4096",
    "gpu_type": "H100",
    "num_gpus": "384",
    "tp": "8",
    "pp": "1",
    "global_batch_size": "192",
    "fsdp_or_zero": "distributed optimizer implied by --overlap-param-gather (not stated "
    "explicitly)",
    "source_version": "Megatron-Core r0.8.0 (per figure legend)",
    "notes": "Comm overlap on: --overlap-grad-reduce --overlap-param-gather "
    "--tp-comm-overlap, PP overlap default. MBS, VPP, recompute, SP not published.",
}


LLAMA2_LONGSEQ = {
    # row 67 (NEMO-LONGSEQ, NeMo 24.03.01, LLAMA2-7B FP8 on 4 H100, seq 4096).
    "row_id": "67",
    "source_id": "NEMO-LONGSEQ",
    "source_version": "NeMo 24.03.01.framework container",
    "trust": "B",
    "model": "LLAMA2-7B",
    "arch_notes": "SwiGLU; NeMo Llama2Config7B",
    "num_layers": "32",
    "hidden_size": "4096",
    "num_attention_heads": "32",
    "num_query_groups": "32",
    "ffn_hidden_size": "11008",
    "vocab_size": "32000",
    "seq_length": "4096",
    "gpu_type": "H100-SXM5-80GB",
    "num_gpus": "4",
    "tp": "1",
    "pp": "1",
    "cp": "1",
    "dp": "4",
    "global_batch_size": "1024",
    "precision": "FP8",
    "tflops_per_gpu": "768",
}


NANO_GB300 = {
    # row 279 (MBRIDGE-26.02.01, Nemotron 3 Nano on 8 GB300, MXFP8): no architecture columns.
    "row_id": "279",
    "source_id": "MBRIDGE-26.02.01",
    "trust": "C",
    "task": "pretrain",
    "model": "Nemotron_3_Nano",
    "seq_length": "8192",
    "gpu_type": "GB300 (NVL72)",
    "num_gpus": "8",
    "tp": "1",
    "pp": "1",
    "vpp": "n/a",
    "cp": "1",
    "ep": "8",
    "dp": "8",
    "fsdp_or_zero": "DDP + distributed optimizer (FSDP=0)",
    "micro_batch_size": "4",
    "global_batch_size": "512",
    "precision": "MXFP8",
    "tokens_per_sec_per_gpu": "37664",
}
