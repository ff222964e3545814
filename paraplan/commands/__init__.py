"""One module per subcommand. Each exposes ``NAME``, ``HELP``, ``add_arguments(parser)``
and ``run(args) -> int`` (the exit code). A command too large for one module keeps its flags
and ``run`` there and moves parts into modules named after it (``plan_results``: the search's
JSON and files; ``plan_sizing``: cluster sizing), which are no subcommands.

``COMMAND_HELP`` lists the subcommands in the order `paraplan --help` shows them, with their
one-line help. `paraplan.cli` imports a command's module only when that command runs, so
this package imports nothing: `paraplan --help` and the commands that need no torch start
without loading it.
"""

COMMAND_HELP: dict[str, str] = {
    "demo": "profile this machine, plan a small model, execute the plan and write the report",
    "models": "list the model presets with layers, hidden size, heads, experts and parameters",
    "check": "check a parallel plan against Megatron-LM's argument rules (exit 1 if invalid)",
    "profile": (
        "measure GEMMs, attention, memory bandwidth and collectives on this machine and write "
        "a hardware profile JSON (usable as --hardware)"
    ),
    "estimate": (
        "predict iteration time, tokens/s, MFU/HFU and per-stage memory of one parallel plan"
    ),
    "plan": ("search the fastest parallel plans that fit, or size the cluster for a token budget"),
    "export": "print the Megatron-LM arguments or torchtitan TOML that run a plan.json",
    "execute": (
        "train with a plan on torch.distributed and record the measured timeline and metrics"
    ),
    "report": (
        "compare a run's prediction with its measurement and write a self-contained HTML report"
    ),
    "calibrate": (
        "refit a hardware profile (GEMM, attention, memory bandwidth, op overhead, collectives) "
        "from executed runs and print the iteration-time error before and after"
    ),
}
"""Subcommand name -> one-line help, in the order `paraplan --help` lists them."""
