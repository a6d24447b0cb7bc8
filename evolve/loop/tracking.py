"""MLflow tracking: one run per round, one nested run per candidate. Local SQLite store by default."""
from __future__ import annotations

import logging
import os
import sqlite3
import time
import urllib.parse
from contextlib import closing
from pathlib import Path
from typing import Any, Mapping

from evolve.llm import UsageStats
from evolve.loop.commit import RoundOutcome
from evolve.loop.config import ConfigError, RunConfig
from evolve.loop.rules import rule_params, rules_of
from evolve.numbers import is_real
from evolve.reachability import http_get
from evolve.state.journal import HEAD_TAG, STORES_TAG
from evolve.state.records import dump_record
from evolve.state.stores import StoreSet
from evolve.strategy.artifact import strategy_hash
from evolve.strategy.diff import diff_strategies

_MAX_PARAM = 6000


def default_dir() -> Path:
    """Where runs are tracked by default: ``experiments/`` under the working directory."""
    return Path.cwd() / "experiments"


def default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else a SQLite store ``experiments/mlflow.db`` under the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{default_dir() / 'mlflow.db'}"


def existing_tracking_uri(given: str | None) -> str | None:
    """The tracking store a check or an erasure reads: ``given``, ``MLFLOW_TRACKING_URI``, or the default file if
    present (``None``: no tracking store to read)."""
    if given or os.environ.get("MLFLOW_TRACKING_URI"):
        return given or os.environ["MLFLOW_TRACKING_URI"]
    default = default_dir() / "mlflow.db"
    return f"sqlite:///{default}" if default.is_file() else None


def artifact_dir(uri: str) -> Path:
    """Where a local tracking store keeps artifacts: beside a SQLite tracking file (``experiments/mlartifacts`` by
    default)."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts"
    return default_dir() / "mlartifacts"


def _numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if is_real(v)}


def _is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def check_tracking(uri: str, experiment: str = "memevolve", timeout_s: float = 3.0) -> None:
    """Raise :class:`ConfigError` naming ``tracking_uri`` and the rule, within ``timeout_s``, unless the tracking
    store can be written: a server must answer its experiments API (not an error status), a SQLite file must be a
    writable database file in an existing directory. Anything else the MLflow client itself checks."""
    if _is_server(uri):
        base = uri.rstrip("/")
        url = f"{base}/api/2.0/mlflow/experiments/get-by-name?{urllib.parse.urlencode({'experiment_name': experiment})}"
        answer = http_get(url, timeout_s)
        if isinstance(answer, str):
            raise ConfigError(f"tracking_uri: cannot reach the MLflow tracking server at {uri}: {answer}")
        status, body = answer
        if not (status == 200 or status == 404 and b"RESOURCE_DOES_NOT_EXIST" in body):  # 404: no experiment yet
            raise ConfigError(f"tracking_uri: {uri} answers HTTP {status} to {url}, not as an MLflow tracking "
                              "server (a proxy answering for an unreachable host, or a server in trouble)")
    elif uri.startswith("sqlite:///"):
        _check_sqlite(Path(uri.removeprefix("sqlite:///")), timeout_s)


def _check_sqlite(path: Path, timeout_s: float) -> None:
    """A SQLite tracking file must be a writable database (created if missing, in an existing directory)."""
    where = f"tracking_uri: sqlite:///{path}"
    if path.exists() and not path.is_file():
        raise ConfigError(f"{where}: exists and is not a regular file (a directory?)")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ConfigError(f"{where}: {parent} is not a directory")
    if not path.exists():
        return  # created by MLflow, with its directory
    try:
        with closing(sqlite3.connect(path, timeout=timeout_s)) as db:  # a write, rolled back: fails on a
            db.execute("BEGIN IMMEDIATE")                                # read-only file or file system
            db.execute("CREATE TABLE memevolve_write_check (x)")
            db.rollback()
    except sqlite3.Error as exc:
        raise ConfigError(f"{where}: cannot write the tracking database ({exc})") from None


class Tracker:
    """Thin wrapper over :class:`MlflowClient` with the run layout the engine uses."""

    def __init__(self, uri: str | None = None, experiment: str = "memevolve", artifact_root: str | Path | None = None):
        logging.getLogger("alembic").setLevel(logging.WARNING)
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        self.uri = uri or default_tracking_uri()
        check_tracking(self.uri, experiment)
        try:
            self._open(experiment, artifact_root)
        except Exception as exc:  # MLflow, SQLAlchemy and OS errors alike: the store cannot be used
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"tracking_uri: cannot use the tracking store {self.uri}: {reason}") from None

    def _open(self, experiment: str, artifact_root: str | Path | None) -> None:
        if self.uri.startswith("sqlite:///"):
            Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        from mlflow.tracking import MlflowClient  # imported by a tracked run only: a second of start-up otherwise

        self.client = MlflowClient(tracking_uri=self.uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            self.experiment_id = found.experiment_id
        else:
            location = None  # a tracking server keeps (or proxies) the artifacts itself
            if artifact_root or not _is_server(self.uri):
                root = Path(artifact_root) if artifact_root else self._artifact_dir()
                location = root.resolve().as_uri() if "://" not in str(root) else str(root)
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=location)

    def _artifact_dir(self) -> Path:
        return artifact_dir(self.uri)

    def start(self, name: str, tags: Mapping[str, str] | None = None, parent_run_id: str | None = None) -> str:
        tags = dict(tags or {})
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        return self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id

    def log(self, run_id: str, *, params: Mapping[str, Any] | None = None, metrics: Mapping[str, Any] | None = None,
            tags: Mapping[str, Any] | None = None, step: int = 0) -> None:
        from mlflow.entities import Metric, Param, RunTag

        self.client.log_batch(
            run_id,
            metrics=[Metric(k, v, int(time.time() * 1000), step) for k, v in _numeric(metrics or {}).items()],
            params=[Param(k[:250], str(v)[:_MAX_PARAM]) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)[:_MAX_PARAM]) for k, v in (tags or {}).items()],
        )

    def artifact(self, run_id: str, name: str, content: str | dict) -> None:
        if isinstance(content, dict):
            self.client.log_dict(run_id, content, name)
        else:
            self.client.log_text(run_id, content, name)

    def end(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status)


def track_round(tracker: Tracker, stores: StoreSet, config: RunConfig, summary: dict, outcome: RoundOutcome,
                usage: UsageStats | None) -> str:
    """Log a committed round: a run per round with the new strategy's metrics and the decision rules as parameters
    (``rules.acceptance.alpha``, ...), and a nested run per candidate
    with its paired statistics, decision, record, diff, screening outcomes and (if fully evaluated) traces; the round run
    keeps the observed strategy's summary and traces (the candidates' parent). Returns
    the round's MLflow run id."""
    n = outcome.round
    head = stores.journal.last()
    run_id = tracker.start(f"round-{n:03d}", {"memevolve.round": str(n), STORES_TAG: str(stores.root.resolve()),
                                              HEAD_TAG: f"{head['index']}:{head['hash']}"})
    tracker.log(run_id, params={"stores": str(config.stores), "benchmark": config.benchmark,
                                "strategy_hash": strategy_hash(outcome.new),
                                **rule_params(rules_of(config.acceptance, config.cost))},
                metrics={**outcome.new_run.summary.metrics(), **(usage.to_dict() if usage else {})},
                tags={"accepted": summary["accepted"] or "none", "restored": summary["restored"]}, step=n)
    tracker.artifact(run_id, "round_summary.json", summary)
    # the observed strategy, every candidate's parent: with the candidates' own, what a review page shows
    tracker.artifact(run_id, "summary.json", outcome.run.summary.to_dict())
    tracker.artifact(run_id, "traces.jsonl", outcome.run.traces_jsonl())
    night = summary.get("night")
    if night:  # the round that ended a night: why, and its confirmation
        confirmation = night.get("confirmation") or {}
        tracker.log(run_id, metrics={f"night.{k}": v for k, v in (("rounds", night["rounds"]),
                                                                   ("evaluations", night["evaluations"]),
                                                                   *((f"confirmation.{k}", confirmation.get(k)) for k
                                                                     in ("p", "improved", "regressed", "score_start",
                                                                         "score_final"))) if v is not None},
                    tags={"night.ended": night["ended"], "night.verdict": confirmation.get("verdict", "none"),
                          "night.restored": night.get("restored") or "none"}, step=n)
        tracker.artifact(run_id, "night.json", night)
    for r in outcome.results:
        rec = r.record
        child = tracker.start(rec.candidate_id, {"memevolve.decision": rec.verdict}, parent_run_id=run_id)
        stored, paired = dump_record(rec), rec.paired
        metrics = {**(r.run.summary.metrics() if r.run else {}),
                   **{f"paired.{k}": getattr(paired, k, None) for k in ("delta", "mcnemar_p", "ci_low", "ci_high")},
                   **{f"paired.delta.{c}": v["delta"] for c, v in (paired.per_category if paired else {}).items()},
                   **{f"secondary.{k}": v for k, v in (rec.secondary.to_dict() if rec.secondary else {}).items()
                      if k != "n"},
                   **{f"probe.{k}": v for k, v in (rec.probe.to_dict() if rec.probe else {}).items()},
                   **{f"candidate.llm.{role}.{c}": v for role, counts in (rec.llm or {}).items()
                      for c, v in counts.items()}}
        tracker.log(child, params=diff_strategies(outcome.current, r.strategy).params() if rec.strategy_hash else {},
                    metrics=metrics, tags={"decision": rec.verdict, "decided_by": rec.decided_by,
                                           "rule": rec.decision.rule if rec.decision else "",
                                           "reason": rec.reason, "applied": rec.applied}, step=n)
        tracker.artifact(child, "record.json", stored)
        if rec.strategy_hash:
            tracker.artifact(child, "candidate.yaml", stores.strategy_path(rec.strategy_hash).read_text())
            tracker.artifact(child, "diff.txt", rec.diff_text)
        tracker.artifact(child, "gates.json", {k: stored[k] for k in ("gates", "critic", "probe", "decision")})
        if r.run:
            tracker.artifact(child, "summary.json", r.run.summary.to_dict())
            tracker.artifact(child, "traces.jsonl", r.run.traces_jsonl())
        tracker.end(child)
    tracker.end(run_id)
    return run_id
