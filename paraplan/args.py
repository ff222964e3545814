"""Argument groups shared by several subcommands, and their conversion into specs.

Flag names follow DESIGN.md's command line; each help text states units and defaults.
Conversions only parse and build specs: validation is the specs' own (`SpecError`) and the
plan rules' (`specs.rules.check_plan`).

This module holds the model, cluster and job flags (`add_problem_args`) and their specs. The
parallel plan flags and `plan_from_args` are in `paraplan.plan_args`; the runtime and recipe
flags and `options_from_args` (`ExecutionOptions`) in `paraplan.recipe_args`. Narrower groups
that these add live in `paraplan.lora_args`, `fp8_args`, `optimizer_args`, `time_args` and
`vpp_args`.
"""

from __future__ import annotations

import argparse

from paraplan.flags import spellings
from paraplan.lora_args import add_lora_args, lora_from_args
from profiles.store import stored_profile_names
from specs import ClusterSpec, ModelSpec, TrainingJob
from specs.loading import load_model

DEFAULT_HARDWARE = "h100-sxm-80gb"


def add_problem_args(
    parser: argparse.ArgumentParser,
    *,
    hardware_required: bool = False,
    num_gpus_required: bool = True,
) -> None:
    """--model, --hardware, --num-gpus, --gpus-per-node, --nvlink-segment-nodes, --seq-len,
    --global-batch, --precision, --optimizer, the LoRA flags (`paraplan.lora_args`).

    ``num_gpus_required=False`` serves the cluster-sizing form of `paraplan plan`, which
    searches over GPU counts itself.
    """
    g = parser.add_argument_group("model, cluster and job")
    g.add_argument(
        "--model",
        required=True,
        help="preset name (see `paraplan models`), or a path to a Hugging Face config.json "
        "or a paraplan ModelSpec JSON",
    )
    g.add_argument(
        "--hardware",
        required=hardware_required,
        default=None if hardware_required else DEFAULT_HARDWARE,
        help=f"stored hardware profile name ({', '.join(stored_profile_names())}) or a path "
        "to a profile JSON" + ("" if hardware_required else f" (default: {DEFAULT_HARDWARE})"),
    )
    g.add_argument(
        "--num-gpus",
        type=int,
        required=num_gpus_required,
        default=None,
        help="world size (GPUs or processes)",
    )
    g.add_argument(
        "--gpus-per-node", type=int, default=None, help="GPUs per node (default: the profile's)"
    )
    g.add_argument(
        "--nvlink-segment-nodes",
        type=int,
        default=None,
        metavar="N",
        help="NVL72 profiles: servers per NVLink segment (SLURM --segment), each segment in "
        "one rack; a divisor of the node count, or the trays of a whole rack (18 on "
        "GB200/GB300: no segment, racks filled in order). Default: Megatron-Bridge's "
        "launcher, all nodes up to 18, else the largest divisor <= 18",
    )
    g.add_argument(*spellings("--seq-len"), type=int, required=True, help="tokens per sequence")
    g.add_argument(
        *spellings("--global-batch"),
        type=int,
        required=True,
        help="sequences per iteration (whole job)",
    )
    g.add_argument(
        "--precision",
        choices=("bf16", "fp8", "nvfp4", "fp32"),
        default="bf16",
        help="default: bf16; nvfp4: NVFP4 GEMMs (Blackwell profiles, megatron runtime)",
    )
    g.add_argument(
        "--optimizer",
        choices=("adam", "muon", "dist_muon"),
        default="adam",
        help="Megatron-LM --optimizer: adam, muon (Muon on 2-D weights, Adam on the rest) or "
        "dist_muon (the same sharded layer-wise over dp*cp; excludes --dist-opt); default: adam",
    )
    g.add_argument(
        "--packed-doc-len",
        type=int,
        default=None,
        metavar="TOKENS",
        help="sequence packing (THD, fine-tuning with packed_sequence_specs): document length "
        "in tokens inside a packed sequence, sum(L_i^2)/sum(L_i) (k documents of L tokens: L); "
        "attention runs causally per document. Default: unpacked",
    )
    add_lora_args(g)


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    """The ModelSpec named by --model."""
    return load_model(args.model)


def cluster_from_args(args: argparse.Namespace) -> ClusterSpec:
    """The ClusterSpec of --hardware, --num-gpus, --gpus-per-node and
    --nvlink-segment-nodes."""
    return ClusterSpec(
        hardware=args.hardware,
        num_gpus=args.num_gpus,
        gpus_per_node=args.gpus_per_node,
        nvlink_segment_nodes=getattr(args, "nvlink_segment_nodes", None),
    )


def job_from_args(args: argparse.Namespace) -> TrainingJob:
    """The TrainingJob of --seq-len, --global-batch, --precision, --optimizer,
    --packed-doc-len and the LoRA flags (`paraplan.lora_args.lora_from_args`)."""
    return TrainingJob(
        seq_length=args.seq_len,
        global_batch_size=args.global_batch,
        precision=args.precision,
        optimizer=getattr(args, "optimizer", "adam"),
        lora=lora_from_args(args),
        packed_document_tokens=getattr(args, "packed_doc_len", None),
    )
