"""Reports: one static HTML file per training run or evaluation, readable offline.

    build_report(run_dir)                      what ``agentenv report RUN_DIR`` writes
    build_eval_report(trajs, result, out)      what ``agentenv eval --report`` writes

The page holds its charts as inline SVG, its styles and script inline, and the
episodes as JSON data: it opens from disk with no server and no network. Large runs
embed a sample of their episodes and page the rest into ``<report>_files/`` next to
it (see `agentenv.report.episodes`). A run directory that is empty, half-written or
corrupt still gives a report, with what was skipped listed at the top.

Left out: live updates while a run trains (rebuild the report), and anything served.
"""

from agentenv.report.build import Report, build_eval_report, build_report

__all__ = ["Report", "build_eval_report", "build_report"]
