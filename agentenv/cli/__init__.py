"""The ``agentenv`` command line (`app.py`), with the tables of ``eval`` (`eval.py`) and
``forecast`` (`forecast.py`). The application: the one place that wires every package."""

from agentenv.cli.app import EvalSummary, app, main

__all__ = ["EvalSummary", "app", "main"]
