"""``memevolve erase``: an erasure request carried to every copy of users' words the optimizer made.

The request names users (their conversations in an export carry the user id as sample id), export manifests
(:mod:`evolve.ops.manifest`; every user they list when no user is named), or single turns of users
(:mod:`evolve.ops.erasure_turn`: the words of one turn, not the whole conversation). What each step erases is what
the request reaches (:mod:`evolve.ops.erasure_reach`). Steps, each idempotent and each leaving the words it needs for
the next one, so a request cut short is finished by running it again:

1. the words to look for are gathered from the exports and the stores' side files (a turn's: from the exports; a
   turn the exports no longer hold was erased already, and nothing is done for it);
2. caches: LLM replies made for the conversations or quoting their words, ingested stores and embedding shards
   filed under them (:mod:`evolve.runtime.subject`), and cache files filed under no conversation (written before
   caches were filed: they may hold anyone's words; rebuilt when next needed);
3. MLflow: the artifacts of tracked runs holding the words are redacted or deleted (:mod:`evolve.ops.erasure_tracking`;
   one an artifact store cannot rewrite is reported as refused);
4. every stores directory (and its gate store): side files become tombstones (:mod:`evolve.state.content`), records
   written with inline words are stripped of them, and an ``ERASE`` journal entry records the request, the counts,
   each rewritten record's hash before and after and the artifacts of the runs that tracked it, so ``journal
   verify`` still passes (the entry is appended before the records are rewritten: a run cut short between the two
   leaves records ``journal verify`` names as an unfinished erasure, which the same ``memevolve erase`` finishes);
5. the exports: the users' samples are removed from each file and the manifest keeps only the hash of their ids (a
   turn: it leaves its session, with the questions citing or quoting it, and the manifest keeps the hash of user and
   turn id); the manifest's hash of the export follows the rewrite.
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from evolve.canonical import canonical_json
from evolve.errors import UserError
from evolve.files import (StoreError, atomic_write_json, atomic_write_text, crash_point, files_named, iter_jsonl,
                          now_iso, read_json)
from evolve.llm.cache import ResponseCache
from evolve.ops.erasure_reach import Reach, UserReach
from evolve.ops.erasure_tracking import RunErasure, TrackingErasure
from evolve.ops.erasure_turn import TurnReach, find_turns, without_turns
from evolve.ops.manifest import (ErasedTurn, ErasedUser, ExportManifest, checked_export, file_sha256, read_manifest,
                                 user_sha256, write_manifest)
from evolve.runtime.cache import SHARED_EMBEDDINGS_ENV, forget_subjects
from evolve.runtime.subject import subject_key
from evolve.state.content import redact_inline
from evolve.state.records import load_record, record_hash
from evolve.state.stores import StoreSet


@dataclass
class ErasureReport:
    """What one request reached (counts only: no words, no user id)."""

    request: str
    erased_at: str
    subjects: list[str]
    turns: int = 0                                               # turns of a turn request found in the exports
    already: int = 0                                             # turns of a turn request erased before
    exports: dict[str, int] = field(default_factory=dict)        # export file -> samples (a turn request: turns) removed
    questions: dict[str, int] = field(default_factory=dict)      # export file -> questions removed with turns
    cache_files: dict[str, int] = field(default_factory=dict)    # cache directory -> files deleted
    stores: dict[str, dict] = field(default_factory=dict)        # stores directory -> ERASE payload counts
    tracking: dict[str, list[RunErasure]] = field(default_factory=dict)  # tracking URI -> runs reached

    @property
    def found(self) -> bool:
        """Whether any copy held the users' words (an export sample, a cache file, a side file, a record, a run)."""
        return bool(sum(self.exports.values()) or sum(self.cache_files.values()) or any(self.tracking.values())
                    or any(c["side_files"] or c["records_rewritten"] or c["runs"] for c in self.stores.values()))

    def refused(self) -> list[tuple[str, str, str]]:
        """Artifacts a tracking store could not rewrite: (run id, artifact path, why)."""
        return [(r.run_id, path, why) for runs in self.tracking.values() for r in runs
                for path, why in r.refused.items()]

    def to_dict(self) -> dict:
        return {"request": self.request, "erased_at": self.erased_at, "subjects": self.subjects,
                "turns": self.turns, "already": self.already, "exports": self.exports, "questions": self.questions,
                "cache_files": self.cache_files, "stores": self.stores,
                "tracking": {uri: [r.model_dump() for r in runs] for uri, runs in self.tracking.items()}}


def _sample_words(sample: dict) -> set[str]:
    """A LoCoMo sample's words: its turns, questions and gold answers."""
    conversation = sample.get("conversation") or {}
    turns = [t.get("text") for key, value in conversation.items() if key.startswith("session_")
             and isinstance(value, list) for t in value if isinstance(t, dict)]
    asked = [q.get(k) for q in sample.get("qa", []) + sample.get("unanswered", []) if isinstance(q, dict)
             for k in ("question", "answer")]
    return {str(w) for w in turns + asked if w not in (None, "")}


def _stores_dirs(roots: list[Path]) -> list[Path]:
    """The stores directories to reach: each given one and its gate store."""
    out = []
    for root in roots:
        if not (root / "journal.jsonl").is_file():
            raise UserError(f"--stores {root}: not a stores directory (no journal.jsonl)")
        out.append(root)
        if (root / "gate" / "journal.jsonl").is_file():
            out.append(root / "gate")
    return out


class Erasure:
    """One request over the given manifests, stores directories, extra cache directories and MLflow tracking
    stores: of whole users (``users``, or every user of ``manifests``) or of single ``turns`` ((user, turn id); their
    words are read from ``manifests``' exports)."""

    def __init__(self, users: list[str], manifests: list[Path], stores: list[Path], caches: list[Path],
                 tracking: list[str] = (), outside: bool = False, turns: list[tuple[str, str]] = ()):
        if not users and not manifests and not turns:
            raise UserError("name the users to erase (--user) or the exports whose users to erase (--export), or the "
                            "turns to erase (--turn USER:ID)")
        if users and turns:
            raise UserError("--user and --turn: a request erases whole users or single turns, not both; make two")
        if turns and not manifests:
            raise UserError("--turn needs --export: a turn's words are read from the exports holding it")
        self.manifests = {path: read_manifest(path) for path in manifests}
        #: Each manifest's export, checked before any step runs (a refusal erases nothing).
        self.exports = {path: checked_export(path, m, outside) for path, m in self.manifests.items()}
        bad = next((u for u in users if not u.strip() or "/" in u or "\\" in u or ".." in u), None)
        if bad is not None:
            raise UserError(f"--user {bad!r}: not a user id (a user id names no path and is not blank)")
        #: A turn request's turns as the exports hold them, and what reaches them (a user request's reach is made
        #: when it runs, from the words gathered).
        self.turns, already = find_turns(list(turns), self.manifests, {p: self._samples(p) for p in self.manifests}) \
            if turns else ([], 0)
        self.turn_reach = TurnReach(self.turns) if turns else None
        named = set() if turns else set(users) or {u.user for m in self.manifests.values() for u in m.users}
        self.users = sorted(named)
        #: The conversations to reach: each user's own id and the sample ids the exports gave it (a turn's).
        self.conversations = set(self.users) | {u.sample_id for m in self.manifests.values() for u in m.users
                                                if u.user in named} | {c for t in self.turns for c in t.conversations}
        self.subjects = {subject_key(c) for c in self.conversations}
        self.stores = _stores_dirs(stores)
        self.caches = caches
        self.tracking = list(tracking)
        self.report = ErasureReport(f"erase-{now_iso().replace(':', '')}-{secrets.token_hex(4)}", now_iso(),
                                    sorted(self.subjects), turns=len(self.turns), already=already)

    def run(self) -> ErasureReport:
        if self.turn_reach is not None and not self.turns:
            return self.report  # every turn named was erased before: nothing holds it, nothing changes
        reach = self.turn_reach or UserReach(self.conversations, self._words())
        for directory in self._cache_dirs():
            gone = len(forget_subjects(directory / "ingestion", reach.subjects)) \
                if (directory / "ingestion").is_dir() else len(forget_subjects(directory, reach.subjects))
            gone += len(ResponseCache(directory / "llm").forget(reach.cache_entry))
            if gone:
                self.report.cache_files[str(directory)] = gone
        for uri in self.tracking:
            self.report.tracking[uri] = TrackingErasure(uri, reach, self.report.erased_at).run()
        for root in self.stores:
            self.report.stores[str(root)] = self._stores(root, reach)
        for path, manifest in self.manifests.items():
            if self.turns:
                self._export_turns(path, manifest)
            else:
                self._export(path, manifest)
        return self.report

    # ------------------------------------------------------------ steps

    def _words(self) -> set[str]:
        """Every text of the users the exports and the stores' side files still hold."""
        words: set[str] = set()
        for path in self.manifests:
            for sample in self._samples(path):
                if sample.get("sample_id") in self.conversations:
                    words |= _sample_words(sample)
        for root in self.stores:
            with StoreSet(root) as store:
                words |= store.content.words_of(self.subjects)
        return words

    def _cache_dirs(self) -> list[Path]:
        shared = os.environ.get(SHARED_EMBEDDINGS_ENV)
        dirs = [root / "cache" for root in self.stores] + list(self.caches) + ([Path(shared)] if shared else [])
        return [d for d in dict.fromkeys(dirs) if d.is_dir()]

    def _stores(self, root: Path, reach: Reach) -> dict:
        """Redact one stores directory and journal it; the ERASE payload's counts."""
        with StoreSet(root) as store:
            side = store.content.redact(reach.side_file, self.report.erased_at, self.report.request,
                                        reach.side_subjects)
            rewritten, text = self._inline_records(store, reach)
            tracked = str(root.resolve())
            artifacts = {r.run_id: r.journaled() for runs in self.report.tracking.values() for r in runs
                         if r.stores == tracked}
            payload = {"request": self.report.request, "erased_at": self.report.erased_at,
                       "subjects": self.report.subjects, "side_files": side, "records": rewritten,
                       "cache_files": sum(n for d, n in self.report.cache_files.items()
                                          if Path(d) == store.cache_dir),
                       "artifacts": artifacts, **({"turns": [t.sha256 for t in self.turns]} if self.turns else {})}
            entry = store.append_journal("ERASE", payload)  # first: a rewrite cut short is named, and run again
            crash_point("erase.journaled")
            if rewritten:
                atomic_write_text(store.path("candidate_outcomes"), text)
        return {"side_files": side, "records_rewritten": len(rewritten), "runs": len(artifacts),
                "journal_entry": entry["index"]}

    def _inline_records(self, store: StoreSet, reach: Reach) -> tuple[dict[str, dict], str]:
        """The records written with words ``reach`` erases inline, stripped of them: each rewritten record's hash
        before and after (what the ERASE entry journals, before the file is rewritten), and the file's new text."""
        path = store.path("candidate_outcomes")
        lines, changes = [], {}
        for _, data in iter_jsonl(path):
            examples = redact_inline(data.get("examples"), reach.row, self.report.erased_at)
            if examples is not None:
                before = record_hash(load_record(data))
                data = {**data, "examples": examples}
                changes[data["candidate_id"]] = {"before": before, "after": record_hash(load_record(data))}
            lines.append(canonical_json(data))
        return changes, "".join(line + "\n" for line in lines)

    def _samples(self, path: Path) -> list[dict]:
        export = self.exports[path]
        samples = read_json(export)
        if not isinstance(samples, list):
            raise StoreError(export, "not an exported benchmark file (a JSON list of samples)")
        return samples

    def _export(self, path: Path, manifest: ExportManifest) -> None:
        """Remove the users' samples from the export (the link's target, for a linked one) and their ids from the
        manifest."""
        export = self.exports[path]
        samples = self._samples(path)
        kept = [s for s in samples if s.get("sample_id") not in self.conversations]
        if len(kept) != len(samples):
            atomic_write_json(export, kept)
        self.report.exports[str(export)] = len(samples) - len(kept)
        gone = [u for u in manifest.users if u.user in self.users]
        if not gone and len(kept) == len(samples):
            return
        stones = [ErasedUser(user_sha256=user_sha256(u.user), erased_at=self.report.erased_at,
                             request=self.report.request) for u in gone]
        write_manifest(path, manifest.model_copy(update={
            "users": [u for u in manifest.users if u.user not in self.users],
            "erased": manifest.erased + stones,
            "sha256": file_sha256(export) if export.is_file() else manifest.sha256}))

    def _export_turns(self, path: Path, manifest: ExportManifest) -> None:
        """Remove the turns (and the questions going with them) from the export's samples, and their ids from the
        manifest, which keeps the hash of each turn removed and the export's new hash."""
        export = self.exports[path]
        samples, removed, dropped = [], [], 0
        owners = {(u.user, u.sample_id) for u in manifest.users}
        for sample in self._samples(path):
            new, gone, n = without_turns(sample, [t for t in self.turns
                                                  if any((t.user, c) in owners for c in t.conversations)])
            samples.append(new)
            removed, dropped = removed + gone, dropped + n
        self.report.exports[str(export)] = len(removed)
        self.report.questions[str(export)] = dropped
        if not removed:
            return
        atomic_write_json(export, samples)
        by_sample = {s.get("sample_id"): s for s in samples}
        erased = {(t.user, t.turn) for t in removed}
        users = [u.model_copy(update={"turns": [i for i in u.turns if (u.user, i) not in erased],
                                      "questions": len(by_sample.get(u.sample_id, {}).get("qa", []))})
                 for u in manifest.users]
        stones = [ErasedTurn(turn_sha256=t.sha256, erased_at=self.report.erased_at, request=self.report.request)
                  for t in removed]
        write_manifest(path, manifest.model_copy(update={"users": users, "erased_turns": manifest.erased_turns + stones,
                                                         "sha256": file_sha256(export)}))


def find_manifests(paths: list[Path]) -> list[Path]:
    """The manifests named, a folder standing for every ``*.manifest.json`` under it."""
    return files_named(paths, "*.manifest.json", lambda path: UserError(f"--export {path}: no such manifest or folder"))
