"""One module per subcommand. Each exposes ``NAME``, ``HELP``, ``add_arguments(parser)``
and ``run(args) -> int`` (the exit code); `paraplan.cli` registers them in ``COMMANDS``."""
