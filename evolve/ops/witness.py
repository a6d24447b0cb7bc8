"""Journal heads recorded outside the stores, and their check against the journal.

The journal's own anchor (the head in ``state.json``) lives beside it, so whoever rewrites the stores can rewrite
both. Two anchors live elsewhere:

* every PROMOTE / ROLLBACK appends a *witness line* ``{"index", "hash", "type", "ts", "stores"}`` (a PROMOTE also
  its ``approval``) to ``<serving file>.witness``, beside the serving file (typically another machine's or another
  repository's disk);
* every tracked round tags its MLflow round run with ``memevolve.journal_head`` (``INDEX:HASH``) and
  ``memevolve.stores`` (the stores' absolute path), on whatever tracking server the team uses.

``memevolve journal verify`` checks that every such head is still an entry of the journal, byte for byte. What this
promises: a journal truncated, re-chained or replaced after a head was witnessed fails verification, unless every
witness file and every tracked run was rewritten too. What it does not: entries appended after the last witnessed
head are only protected by the chain (and by ``MEMEVOLVE_JOURNAL_KEY``, see :mod:`evolve.state.journal`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from evolve.ops.targets import WITNESS_SUFFIX
from evolve.files import StoreError, append_lines, iter_jsonl
from evolve.canonical import canonical_json
from evolve.state.entries import JournalEntry, PromotePayload
from evolve.state.journal import HEAD_TAG, STORES_TAG
from evolve.reachability import http_get



@dataclass(frozen=True)
class Anchor:
    """A journal head recorded at ``source``."""

    source: str
    index: int
    hash: str


def witness_path(target: Path) -> Path:
    return target.with_name(target.name + WITNESS_SUFFIX)


def append_head(path: Path, entry: dict, where: str, **more) -> None:
    """Append the head ``entry`` of the chain kept at ``where`` to the witness file ``path``, with ``more``."""
    line = {"index": entry["index"], "hash": entry["hash"], "type": entry["type"], "ts": entry["ts"],
            "stores": where, **more}
    append_lines(path, [canonical_json(line)])


def head_anchors(path: Path, where: str) -> list[Anchor]:
    """Heads of the chain kept at ``where`` witnessed in the file ``path`` (none if there is no such file)."""
    try:
        lines = list(iter_jsonl(path))
    except StoreError as exc:
        return [Anchor(f"{path}: unreadable ({exc.cause})", -1, "")]
    return [Anchor(f"{path}:{n}", int(w.get("index", -1)), str(w.get("hash", ""))) for n, w in lines
            if w.get("stores") == where]


def write_witness(target: Path, entry: JournalEntry, stores_root: Path) -> None:
    """Append the head ``entry`` (just journaled for ``target``) to the witness file beside ``target``; a PROMOTE
    line also carries the promotion's approval (``null``: unapproved)."""
    more = {"approval": entry.payload.approval} if isinstance(entry.payload, PromotePayload) else {}
    head = {"index": entry.index, "hash": entry.hash, "type": entry.type.value, "ts": entry.ts}
    append_head(witness_path(target), head, str(stores_root.resolve()), **more)


def witness_anchors(target: Path, stores_root: Path) -> list[Anchor]:
    """Heads of ``stores_root``'s journal witnessed beside ``target`` (none if there is no witness file)."""
    return head_anchors(witness_path(target), str(stores_root.resolve()))


def tracking_anchors(uri: str, stores_root: Path) -> list[Anchor]:
    """Heads of ``stores_root``'s journal tagged on MLflow round runs at ``uri``."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        raise StoreError(uri, "no such tracking store (the SQLite file does not exist)")
    if uri.startswith(("http://", "https://")):
        answer = http_get(f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/search?max_results=1", 3.0)
        if isinstance(answer, str) or answer[0] != 200:
            raise StoreError(uri, "cannot read the tracking store: " + (answer if isinstance(answer, str) else
                                                                         f"the server answers HTTP {answer[0]}"))
    try:
        client = MlflowClient(tracking_uri=uri)
        ids = [e.experiment_id for e in client.search_experiments()]
        tag = json.dumps(str(stores_root.resolve()))
        runs = client.search_runs(ids, filter_string=f"tags.`{STORES_TAG}` = {tag}") if ids else []
    except (MlflowException, OSError) as exc:
        raise StoreError(uri, f"cannot read the tracking store: {str(exc).splitlines()[0]}") from None
    anchors = []
    for run in runs:
        index, _, digest = run.data.tags.get(HEAD_TAG, "").partition(":")
        if index:
            anchors.append(Anchor(f"MLflow run {run.info.run_id} ({run.info.run_name})", int(index), digest))
    return anchors


def anchor_problems(anchors: list[Anchor], hashes: tuple[str, ...], name: str = "journal") -> list[str]:
    """Anchors whose head is not an entry of the chain (the journal, or the ``name``d log) hashing to ``hashes``."""
    problems = []
    for a in anchors:
        if not 0 <= a.index < len(hashes):
            problems.append(f"{a.source} witnessed entry {a.index}, but the {name} has {len(hashes)} entries "
                            "(truncated or replaced)")
        elif hashes[a.index] != a.hash:
            problems.append(f"{a.source} witnessed entry {a.index} with hash {a.hash[:12]}, but the {name}'s entry "
                            f"{a.index} hashes to {hashes[a.index][:12]} (rewritten)")
    return problems
