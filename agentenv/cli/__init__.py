"""The ``agentenv`` command line: `app.py` builds it from one module per command group
(`play`, `eval`, `train`, `report`, `forecast`, `export`, `miner`) over `common.py`. The
application: the one place that wires every layer together."""

from agentenv.cli.app import app, main
from agentenv.cli.eval import EvalSummary

__all__ = ["EvalSummary", "app", "main"]
