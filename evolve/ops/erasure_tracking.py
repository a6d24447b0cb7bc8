"""Erasure in MLflow: the artifacts tracked nights logged (``traces.jsonl``, ``record.json``, summaries) that hold
erased words, found through the tracking client and redacted or deleted in the runs' artifact stores.

Every run of every experiment (deleted ones included) is read; each text artifact is redacted by its structure
first: a JSON-lines artifact loses the lines the request reaches (:meth:`evolve.ops.erasure_reach.Reach.line`: of an
erased conversation, or, for a turn, citing or quoting it), a JSON record the words of the inline examples it reaches
(:func:`evolve.state.content.redact_inline`). An artifact still quoting erased words after that is deleted. An artifact whose store cannot delete or rewrite it is
listed as refused: the command says so and exits non-zero.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict

from evolve.files import StoreError
from evolve.ops.erasure_reach import Reach
from evolve.state.content import redact_inline
from evolve.state.journal import STORES_TAG

#: The artifacts read (text); tracked nights log nothing else.
TEXT_SUFFIXES = (".json", ".jsonl", ".txt", ".yaml", ".yml", ".md", ".html", ".csv")


class RunErasure(BaseModel):
    """What one run's artifacts lost (artifact paths only: no words)."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    #: The stores directory the run tracked (its round run's tag), if any.
    stores: str | None
    redacted: list[str] = []
    deleted: list[str] = []
    #: Artifact path -> why its store could not delete or rewrite it.
    refused: dict[str, str] = {}

    def journaled(self) -> dict:
        """What an ERASE journal entry records of the run."""
        return self.model_dump(exclude={"run_id", "stores"})


def redacted(path: str, text: str, reach: Reach, erased_at: str) -> str | None:
    """``text`` of the artifact at ``path`` without the words ``reach`` erases: the same text when it holds none,
    ``None`` when it must be deleted (it still quotes erased words once redacted by its structure)."""
    out = text
    if path.endswith(".jsonl"):
        kept = []
        for line in text.splitlines(keepends=True):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if not reach.line(row):
                kept.append(line)
        out = "".join(kept)
    elif path.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("examples"), dict):
            examples = redact_inline(data["examples"], reach.row, erased_at)
            if examples is not None:
                out = json.dumps({**data, "examples": examples}, indent=2, ensure_ascii=False)
    return None if reach.quoted(out) else out


class TrackingErasure:
    """One erasure request over the runs of the tracking store at ``uri``."""

    def __init__(self, uri: str, reach: Reach, erased_at: str):
        from mlflow.tracking import MlflowClient

        if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
            raise StoreError(uri, "no such tracking store (the SQLite file does not exist)")
        self.uri, self.reach, self.erased_at = uri, reach, erased_at
        self.client = MlflowClient(tracking_uri=uri)

    def run(self) -> list[RunErasure]:
        """Every run whose artifacts held erased words, with what they lost."""
        from mlflow.entities import ViewType
        from mlflow.exceptions import MlflowException

        try:
            ids = [e.experiment_id for e in self.client.search_experiments(view_type=ViewType.ALL)]
            runs, token = [], None
            while ids:
                page = self.client.search_runs(ids, run_view_type=ViewType.ALL, max_results=1000, page_token=token)
                runs += list(page)
                token = page.token
                if not token:
                    break
        except (MlflowException, OSError) as exc:
            raise StoreError(self.uri, f"cannot read the tracking store: {str(exc).splitlines()[0]}") from None
        tagged = {r.info.run_id: r.data.tags.get(STORES_TAG) for r in runs}
        out = []
        for run in runs:
            parent = run.data.tags.get("mlflow.parentRunId")
            reach = RunErasure(run_id=run.info.run_id, stores=tagged[run.info.run_id] or tagged.get(parent or ""))
            self._run(run, reach)
            if reach.redacted or reach.deleted or reach.refused:
                out.append(reach)
        return out

    def _files(self, run_id: str, path: str | None = None) -> list[str]:
        found = []
        for info in self.client.list_artifacts(run_id, path):
            found += self._files(run_id, info.path) if info.is_dir else [info.path]
        return found

    def _run(self, run, reach: RunErasure) -> None:
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        repo = get_artifact_repository(run.info.artifact_uri)
        with tempfile.TemporaryDirectory(prefix="memevolve-erase-") as scratch:
            for path in self._files(run.info.run_id):
                if not path.endswith(TEXT_SUFFIXES):
                    continue
                local = Path(self.client.download_artifacts(run.info.run_id, path, scratch))
                text = local.read_text(encoding="utf-8", errors="replace")
                new = redacted(path, text, self.reach, self.erased_at)
                if new == text:
                    continue
                try:
                    repo.delete_artifacts(path)
                    if new is not None:
                        local.write_text(new, encoding="utf-8")
                        folder = str(PurePosixPath(path).parent)
                        repo.log_artifact(str(local), None if folder == "." else folder)
                except Exception as exc:  # noqa: BLE001 - any store's refusal (NotImplementedError, MlflowException)
                    reach.refused[path] = f"{type(exc).__name__}: {(str(exc).strip() or '-').splitlines()[0]}"
                    continue
                (reach.redacted if new is not None else reach.deleted).append(path)
