"""Experiment trackers, each through its real library and offline: W&B in offline mode (its
run files read back), MLflow on a local file store, Trackio in a temporary SQLite store,
TensorBoard's event files. What a user relies on: every step's figures arrive at their
step, the config is there, a finished run's report is uploaded where the tracker keeps
files, a resumed run continues the same tracker runs, and a tracker that cannot be used
says why before the run starts. No test reaches for the network (`no_network`)."""

from __future__ import annotations

import io
import json
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentenv.trainers import GRPOConfig
from agentenv.trainers.metrics import MetricsLogger
from agentenv.trainers.trackers import IDS_FILE, PROJECT, TrackerError, Trackers

ALL = ["tensorboard", "wandb", "mlflow", "trackio"]


@pytest.fixture(scope="module")
def trackio_dir(tmp_path_factory):
    """Trackio reads TRACKIO_DIR once, when imported: set it first."""
    where = tmp_path_factory.mktemp("trackio")
    if "trackio" in sys.modules:
        pytest.fail("trackio was imported before its store could be pointed at a temporary folder")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACKIO_DIR", str(where))
        import trackio.utils

        assert trackio.utils.TRACKIO_DIR == where
        yield where


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch, trackio_dir):
    """Every tracker local: W&B offline with its folders in tmp_path, MLflow on a file store
    there, Trackio in `trackio_dir`, the hub offline; the user's own settings unset."""
    for var in ("WANDB_PROJECT", "WANDB_NAME", "WANDB_DIR", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var, folder in (("WANDB_DATA_DIR", "data"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config")):
        monkeypatch.setenv(var, str(home / folder))
    monkeypatch.setenv("WANDB_ARTIFACT_DIR", str(home / "artifacts"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for a server or a database otherwise
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # MLflow's usage reports
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # Trackio's hub client
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """A connection from this process anywhere but this machine, or a name looked up, fails
    as on a machine without a network, and fails the test (from any thread)."""
    connect, resolve = socket.socket.connect, socket.getaddrinfo
    local = ("127.0.0.1", "::1", "localhost", None)
    attempts: list[str] = []

    def guarded_connect(self, address):
        if self.family == socket.AF_UNIX or address[0] in local:
            return connect(self, address)
        attempts.append(f"connect {address}")
        raise OSError(f"no network in this test: {address}")

    def guarded_resolve(host, *args, **kwargs):
        if host not in local:
            attempts.append(f"look up {host}")
            raise socket.gaierror(f"no network in this test: {host}")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_resolve)
    yield
    assert not attempts, f"a tracker reached for the network: {attempts}"


def _run_dir(tmp_path: Path) -> Path:
    """A run directory named after the test: Trackio's store is shared by the module's
    tests, and a run is found there by its name."""
    run = tmp_path / f"run-{tmp_path.name}"
    run.mkdir()
    return run


# -- reading each tracker back ---------------------------------------------------------------


def _wandb_runs(run_dir: Path) -> list[list[Any]]:
    """The records of each offline W&B run in run_dir/wandb, oldest first."""
    return [_wandb_records(file) for file in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))]


def _wandb_records(file: Path) -> list[Any]:
    """W&B's own protobuf records, read from its LevelDB-style log (32 KiB blocks of
    checksummed chunks). W&B's service finishes writing the file a moment after the run's
    `finish` returns: read until its exit record is there."""
    deadline = time.monotonic() + 60
    while True:
        records = _parse_wandb_log(file.read_bytes())
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def _parse_wandb_log(data: bytes) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    assert data[:4] == b":W&B"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):  # a chunk still being written
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or a record's last chunk
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _wandb_history(records: list[Any]) -> list[dict[str, Any]]:
    """Each history row's figures (W&B's own ``_step``, ``_runtime``, ... left out)."""
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            rows.append({k: v for k, v in row.items() if not k.startswith("_")})
    return rows


def _wandb_one(records: list[Any], kind: str) -> Any:
    found = [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]
    assert found, f"no {kind} record in {[r.WhichOneof('record_type') for r in records]}"
    return found[0]


def _mlflow_run(tmp_path: Path, experiment: str = PROJECT) -> Any:
    from mlflow import MlflowClient

    client = MlflowClient((tmp_path / "mlruns").as_uri())
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r}"
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1
    return client, runs[0]


def _mlflow_curve(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _trackio_logs(run_dir: Path) -> list[dict[str, Any]]:
    from trackio.sqlite_storage import SQLiteStorage

    return SQLiteStorage.get_logs(PROJECT, run_dir.name)


def _tensorboard(run_dir: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def _steps(logger: MetricsLogger) -> None:
    """Three steps' records as the trainer writes them: a start evaluation at step 0, a
    NaN (null in metrics.jsonl) and a text that no tracker can plot."""
    logger.log(0, {"eval/success_rate": 0.25})
    logger.log(1, {"reward/task": 0.5, "loss": float("nan"), "env": "say-v0"})
    logger.log(2, {"reward/task": 0.75, "loss": 0.125})


# -- the config --------------------------------------------------------------------------------


def test_report_to_defaults_to_tensorboard_and_checks_the_names():
    assert GRPOConfig().report_to == ["tensorboard"]
    assert GRPOConfig(report_to=["wandb", "mlflow", "wandb"]).report_to == ["wandb", "mlflow"]
    with pytest.raises(ValueError, match=r"report_to.0 must be one of .*got 'wandbb'. Did you mean 'wandb'"):
        GRPOConfig(report_to=["wandbb"])


def test_the_tensorboard_flag_is_a_deprecated_alias_of_report_to():
    with pytest.deprecated_call(match="use report_to"):
        off = GRPOConfig(tensorboard=False)
    assert off.report_to == [] and off.tensorboard is None
    with pytest.deprecated_call():
        both = GRPOConfig(report_to=["mlflow"], tensorboard=True)
    assert both.report_to == ["mlflow", "tensorboard"]
    assert GRPOConfig.from_dict(both.to_dict()) == both  # config.json says it once, in report_to


def test_a_tracker_whose_library_is_missing_is_a_config_error_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # how Python sees a package that is not installed
    with pytest.raises(ValueError, match=r"report_to names 'wandb', whose library is not installed: pip install"):
        GRPOConfig(report_to=["tensorboard", "wandb"])
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert GRPOConfig().report_to == ["tensorboard"]  # the default: TensorBoard when it is installed
    assert Trackers.open(["tensorboard"], tmp_path, {}, resume_step=None).trackers == []
    with pytest.raises(ValueError, match="'tensorboard', whose library is not installed"):
        GRPOConfig(report_to=["tensorboard", "mlflow"])


# -- each tracker, through the metrics logger ---------------------------------------------


@pytest.mark.slow  # starts W&B's service
def test_every_tracker_gets_each_step_the_config_and_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "from-env")  # the libraries' own variables win over the defaults
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    run_dir = _run_dir(tmp_path)
    config = GRPOConfig(output_dir=str(run_dir), report_to=ALL, steps=2, learning_rate=0.5)
    trackers = Trackers.open(config.report_to, run_dir, config.to_dict(), resume_step=None)
    logger = MetricsLogger(run_dir, total_steps=2, trackers=trackers, stream=io.StringIO())
    for sft_step in (1, 2, 3):  # a warm start's rows, on their own axis: the steps after them still arrive
        logger.trackers.log(sft_step, {"sft_step": sft_step, "sft/loss": 1.0 / sft_step}, axis="sft_step")
    _steps(logger)
    logger.close()
    assert (run_dir / "report.html").is_file()  # built once, as `agentenv report` writes it

    events = _tensorboard(run_dir)
    assert [(e.step, e.value) for e in events.Scalars("reward/task")] == [(1, 0.5), (2, 0.75)]
    assert [e.step for e in events.Scalars("eval/success_rate")] == [0]
    assert [e.step for e in events.Scalars("loss")] == [2]  # the NaN step left out
    assert [e.step for e in events.Scalars("sft/loss")] == [1, 2, 3]
    assert "learning_rate" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()

    (records,) = _wandb_runs(run_dir)
    run = _wandb_one(records, "run")
    assert run.project == "from-env" and run.display_name == run_dir.name
    assert {u.key: json.loads(u.value_json) for u in run.config.update}["learning_rate"] == 0.5
    history = _wandb_history(records)
    assert [(h["step"], h["reward/task"]) for h in history if "reward/task" in h] == [(1, 0.5), (2, 0.75)]
    assert [h["sft_step"] for h in history if "sft/loss" in h] == [1, 2, 3]
    assert not any("env" in h for h in history)
    artifact = _wandb_one(records, "artifact")
    assert artifact.type == "report" and [c.path for c in artifact.manifest.contents] == ["report.html"]
    assert _wandb_one(records, "exit").exit_code == 0

    client, mlrun = _mlflow_run(tmp_path, "from-env")
    assert _mlflow_curve(client, mlrun.info.run_id, "reward/task") == [(1, 0.5), (2, 0.75)]
    assert mlrun.data.params["learning_rate"] == "0.5" and mlrun.data.params["envs.arithmetic-v0"] == "1.0"
    assert mlrun.data.params["report_to"] == json.dumps(ALL)
    assert [a.path for a in client.list_artifacts(mlrun.info.run_id)] == ["report.html"]
    assert mlrun.info.status == "FINISHED" and mlrun.info.run_name == run_dir.name

    from trackio.sqlite_storage import SQLiteStorage

    logs = _trackio_logs(run_dir)
    assert [(row["step"], row["reward/task"]) for row in logs if "reward/task" in row] == [(1, 0.5), (2, 0.75)]
    assert SQLiteStorage.get_run_config(PROJECT, run_dir.name)["learning_rate"] == 0.5
    (uploaded,) = SQLiteStorage.get_run_artifacts(PROJECT, run_dir.name, None)["output"]
    assert uploaded["type"] == "report" and uploaded["size_bytes"] == (run_dir / "report.html").stat().st_size


@pytest.mark.slow  # starts W&B's service
def test_a_resumed_run_continues_the_same_tracker_runs(tmp_path):
    run_dir = _run_dir(tmp_path)
    config = GRPOConfig(output_dir=str(run_dir), report_to=["wandb", "mlflow", "trackio"]).to_dict()
    first = MetricsLogger(
        run_dir, total_steps=4, trackers=Trackers.open(config["report_to"], run_dir, config, resume_step=None)
    )
    first.log(1, {"reward/task": 0.1})
    first.log(2, {"reward/task": 0.2})
    first.close(failed=True)  # stopped before its last step: no report, the runs marked failed
    assert not (run_dir / "report.html").exists()
    ids = json.loads((run_dir / IDS_FILE).read_text())
    client, mlrun = _mlflow_run(tmp_path)
    assert mlrun.info.status == "FAILED"

    resumed = MetricsLogger(
        run_dir,
        total_steps=4,
        trackers=Trackers.open(config["report_to"], run_dir, config, resume_step=1),
        resume_step=1,
    )
    resumed.log(2, {"reward/task": 0.25})  # step 2 runs again after the checkpoint at 1
    resumed.close()

    wandb_runs = _wandb_runs(run_dir)
    assert [_wandb_one(r, "run").run_id for r in wandb_runs] == [ids["wandb"], ids["wandb"]]
    assert _wandb_one(wandb_runs[0], "exit").exit_code == 1
    assert [_wandb_one(r, "run").resume for r in wandb_runs] == [False, True]  # ``wandb sync`` joins them
    client, mlrun = _mlflow_run(tmp_path)  # still one run
    assert mlrun.info.run_id == ids["mlflow"] and mlrun.info.status == "FINISHED"
    assert _mlflow_curve(client, mlrun.info.run_id, "reward/task") == [(1, 0.1), (2, 0.2), (2, 0.25)]
    from trackio.sqlite_storage import SQLiteStorage

    assert SQLiteStorage.get_runs(PROJECT).count(run_dir.name) == 1
    assert [row["reward/task"] for row in _trackio_logs(run_dir)] == [0.1, 0.2, 0.25]


@pytest.mark.slow  # starts W&B's service
def test_a_tracker_that_cannot_start_says_why_and_closes_those_opened_before(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nowhere://store")
    run_dir = _run_dir(tmp_path)
    with pytest.raises(
        ValueError, match=r"MLflow cannot use the tracking store 'nowhere://store'.*MLFLOW_TRACKING_URI"
    ):
        Trackers.open(["wandb", "mlflow"], run_dir, {"steps": 1}, resume_step=None)
    (records,) = _wandb_runs(run_dir)
    assert _wandb_one(records, "exit").exit_code == 1


@pytest.mark.slow  # a trainer is built
def test_wandb_without_a_login_stops_the_run_before_it_starts_with_the_fix(tmp_path, monkeypatch, request):
    import wandb

    from agentenv.report.rundir import CLAIM_FILE
    from agentenv.trainers import GRPOTrainer
    from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

    wandb.teardown()  # W&B keeps the settings of its first run in the process (offline, by the tests before)
    request.addfinalizer(wandb.teardown)  # and those of this one (online) would reach the tests after
    monkeypatch.delenv("WANDB_MODE")  # online, with no API key anywhere (WANDB_CONFIG_DIR is empty, HOME too)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    run_dir = _run_dir(tmp_path)
    tokenizer = tiny_tokenizer()
    config = GRPOConfig(
        output_dir=str(run_dir), report_to=["wandb"], steps=1, group_size=2, batch_size=2, max_new_tokens=8,
        max_seq_len=128, eval_episodes=0, resume=False,
    )  # fmt: skip
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config)
    with pytest.raises(TrackerError, match=r"report_to 'wandb': wandb cannot start the run .*WANDB_MODE=offline"):
        trainer.train()
    assert trainer.step == 0 and not (run_dir / "metrics.jsonl").exists()
    assert not (run_dir / CLAIM_FILE).exists()  # `agentenv report` shows no run in progress


# -- a training run ------------------------------------------------------------------------


@pytest.mark.slow  # a training run
def test_a_training_run_logs_the_same_figures_to_every_tracker_and_uploads_its_report(tmp_path):
    from agentenv.trainers import GRPOTrainer
    from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

    run_dir = _run_dir(tmp_path)
    tokenizer = tiny_tokenizer()
    config = GRPOConfig(
        output_dir=str(run_dir),
        report_to=ALL,
        steps=2,
        group_size=2,
        batch_size=4,
        max_new_tokens=8,
        max_seq_len=128,
        eval_episodes=0,
        resume=False,
    )
    GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config).train()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    expected = [(row["step"], row["reward/task"]) for row in rows]
    assert [step for step, _ in expected] == [1, 2]

    events = _tensorboard(run_dir)
    assert [(e.step, pytest.approx(e.value)) for e in events.Scalars("reward/task")] == expected  # float32 there
    (records,) = _wandb_runs(run_dir)
    assert _wandb_one(records, "run").project == PROJECT
    assert [(h["step"], h["reward/task"]) for h in _wandb_history(records) if "reward/task" in h] == expected
    assert _wandb_one(records, "artifact").type == "report"
    client, mlrun = _mlflow_run(tmp_path)
    assert _mlflow_curve(client, mlrun.info.run_id, "reward/task") == expected
    assert mlrun.data.params["steps"] == "2" and mlrun.data.params["report_to"] == json.dumps(ALL)
    page = Path(client.download_artifacts(mlrun.info.run_id, "report.html", str(tmp_path / "downloaded")))
    assert page.read_bytes() == (run_dir / "report.html").read_bytes()
    assert f"agentenv run · {run_dir.name}" in page.read_text()  # the run's `agentenv report` page
    assert [(row["step"], row["reward/task"]) for row in _trackio_logs(run_dir) if "reward/task" in row] == expected
    from trackio.sqlite_storage import SQLiteStorage

    assert [a["type"] for a in SQLiteStorage.get_run_artifacts(PROJECT, run_dir.name, None)["output"]] == ["report"]
