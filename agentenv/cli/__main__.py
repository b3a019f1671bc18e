"""``python -m agentenv.cli``: the ``agentenv`` command (torchrun runs it so: ``-m agentenv.cli train``)."""

from agentenv.cli.app import main

main()
