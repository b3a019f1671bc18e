"""Experiment trackers: TensorBoard, Weights & Biases, MLflow and Trackio, each through its
own library, behind one small protocol (`Tracker`) and the fan-out the trainer's
`metrics.MetricsLogger` writes every step through (`Trackers`).

What a tracker gets (``GRPOConfig.report_to`` names them):

- every numeric figure of each step's record, as metrics.jsonl holds it, at that step;
- the run's config: a text summary in TensorBoard, the run config in W&B and Trackio,
  params in MLflow (nested fields flattened as ``env_kwargs.<id>.<key>``);
- when the run completes, its report (the page ``agentenv report`` writes, built once
  into output_dir/report.html, with its sidecar folder when it has one), where the
  tracker takes files: a W&B artifact of type "report"; MLflow run artifacts (its UI
  shows the page); a Trackio artifact (kept in its store, TRACKIO_DIR, or its Space).
  TensorBoard takes no files.

Settings come from each library's own environment variables (WANDB_MODE, WANDB_PROJECT,
WANDB_NAME, WANDB_DIR, MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, TRACKIO_DIR,
TRACKIO_SPACE_ID, ...). Where one is unset: the project (W&B, Trackio) and the MLflow
experiment are "agentenv", the run is named after output_dir, W&B keeps its files in
output_dir/wandb and TensorBoard's in output_dir/tensorboard; MLflow's store is its own
default. A resumed run continues the tracker runs it started (their ids are kept in
output_dir/trackers.json): the same W&B run (``id`` + ``resume="allow"``), the same MLflow
run, the latest Trackio run of its name; TensorBoard writes a new event file next to
the first. The steps a resumed run redoes (those after its checkpoint) are logged again,
and every tracker keeps both values. The warm start's rows (`MetricsLogger.log_sft`) go
against their own axis, ``sft_step``: in W&B through ``define_metric``; the others plot
each figure at the step number it comes with.

A tracker that cannot start its run (W&B online with no login, an MLflow store it cannot
use, a Trackio Space without a Hugging Face login) stops the run before anything is
trained: a `TrackerError` line naming the fix (`agentenv train` prints it and exits 2).

Left out: media and per-episode tables (the report holds the episodes), and retrying a
tracker that fails mid-run: its error stops the run like any other (it resumes from its
last checkpoint).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_TRACKERS",
    "IDS_FILE",
    "PROJECT",
    "KeepsFiles",
    "TrackedRun",
    "Tracker",
    "TrackerError",
    "TrackerName",
    "Trackers",
    "missing_libraries",
]

TrackerName = Literal["tensorboard", "wandb", "mlflow", "trackio"]
DEFAULT_TRACKERS: list[TrackerName] = ["tensorboard"]
"""``GRPOConfig.report_to``'s default: TensorBoard when it is installed, and nothing
otherwise (what the trainer did before report_to). Any other list needs its libraries."""

PROJECT = "agentenv"
"""The W&B and Trackio project, and the MLflow experiment, where their variables name none."""
IDS_FILE = "trackers.json"
"""In output_dir: the id of each tracker run, which a resumed run continues."""

_LIBRARY: dict[TrackerName, tuple[str, str]] = {  # the module to import, the package that ships it
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow-skinny"),
    "trackio": ("trackio", "trackio"),
}


def missing_libraries(names: Sequence[TrackerName]) -> list[str]:
    """One line for each tracker in ``names`` whose library is not installed, saying what
    to install; none for `DEFAULT_TRACKERS`, which uses TensorBoard only when installed."""
    if list(names) == DEFAULT_TRACKERS:
        return []
    return [
        f"report_to names {name!r}, whose library is not installed: "
        f"pip install 'agentenv[trackers]' (or pip install {_LIBRARY[name][1]})"
        for name in names
        if importlib.util.find_spec(_LIBRARY[name][0]) is None
    ]


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker run is opened with: the run directory, its config (``to_dict()``),
    the step a resumed run continues from (None: a new run), and the tracker run ids a
    resumed run left in `IDS_FILE`."""

    run_dir: Path
    config: Mapping[str, Any]
    resume_step: int | None = None
    ids: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The run's name in the trackers: output_dir's last part."""
        return self.run_dir.resolve().name

    def resumed_id(self, tracker: str) -> str | None:
        """The id of ``tracker``'s run to continue: only when resuming, and only if it left one."""
        return self.ids.get(tracker) if self.resume_step is not None else None


class Tracker(Protocol):
    """One tracker's run, opened by its constructor (from a `TrackedRun`, config logged)."""

    @property
    def run_id(self) -> str | None:
        """What a resumed run needs to continue this run (kept in `IDS_FILE`); None: nothing."""

    def log(self, step: int, metrics: Mapping[str, float], axis: str) -> None:
        """Record ``metrics`` at ``step`` of ``axis`` (the x axis: "step", or the warm
        start's "sft_step")."""

    def close(self, *, failed: bool) -> None:
        """End the run; ``failed``: it stopped before its last step."""


@runtime_checkable
class KeepsFiles(Tracker, Protocol):
    """A tracker that keeps files with its run (W&B, MLflow, Trackio; not TensorBoard)."""

    def upload(self, page: Path, sidecar: Path | None) -> None:
        """Keep the report's page and its sidecar folder (when it has one) with the run."""


class TensorBoardTracker:
    """Event files in output_dir/tensorboard, through PyTorch's `SummaryWriter` (which
    writes with the tensorboard package). The config is a text summary at step 0."""

    run_id: str | None = None

    def __init__(self, run: TrackedRun) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # No purge_step on resume: it would hide every tag's events past the checkpoint's
        # step, the warm start's rows (logged at their sft_step) among them.
        self._writer = SummaryWriter(str(run.run_dir / "tensorboard"))
        if run.resume_step is None:
            text = json.dumps(dict(run.config), indent=1)
            self._writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)  # indented: markdown code

    def log(self, step: int, metrics: Mapping[str, float], axis: str) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def close(self, *, failed: bool) -> None:
        self._writer.close()


class WandbTracker:
    """A W&B run (online, or offline with WANDB_MODE=offline: ``wandb sync`` uploads it).
    Its own run, whatever global run the process has (``reinit="create_new"``)."""

    def __init__(self, run: TrackedRun) -> None:
        import wandb

        resumed = run.resumed_id("wandb")
        self._run = wandb.init(
            project=_unless_set("WANDB_PROJECT", PROJECT),
            name=_unless_set("WANDB_NAME", run.name),
            dir=_unless_set("WANDB_DIR", str(run.run_dir)),
            config=dict(run.config),
            id=resumed,
            resume="allow" if resumed else None,
            reinit="create_new",
        )
        self.run_id: str | None = self._run.id
        self._axis_of: dict[str, str] = {}

    def log(self, step: int, metrics: Mapping[str, float], axis: str) -> None:
        # Each figure is plotted against its axis, logged with it, not against W&B's own
        # ``_step``: that one must only grow, so the steps after the warm start's rows, and
        # those a resumed run redoes, would be dropped.
        for key in metrics:
            if key not in self._axis_of:
                if axis not in self._axis_of.values():
                    self._run.define_metric(axis)
                self._run.define_metric(key, step_metric=axis)
                self._axis_of[key] = axis
        self._run.log({axis: step, **metrics})

    def upload(self, page: Path, sidecar: Path | None) -> None:
        import wandb

        artifact = wandb.Artifact(f"report-{self._run.id}", type="report", description="agentenv report of the run")
        artifact.add_file(str(page))
        if sidecar is not None:
            artifact.add_dir(str(sidecar), name=sidecar.name)
        self._run.log_artifact(artifact)

    def close(self, *, failed: bool) -> None:
        self._run.finish(exit_code=1 if failed else 0)


class MLflowTracker:
    """An MLflow run through `MlflowClient` (not the global active run): the tracking store
    of MLFLOW_TRACKING_URI (MLflow's default otherwise), in the experiment
    MLFLOW_EXPERIMENT_NAME or "agentenv"."""

    def __init__(self, run: TrackedRun) -> None:
        import mlflow
        from mlflow.environment_variables import MLFLOW_EXPERIMENT_NAME
        from mlflow.exceptions import MlflowException

        try:
            self._client = mlflow.MlflowClient()
            experiment = MLFLOW_EXPERIMENT_NAME.get() or PROJECT
            found = self._client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
        except MlflowException as e:
            raise TrackerError(
                f"MLflow cannot use the tracking store {mlflow.get_tracking_uri()!r}: {_first_line(e)} "
                "Set MLFLOW_TRACKING_URI to a tracking server (http://HOST:5000), or to a local folder "
                "(file:./mlruns, with MLFLOW_ALLOW_FILE_STORE=true); MLflow's default, sqlite:///mlflow.db, "
                "needs the full mlflow package"
            ) from e
        self.run_id: str = (
            self._continued(run.resumed_id("mlflow"))
            or self._client.create_run(experiment_id, run_name=run.name).info.run_id
        )
        self._log_params(run.config)

    def _continued(self, run_id: str | None) -> str | None:
        """``run_id``, running again, when this store holds it; None for a new run."""
        from mlflow.exceptions import MlflowException

        if run_id is None:
            return None
        try:
            self._client.update_run(run_id, status="RUNNING")
        except MlflowException:  # not in this store (MLFLOW_TRACKING_URI changed): a new run
            return None
        return run_id

    def _log_params(self, config: Mapping[str, Any]) -> None:
        """The config as params; a continued run keeps those it has (MLflow never changes one)."""
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        logged = self._client.get_run(self.run_id).data.params
        params = [Param(key, value[:MAX_PARAM_VAL_LENGTH]) for key, value in _flat(config) if key not in logged]
        for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
            self._client.log_batch(self.run_id, params=params[start : start + MAX_PARAMS_TAGS_PER_BATCH])

    def log(self, step: int, metrics: Mapping[str, float], axis: str) -> None:
        from mlflow.entities import Metric
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        now_ms = int(time.time() * 1000)
        rows = [Metric(key, value, now_ms, step) for key, value in metrics.items()]
        for start in range(0, len(rows), MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=rows[start : start + MAX_METRICS_PER_BATCH])

    def upload(self, page: Path, sidecar: Path | None) -> None:
        self._client.log_artifact(self.run_id, str(page))
        if sidecar is not None:
            self._client.log_artifacts(self.run_id, str(sidecar), artifact_path=sidecar.name)

    def close(self, *, failed: bool) -> None:
        self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class TrackioTracker:
    """A Trackio run: in its local SQLite store (TRACKIO_DIR, by default under HF_HOME; see
    it with ``trackio show``), or in the Space or server TRACKIO_SPACE_ID or
    TRACKIO_SERVER_URL names. No dashboard is started (``embed=False``)."""

    run_id: str | None = None  # Trackio continues the latest run of the run's name

    def __init__(self, run: TrackedRun) -> None:
        import trackio

        self._run = trackio.init(
            project=PROJECT,
            name=run.name,
            config=dict(run.config),
            resume="allow" if run.resume_step is not None else "never",
            embed=False,
        )

    def log(self, step: int, metrics: Mapping[str, float], axis: str) -> None:
        self._run.log(dict(metrics), step=step)

    def upload(self, page: Path, sidecar: Path | None) -> None:
        import trackio

        artifact = trackio.Artifact(f"report-{self._run.id}", type="report")
        artifact.add_file(page)
        if sidecar is not None:
            artifact.add_dir(sidecar, name=sidecar.name)
        self._run.log_artifact(artifact)

    def close(self, *, failed: bool) -> None:
        self._run.finish()  # Trackio records no outcome


_OPEN: dict[TrackerName, Callable[[TrackedRun], Tracker]] = {
    "tensorboard": TensorBoardTracker,
    "wandb": WandbTracker,
    "mlflow": MLflowTracker,
    "trackio": TrackioTracker,
}


class TrackerError(ValueError):
    """A tracker's library could not start its run (no login, an unreachable server, a
    store it cannot use): one line, with what to do."""


_FIXES: dict[TrackerName, str] = {
    "tensorboard": "check that output_dir/tensorboard is writable",
    "wandb": "log in (`wandb login`, or WANDB_API_KEY), or set WANDB_MODE=offline to keep the run on disk "
    "(`wandb sync` uploads it later)",
    "mlflow": "check MLFLOW_TRACKING_URI (a server that answers, or file:./mlruns with MLFLOW_ALLOW_FILE_STORE=true)",
    "trackio": "check TRACKIO_SPACE_ID / TRACKIO_SERVER_URL and your Hugging Face login, or unset them to keep "
    "the run local (TRACKIO_DIR)",
}


def _open(name: TrackerName, run: TrackedRun) -> Tracker:
    """The tracker ``name`` of ``run``; whatever its library raises while starting is a
    `TrackerError` naming the tracker and the fix (or dropping it from report_to)."""
    try:
        return _OPEN[name](run)
    except TrackerError:
        raise
    except Exception as e:
        raise TrackerError(
            f"report_to {name!r}: {name} cannot start the run ({type(e).__name__}: {_first_line(e)}); "
            f"{_FIXES[name]}, or leave {name!r} out of report_to"
        ) from e


class Trackers:
    """The trackers of a run: each step's record goes to every one, and `close` ends them
    all, the report first when the run completed."""

    def __init__(self, trackers: Sequence[Tracker] = (), run_dir: Path | None = None) -> None:
        self.trackers = list(trackers)
        self.run_dir = run_dir

    @classmethod
    def open(
        cls, names: Sequence[TrackerName], run_dir: Path, config: Mapping[str, Any], *, resume_step: int | None
    ) -> Trackers:
        """Open the trackers ``names`` for the run in ``run_dir`` (continuing the tracker
        runs of a run resumed at ``resume_step``) and keep their ids there. A missing
        library is a ValueError saying what to install (the default's TensorBoard is
        skipped); if one tracker fails to open, those opened before are closed."""
        problems = missing_libraries(names)
        if problems:
            raise ValueError("; ".join(problems))
        run = TrackedRun(run_dir, config, resume_step, _read_ids(run_dir / IDS_FILE))
        available = [n for n in names if importlib.util.find_spec(_LIBRARY[n][0]) is not None]
        with ExitStack() as undo:
            opened = []
            for name in available:
                tracker = _open(name, run)
                undo.callback(tracker.close, failed=True)
                opened.append((name, tracker))
            undo.pop_all()
        _keep_ids(run, {name: t.run_id for name, t in opened if t.run_id is not None})
        return cls([t for _, t in opened], run_dir)

    def log(self, step: int, record: Mapping[str, Any], *, axis: str = "step") -> None:
        """The numbers of ``record`` (a metrics.jsonl line) at ``step`` of ``axis`` ("step",
        or "sft_step" for the warm start's rows); None (a NaN) and text are left out."""
        if not self.trackers:
            return
        numbers = {k: float(v) for k, v in record.items() if k != axis and isinstance(v, (int, float))}
        for tracker in self.trackers:
            tracker.log(step, numbers, axis)

    def close(self, *, failed: bool = False) -> None:
        """End every tracker run (each one, even if another fails). A run that completed
        (not ``failed``) first builds its report, when a tracker takes files, and gives it
        to each of those."""
        with ExitStack() as stack:
            for tracker in self.trackers:
                stack.callback(tracker.close, failed=failed)
            takers = [t for t in self.trackers if isinstance(t, KeepsFiles)]
            if takers and not failed and self.run_dir is not None:
                page, sidecar = _build_report(self.run_dir)
                for tracker in takers:
                    tracker.upload(page, sidecar)
        self.trackers = []


def _build_report(run_dir: Path) -> tuple[Path, Path | None]:
    """``agentenv report RUN_DIR``'s page: output_dir/report.html and its sidecar folder, if any."""
    from agentenv.report import build_report

    built = build_report(run_dir)
    return built.path, built.sidecar_dir


def _unless_set(variable: str, default: str) -> str | None:
    """``default``, or None when ``variable`` is set: the library reads it then."""
    return None if os.environ.get(variable) else default


def _flat(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted key, text)`` of every leaf of ``config``; lists and null as JSON."""
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value if isinstance(value, str) else json.dumps(value)


def _keep_ids(run: TrackedRun, ids: dict[str, str]) -> None:
    """Write `IDS_FILE`: these ``ids``, and a resumed run's of trackers it no longer names
    (a later resume may name them again); a new run's file holds its own alone."""
    path = run.run_dir / IDS_FILE
    if run.resume_step is not None:
        ids = {**run.ids, **ids}
    if ids:
        path.write_text(json.dumps(ids, indent=1), encoding="utf-8")
    else:
        path.unlink(missing_ok=True)


def _read_ids(path: Path) -> dict[str, str]:
    """The tracker run ids a run left; none when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
