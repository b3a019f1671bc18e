"""Evaluation: pass@k, pass^k and mean@k with bootstrap intervals, paired comparisons
(`agentenv.eval.evaluation`), and ScaleRL's sigmoid fit of reward against compute
(`agentenv.eval.forecast`). Services built on the core: nothing in the core imports them.
"""

from agentenv.eval.evaluation import Comparison, Estimate, EvalResult, TaskOutcome, compare, evaluate, score

__all__ = ["Comparison", "Estimate", "EvalResult", "TaskOutcome", "compare", "evaluate", "score"]
