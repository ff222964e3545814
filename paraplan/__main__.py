"""`python -m paraplan` runs the command line."""

from paraplan.cli import main

raise SystemExit(main())
