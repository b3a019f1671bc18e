"""``python -m agentenv``: the ``agentenv`` command, where the console script is not on PATH."""

from agentenv.cli.app import main

main()
