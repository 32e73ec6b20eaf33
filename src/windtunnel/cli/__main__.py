"""``python -m windtunnel.cli``: the same entry point as the installed ``windtunnel`` command."""

from windtunnel.cli.app import main

main()
