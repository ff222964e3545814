"""NeMo 2.0's H100 pre-train configurations, priced as their performance-table rows would be.

Every ``pre_train`` row of ``scripts/llm/performance/recommended_model_configs/
model_configs_h100.csv`` (NVIDIA/NeMo v2.2.0) and ``scripts/performance/
recommended_model_configs/model_configs_h100.csv`` (v2.3.0, v2.4.0, v2.5.0rc0), one per NeMo
container (`nemo_keys.RELEASE_TAGS`), is built as the CSV row a performance table would
print (the columns of ``published-runs-dev.csv``: model, ``gpu_type`` H100-SXM5-80GB, GPUs,
precision, batch, sequence, tp pp cp vpp ep etp, ``fsdp_or_zero``, ``recompute``;
``source_id`` NEMO-PERF-YY.MM, ``source_version`` "NeMo YY.MM container", trust B) and priced
through the path of a dev-set row (`published_rows.case_for_row`, then `estimate_plan`:
`row_figures.row_estimate`), with the recipe rules of `bench/nemo_options.py` and
`bench/nemo_recipes.py`. No published figure is read: the report gives predicted peak
memory (with the peak stage's parts in ``--json``), whether it fits the 80 GB device, the
predicted iteration time, model TFLOP/s per GPU and MFU (`costmodel.estimate.Estimate.mfu`:
model FLOP/s per GPU over the dense peak of the GEMM dtype, fp8 for FP8 rows), the options
the rules applied, and the peak of the same row priced without them (`without_rules`).

Each model's architecture columns come from a dev-set row of the same model (`ARCH_ROWS`;
Mixtral 8x22B from the ``mixtral-8x22b`` preset over the Mixtral 8x7B row). The hybrid
Mamba-2 models (Nemotron-H 8B, 47B, 56B: ``nemotronh`` rows of v2.4.0 and v2.5.0rc0) state
no architecture column: their rows take the preset their name selects
(`hybrid_recipes.hybrid_preset`, `HYBRID_MODELS`), which would refuse a contradicting
column. Configurations of models that no preset expresses are listed with the reason
(`NO_PRESET`).

Usage: ``python bench/nemo_h100_recipes.py [--json]``
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
from dataclasses import dataclass

from nemo_keys import RELEASE_TAGS
from published_csv import rows_by_ids
from published_rows import NotExpressible, RowCase
from row_figures import row_estimate
from row_model import ARCHITECTURE_COLUMNS

from costmodel.estimate import Estimate, stage_memory_parts_gib
from costmodel.execution_presets import DEFAULT_OPTIONS
from specs.errors import SpecError
from specs.formats import percent

ALL = tuple(RELEASE_TAGS)
FROM_25_04 = ("25.04", "25.07", "25.09")
FROM_25_07 = ("25.07", "25.09")


@dataclass(frozen=True, kw_only=True, slots=True)
class NemoConfig:
    """One ``pre_train`` row of ``model_configs_h100.csv`` and the containers that ship it."""

    model: str
    """Model as a performance table names it (family prefix of `nemo_keys.model_family`)."""
    precision: str
    """``BF16`` or ``FP8`` (the CSV's ``dtype``; FP8 runs the scripts' default ``ds``)."""
    gpus: int
    seq: int
    tp: int
    pp: int
    cp: int
    vpp: int
    mbs: int
    gbs: int
    ep: int = 1
    etp: int | None = None
    fsdp: bool = False
    """``use_mcore_fsdp`` 1."""
    recompute: str = ""
    """``recompute_modules`` as a table would print them, "selective (a, b)"; "" none."""
    releases: tuple[str, ...] = ALL


CONFIGS_CSV = """\
releases,model,dtype,gpus,seq,tp,pp,cp,ep,vp,mbs,gbs,etp,fsdp,recompute_modules
all,GPT3 175B,fp8,512,2048,4,8,1,1,6,2,2048,,0,
all,GPT3 175B,fp8,128,2048,4,8,1,1,6,1,256,,0,
all,GPT3 175B,bf16,128,2048,4,8,1,1,6,1,256,,0,
25.02,Llama3.1 405B,fp8,576,8192,8,9,2,1,7,1,252,,0,
25.02,Llama3.1 405B,bf16,576,8192,8,9,2,1,7,1,252,,0,
25.04+,Llama3.1 405B,fp8,1024,8192,8,8,2,1,8,1,512,,0,
25.04+,Llama3.1 405B,bf16,1024,8192,8,8,2,1,8,1,512,,0,
all,Llama3 70B,fp8,64,8192,4,8,1,1,5,1,128,,0,
all,Llama3 70B,bf16,64,8192,4,4,2,1,5,1,128,,0,
25.02/25.04,Llama3 8B,fp8,8,8192,1,1,2,1,1,1,128,,0,
25.07+,Llama3 8B,fp8,8,8192,1,1,1,1,1,1,128,,1,
all,Llama3 8B,bf16,8,8192,1,1,2,1,1,1,128,,0,
all,Mixtral 8x7B,fp8,64,4096,1,4,1,8,8,1,256,,0,
all,Mixtral 8x7B,bf16,64,4096,1,4,1,8,8,1,256,,0,
all,Mixtral 8x22B,bf16,256,65536,4,4,8,8,14,1,256,1,0,
all,Mixtral 8x22B,fp8,256,65536,4,4,8,8,14,1,256,1,0,
25.02,Nemotron4 15B,bf16,64,4096,4,1,1,1,1,4,256,,0,
25.02,Nemotron4 15B,fp8,64,4096,4,1,1,1,1,4,256,,0,
25.04+,Nemotron4 15B,bf16,64,4096,2,1,1,1,1,2,256,,0,
25.04+,Nemotron4 15B,fp8,64,4096,2,1,1,1,1,2,256,,0,
25.02,Nemotron4 340B,bf16,128,4096,8,8,2,1,12,1,32,,0,
25.02,Nemotron4 340B,fp8,128,4096,8,8,1,1,12,1,32,,0,
25.04+,Nemotron4 340B,bf16,256,4096,8,8,1,1,12,1,64,,0,
25.04+,Nemotron4 340B,fp8,256,4096,8,8,1,1,12,1,64,,0,
25.04,DeepSeek V3,bf16,1024,4096,2,16,1,64,1,1,8192,1,0,mla_up_proj
25.07,DeepSeek V3,bf16,1024,4096,2,16,1,64,1,1,8192,1,0,mla_up_proj/mlp
25.07,DeepSeek V3,fp8,1024,4096,2,16,1,64,1,1,8192,1,0,mla_up_proj/mlp
25.09,DeepSeek V3,bf16,1024,4096,2,16,1,64,1,1,8192,1,0,mla_up_proj/mlp/moe
25.09,DeepSeek V3,fp8,1024,4096,2,16,1,64,1,1,8192,1,0,mla_up_proj/mlp/moe
25.07+,Qwen3 30B-A3B,bf16,16,4096,1,2,1,8,24,1,512,1,0,
25.07+,Qwen3 235B-A22B,bf16,256,4096,2,8,1,32,4,1,2048,1,0,
25.07+,Nemotron-H 8B,fp8,8,8192,1,1,1,1,1,1,128,,0,
25.07+,Nemotron-H 47B,fp8,64,8192,8,1,1,1,1,1,192,,0,
25.07+,Nemotron-H 56B,fp8,64,8192,8,1,1,1,1,1,192,,0,
25.07+,Nemotron-H 56B,fp8,256,8192,8,1,1,1,1,1,768,,0,
"""
"""The expressible ``pre_train`` rows of the four tags' ``model_configs_h100.csv``, in its
columns (``dp_size`` of v2.2.0 is implied by the GPUs; ``fsdp`` is ``use_mcore_fsdp``; every
``recompute_layers`` and ``activation_offload_layers`` of these rows is 0, and every
``cuda_graphs`` 0 but the ``nemotronh`` rows' 1, which `nemo_options.CUDA_GRAPH_FAMILIES`
applies by family), with the containers that ship each (``all``, ``YY.MM+`` from that one
on, or a ``/``-separated list). The ``nemotronh`` rows (``8b``, ``47b``, ``56b`` twice) are
in v2.4.0 and v2.5.0rc0 alike; v2.2.0 and v2.3.0 have none. The Llama 3 8B FP8 row of v2.4.0
on also sets ``use_user_buffer_registration`` and ``use_sharp`` (NCCL user buffers, SHARP),
which the cost model does not price."""


def _releases(text: str) -> tuple[str, ...]:
    if text == "all":
        return ALL
    if text.endswith("+"):
        return tuple(r for r in ALL if r >= text[:-1])
    return tuple(text.split("/"))


def parse_configs(text: str) -> tuple[NemoConfig, ...]:
    """`NemoConfig` rows of a `CONFIGS_CSV`-shaped text."""
    configs = []
    for row in csv.DictReader(io.StringIO(text)):
        modules = row["recompute_modules"]
        configs.append(
            NemoConfig(
                model=row["model"],
                precision=row["dtype"].upper(),
                **{k: int(row[c]) for k, c in INT_COLUMNS.items()},
                etp=int(row["etp"]) if row["etp"] else None,
                fsdp=row["fsdp"] == "1",
                recompute=f"selective ({modules.replace('/', ', ')})" if modules else "",
                releases=_releases(row["releases"]),
            )
        )
    return tuple(configs)


INT_COLUMNS = {
    "gpus": "gpus",
    "seq": "seq",
    "tp": "tp",
    "pp": "pp",
    "cp": "cp",
    "ep": "ep",
    "vpp": "vp",
    "mbs": "mbs",
    "gbs": "gbs",
}
"""`NemoConfig` field -> `CONFIGS_CSV` column of the integer fields."""

CONFIGS = parse_configs(CONFIGS_CSV)

NO_PRESET: tuple[tuple[str, str, str], ...] = (
    ("nemotron3 8b / 22b", "25.02-25.09", "no preset (Nemotron-3 GPT models)"),
    ("llama4 e16 / e128", "25.04-25.09", "no preset (Llama 4 MoE with chunked attention)"),
    ("vlm_llama4, neva_llama3", "25.04-25.09", "vision-language models"),
    ("flux 12b", "25.04-25.09", "diffusion model"),
)
"""(configs, containers, reason) of the H100 ``pre_train`` rows not priced."""

ARCH_ROWS = {
    "GPT3 175B": "11",
    "Llama3.1 405B": "116",
    "Llama3 70B": "147",
    "Llama3 8B": "317",
    "Mixtral 8x7B": "394",
    "Mixtral 8x22B": "394",
    "Nemotron4 15B": "424",
    "Nemotron4 340B": "421",
    "DeepSeek V3": "102",
    "Qwen3 30B-A3B": "106",
    "Qwen3 235B-A22B": "108",
}
"""Model -> dev-set row whose architecture columns it takes (`ARCHITECTURE_COLUMNS`)."""

HYBRID_MODELS = ("Nemotron-H 8B", "Nemotron-H 47B", "Nemotron-H 56B")
"""Models whose rows state no architecture column and take their hybrid preset
(`hybrid_recipes.hybrid_preset`: ``nemotron-h-8b``, ``-47b``, ``-56b``; the presets' shape is
NeMo's ``NemotronHConfig8B`` / ``47B`` / ``56B`` of ``gpt/model/ssm.py``, 131072-token
vocabulary)."""

MIXTRAL_8X22B = {
    "num_layers": "56",
    "hidden_size": "6144",
    "num_attention_heads": "48",
    "ffn_hidden_size": "16384",
    "moe_ffn_hidden_size": "16384",
}
"""The ``mixtral-8x22b`` preset's shape over the Mixtral 8x7B row (same 8 experts, top 2,
8 KV groups, 32000 vocabulary)."""


def arch_columns(model: str) -> dict[str, str]:
    """The architecture columns of ``model`` (`ARCH_ROWS`); all empty for `HYBRID_MODELS`,
    whose preset gives the shape."""
    if model in HYBRID_MODELS:
        return dict.fromkeys(ARCHITECTURE_COLUMNS, "")
    rows, error = rows_by_ids(ARCH_ROWS[model])
    if error is not None:
        raise SystemExit(error)
    columns = {k: rows[0][k] for k in ARCHITECTURE_COLUMNS}
    if model == "Mixtral 8x22B":
        columns |= MIXTRAL_8X22B
    return columns


def table_row(config: NemoConfig, release: str) -> dict[str, str]:
    """``config`` as the performance table of NeMo ``release`` would print it."""
    dp = config.gpus // (config.tp * config.pp * config.cp)
    return arch_columns(config.model) | {
        "row_id": f"nemo-{release}-{config.model}-{config.precision}-{config.gpus}",
        "source_id": f"NEMO-PERF-{release}",
        "source_version": f"NeMo {release} container",
        "trust": "B",
        "task": "pretrain",
        "model": config.model,
        "seq_length": str(config.seq),
        "gpu_type": "H100-SXM5-80GB",
        "num_gpus": str(config.gpus),
        "tp": str(config.tp),
        "pp": str(config.pp),
        "vpp": str(config.vpp) if config.vpp > 1 else "",
        "cp": str(config.cp),
        "ep": str(config.ep) if config.ep > 1 else "",
        "etp": "" if config.etp is None else str(config.etp),
        "dp": str(dp),
        "fsdp_or_zero": "Megatron-FSDP" if config.fsdp else "distributed optimizer (FSDP=0)",
        "micro_batch_size": str(config.mbs),
        "global_batch_size": str(config.gbs),
        "recompute": config.recompute,
        "sequence_parallel": "",
        "precision": config.precision,
        "notes": "",
    }


def applied_options(case: RowCase) -> dict[str, object]:
    """The `ExecutionOptions` fields that differ from Megatron-LM's defaults, and the plan's
    recipe fields, of a priced row."""
    options = {
        f.name: getattr(case.options, f.name)
        for f in dataclasses.fields(case.options)
        if getattr(case.options, f.name) != getattr(DEFAULT_OPTIONS, f.name)
    }
    plan = case.plan
    recipe = {
        "tp_comm_overlap": plan.tp_comm_overlap,
        "use_megatron_fsdp": plan.use_megatron_fsdp,
        "recompute": plan.recompute,
        "recompute_modules": plan.recompute_modules,
        "pipeline_model_parallel_layout": plan.pipeline_model_parallel_layout,
        "decoder_first_pipeline_num_layers": plan.decoder_first_pipeline_num_layers,
        "decoder_last_pipeline_num_layers": plan.decoder_last_pipeline_num_layers,
        "moe_capacity_factor": case.model.moe_capacity_factor,
    }
    applied = {k: v for k, v in recipe.items() if v not in (None, False, "none")}
    return {k: sorted(v) if isinstance(v, frozenset) else v for k, v in options.items()} | applied


UNSTATED_VERSION = "not stated"
"""The ``source_version`` of the comparison pricing (`without_rules`): no NeMo release, so
none of the NeMo rules (`nemo_options`, `nemo_recipes`) apply (Megatron-LM's defaults, the
distributed optimizer of NEMO- sources)."""


def without_rules(raw: dict[str, str]) -> dict[str, object]:
    """Peak GiB and fit of the row priced without the NeMo 2.0 rules (`UNSTATED_VERSION`),
    or why it cannot be priced so: what the rules change in memory."""
    try:
        _, est = row_estimate(raw | {"source_version": UNSTATED_VERSION})
    except (NotExpressible, SpecError) as err:
        return {"error": str(err).splitlines()[-1].strip(" -")}
    return {"peak_gib": round(est.peak_memory_gib, 2), "fits": est.fits}


def peak_parts_gib(est: Estimate) -> dict[str, float]:
    """The memory parts of the stage with the largest total
    (`costmodel.estimate.stage_memory_parts_gib`), GiB to 3 decimals."""
    peak = max(est.memory, key=lambda stage: stage.total_bytes)
    return {k: round(v, 3) for k, v in stage_memory_parts_gib(peak).items()}


def price(config: NemoConfig, release: str) -> dict[str, object]:
    """One configuration of one release: plan, peak GiB, fits, the peak stage's memory parts
    (`peak_parts_gib`), seconds, MFU, options, and
    the same row without the NeMo rules (`without_rules`); or the reason it cannot be
    priced."""
    raw = table_row(config, release)
    head = {"release": release, "model": config.model, "precision": config.precision}
    head |= {"gpus": config.gpus, "seq": config.seq}
    try:
        case, est = row_estimate(raw)
    except (NotExpressible, SpecError) as err:
        return head | {"error": str(err)}
    return head | {
        "plan": case.plan.label(),
        "peak_gib": round(est.peak_memory_gib, 2),
        "fits": est.fits,
        "peak_parts_gib": peak_parts_gib(est),
        "iteration_s": round(est.iteration_time_s, 4),
        "model_tflops_per_gpu": round(est.model_tflops_per_gpu, 1),
        "mfu": round(est.mfu, 4),
        "options": applied_options(case),
        "without_rules": without_rules(raw),
    }


def nemo_h100_report() -> dict[str, object]:
    """Every configuration of every release (`CONFIGS`), and the unpriced ones (`NO_PRESET`)."""
    priced = [price(c, r) for r in RELEASE_TAGS for c in CONFIGS if r in c.releases]
    return {
        "configs": priced,
        "not_fitting": [p for p in priced if p.get("fits") is False],
        "not_priced": [{"configs": c, "releases": r, "reason": why} for c, r, why in NO_PRESET],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    report = nemo_h100_report()
    if args.json:
        print(json.dumps({"nemo_h100": report}, indent=1, default=str))
        return 0
    for p in report["configs"]:
        name = f"{p['release']} {p['model']:<16} {p['precision']:<4} {p['gpus']:>5}"
        if "error" in p:
            print(f"{name}  not priced: {p['error']}")
            continue
        fits = "fits" if p["fits"] else "DOES NOT FIT"
        bare = p["without_rules"]
        if "error" in bare:
            bare_text = "not priced"
        else:
            bare_text = f"{bare['peak_gib']:.1f} GiB" + ("" if bare["fits"] else " (no fit)")
        rate = percent(p["mfu"])
        print(
            f"{name}  {p['plan']:<44} peak {p['peak_gib']:6.1f} GiB {fits:<12} "
            f"{p['iteration_s']:8.3f} s  MFU {rate:>6}  without rules: {bare_text}"
        )
    for n in report["not_priced"]:
        print(f"not priced: {n['configs']} ({n['releases']}): {n['reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
