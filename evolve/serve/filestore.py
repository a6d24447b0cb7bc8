"""The embedded store: each user's memory as a folder of local, inspectable files.

``<root>/users/<user>/``

* ``capture.jsonl`` - the append-only capture log, one line per acknowledged request, fsync'd before the reply (the
  repair path: everything else is rebuilt from it);
* ``records/<session>/NNNN-<turn>.md`` - one Markdown record per turn (YAML frontmatter: id, speaker, session, time,
  sha256 of the text), ``records/<session>/summary.md`` - the session's rollup, ``records/memory.yaml`` - the facts
  with their supersession and retraction marks; written atomically when a session is organised, and committed to
  the user's own Git repository (one commit per organisation step: ``git log -p records/`` shows when a memory
  entered and what it superseded);
* ``organised.json`` - the sessions whose commit completed; ``recalls.jsonl`` (+ ``recalls.1.jsonl``) - the
  size-bounded recall log; ``derived/`` - the embedding cache.

Erasure renames the whole folder (its Git history included) out of ``users/`` in one step, advances the user id's
erasure generation ``<root>/generations/<name>.json``, leaves a tombstone ``<root>/tombstones/<name>.json`` holding
no content, then deletes the renamed folder; a crash in between is finished at the next start. A user's ``name`` is
the sha256 of the id, keyed under ``MEMEVOLVE_USER_KEY`` (:mod:`evolve.serve.pseudonym`; ``naming.json`` says which). No raw text of an erased user remains in the store, Git history included.

Erasing one turn notes the erasure (``erasing-turn.json``: ids only), rewrites the user's Git history so that no
commit keeps the turn's record, its session's rollup or a fact it is a source of (:mod:`evolve.serve.githistory`;
unreachable objects pruned), removes the session's current records (organised again without the turn), rewrites the
capture log without it, drops the embedding cache and advances the generation; a crash between is finished when the
store is next opened.

Keying the names (:meth:`FileBackend.rekey`) stages the renamed tombstones, generations and audit under ``rekey/``,
commits by writing ``naming.json``, then moves them into place; a crash before the commit leaves the store as it
was, one after it is finished when the store is next opened.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import yaml

from evolve.benchmarks.types import Turn
from evolve.files import (StoreError, append_lines, atomic_write_bytes, atomic_write_json, atomic_write_text,
                          crash_point, ensure_dir, iter_jsonl, now_iso, os_error, read_json, remove_stale_temps,
                          repair_torn_tail)
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.serve.backend import AUDIT_FILE, UnknownTurn, valid_user
from evolve.serve.pseudonym import LEGACY, Naming, Pseudonyms
from evolve.serve.githistory import prune, rewrite_history
from evolve.serve.records import (CaptureEvent, RecallRecord, RecordError, Tombstone, TurnErased, TurnMeta,
                                  load_record, read_event, turns_in, without_turn)

#: Recall log size at which it rotates (the log keeps at most twice this).
RECALL_LOG_BYTES = 4 * 2**20
_IGNORED = "capture.jsonl\norganised.json\nrecalls*.jsonl\nderived/\n"
#: A turn erasure begun and not finished (a crash): finished when the store is next opened.
_ERASING = "erasing-turn.json"
_NAMING, _REKEY, _NAMED = "naming.json", "rekey", ("tombstones", "generations")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:60]


def _frontmatter(meta: dict, body: str) -> str:
    return f"---\n{yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)}---\n{body}\n"


def read_record(path: Path) -> tuple[dict, str]:
    """``(frontmatter, body)`` of a Markdown record; :class:`StoreError` naming the file if it is not one."""
    return parse_record(path.read_text(encoding="utf-8"), path)


def parse_record(text: str, where: str | Path) -> tuple[dict, str]:
    """``(frontmatter, body)`` of a Markdown record's ``text``; :class:`StoreError` naming ``where`` if it is not
    one."""
    head, sep, body = text[4:].partition("\n---\n")
    if not text.startswith("---\n") or not sep:
        raise StoreError(where, "not a record: no YAML frontmatter between '---' lines")
    meta = yaml.safe_load(head)
    if not isinstance(meta, dict):
        raise StoreError(where, "frontmatter is not a mapping")
    return meta, body[:-1] if body.endswith("\n") else body


def _memory_yaml(strategy: str | None, facts: list[dict]) -> str:
    return yaml.safe_dump({"strategy": strategy, "facts": facts}, sort_keys=False, allow_unicode=True)


def _without_turn(path: str, data: bytes, erased: TurnErased) -> bytes | None:
    """A file of ``records/`` without what turn ``erased.turn`` gave it: its own record and its session's rollup
    dropped, the facts it is a source of left out of ``memory.yaml``."""
    if path == "records/memory.yaml":
        memory = yaml.safe_load(data) or {}
        facts = memory.get("facts") or []
        kept = [f for f in facts if erased.turn not in f.get("source_ids", ())]
        return data if len(kept) == len(facts) else _memory_yaml(memory.get("strategy"), kept).encode()
    meta, _ = parse_record(data.decode("utf-8"), path)
    return None if meta.get("id") == erased.turn or erased.turn in (meta.get("source_ids") or ()) else data


def _fact(item: MemoryItem) -> dict:
    out = {"id": item.id, "layer": item.layer, "kind": item.kind, "source_ids": list(item.source_ids),
           "text": item.text}
    if item.superseded_by:
        out["superseded_by"] = item.superseded_by
    if item.retracted:
        out["retracted"] = True
    if item.versions:
        out["later_versions"] = list(item.versions)
    return out


class FileBackend:
    """:class:`evolve.serve.backend.Backend` over local folders (one Git repository per user)."""

    #: One service process owns the folders.
    shared = False

    def __init__(self, root: str | Path, recall_log_bytes: int = RECALL_LOG_BYTES, names: Pseudonyms | None = None):
        self.root = Path(root)
        self.recall_log_bytes = recall_log_bytes
        self.names = names or Pseudonyms.from_env()
        self._finish_rekey()
        for sub in ("users", "tombstones", "generations", "trash"):
            ensure_dir(self.root / sub)
        for left in (self.root / "trash").iterdir():  # an erasure interrupted after its rename
            shutil.rmtree(left, ignore_errors=True)
        for pending in sorted((self.root / "users").glob(f"*/{_ERASING}")):  # a turn erasure interrupted
            self._finish_turn_erasure(pending.parent.name, load_record(TurnErased, read_json(pending), str(pending)))

    @property
    def where(self) -> str:
        return str(self.root.resolve())

    def _dir(self, user: str) -> Path:
        if not valid_user(user):
            raise ValueError(f"invalid user id {user!r}")
        return self.root / "users" / user

    def users(self) -> list[str]:
        return sorted(p.name for p in (self.root / "users").iterdir() if p.is_dir() and valid_user(p.name))

    def exists(self, user: str) -> bool:
        return self._dir(user).is_dir()

    # ---------------------------------------------------------------- capture log

    def append(self, user: str, event: CaptureEvent) -> None:
        """Append one event durably (a torn tail left by a crash is dropped first); a failed append (a full or
        read-only disk) leaves the log as it was, and a new user's folder is removed again."""
        folder = self._dir(user)
        created = not folder.is_dir()
        try:
            if created:
                ensure_dir(folder)
                self._git(folder, "init", "-q")
                atomic_write_text(folder / ".gitignore", _IGNORED)
            crash_point("serve.capture.before_log")
            append_lines(folder / "capture.jsonl", [event.model_copy(update={"at": now_iso()}).to_json()], repair=True)
        except StoreError:
            if created:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        crash_point("serve.capture.after_log")

    def events(self, user: str, since: int = 0) -> list[CaptureEvent]:
        log = self._dir(user) / "capture.jsonl"
        if not log.exists():
            return []
        repair_torn_tail(log)
        return self._read_events(log)[since:]

    def generation(self, user: str) -> int:
        return read_json(self._generation_path(user), 0)

    def _generation_path(self, user: str) -> Path:
        return self.root / "generations" / f"{self._user_key(user)}.json"

    def _advance(self, user: str) -> None:
        """Advance the user's generation (written atomically)."""
        atomic_write_json(self._generation_path(user), self.generation(user) + 1)

    @staticmethod
    def _read_events(log: Path) -> list[CaptureEvent]:
        return [read_event(record, f"{log}: line {line}") for line, record in iter_jsonl(log)]

    # ---------------------------------------------------------------- organisation

    def organise(self, user: str, session: str, turns: list[Turn], store: MemoryStore, strategy_hash: str) -> None:
        folder = self._dir(user)
        remove_stale_temps(folder / "records", recursive=True)
        records = folder / "records" / _safe(session)
        for n, turn in enumerate(turns):
            atomic_write_text(records / f"{n:04d}-{_safe(turn.id)}.md",
                              _frontmatter(TurnMeta.of(turn, session, store.ikb).stored(), turn.text))
            if n == 0:
                crash_point("serve.organise.records")
        ids = {t.id for t in turns}
        rollups = [i for i in store.items if i.layer == "L1" and i.source_ids and i.source_ids[0] in ids]
        for item in rollups:
            atomic_write_text(records / "summary.md", _frontmatter(
                {"id": item.id, "session": session, "source_ids": list(item.source_ids)}, item.text))
        facts = [_fact(i) for i in store.items if i.layer in ("L0", "L2")]
        atomic_write_text(folder / "records" / "memory.yaml", _memory_yaml(strategy_hash, facts))
        crash_point("serve.organise.before_commit")
        self._git(folder, "add", "-A", "records", ".gitignore")
        if self._git(folder, "diff", "--cached", "--quiet", check=False).returncode != 0:
            self._git(folder, "commit", "-q", "-m",
                      f"organise session {session}: {len(turns)} turn(s), {len(facts)} fact(s), strategy "
                      f"{strategy_hash[:12]}")
        done = self.organised(user) | {session}
        atomic_write_json(folder / "organised.json", sorted(done))

    def organised(self, user: str) -> set[str]:
        return set(read_json(self._dir(user) / "organised.json", []))

    @staticmethod
    def _git(folder: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        lock = folder / ".git" / "index.lock"
        if lock.exists():  # left by a step killed mid-commit; this process is the repository's only writer
            lock.unlink()
        env = {**os.environ, "GIT_AUTHOR_NAME": "memevolve", "GIT_AUTHOR_EMAIL": "memevolve@localhost",
               "GIT_COMMITTER_NAME": "memevolve", "GIT_COMMITTER_EMAIL": "memevolve@localhost"}
        done = subprocess.run(["git", "-C", str(folder), *args], env=env, capture_output=True, text=True)
        if check and done.returncode != 0:
            raise StoreError(folder, f"git {args[0]} failed: {done.stderr.strip()}")
        return done

    # ---------------------------------------------------------------- derived state and recall log

    def embeddings_dir(self, user: str) -> Path | None:
        return self._dir(user) / "derived" / "embeddings"

    def log_recall(self, user: str, record: RecallRecord) -> None:
        """One line, one write, not fsynced (telemetry, not state): a killed service loses no line, a machine crash
        may lose the last seconds' lines or tear the last one, which the next append drops."""
        folder = self._dir(user)
        log = folder / "recalls.jsonl"
        append_lines(log, [record.to_json()], sync=False, repair=True)
        if log.stat().st_size >= self.recall_log_bytes:  # rotated after a complete line: never a torn one
            os.replace(log, folder / "recalls.1.jsonl")

    def recalls(self, user: str) -> list[RecallRecord]:
        folder = self._dir(user)
        return [r for name in ("recalls.1.jsonl", "recalls.jsonl") for r in self._recalls(folder / name)]

    @staticmethod
    def _recalls(log: Path) -> list[RecallRecord]:
        return [load_record(RecallRecord, r, f"{log}: line {line}") for line, r in iter_jsonl(log)]

    def _drop_recalls(self, folder: Path, turns: set[str]) -> None:
        """The recall log without the recalls whose context packed one of ``turns`` (their answers may hold its
        words), each file rewritten atomically."""
        for name in ("recalls.1.jsonl", "recalls.jsonl"):
            if (folder / name).exists():
                held = self._recalls(folder / name)
                kept = [r for r in held if not r.packs(turns)]
                if len(kept) != len(held):
                    atomic_write_text(folder / name, "".join(r.to_json() + "\n" for r in kept))

    # ---------------------------------------------------------------- erasure and verification

    def _user_key(self, user: str) -> str:
        return self.names.of(user)

    def erase(self, user: str) -> Tombstone:
        """Rename the folder out of ``users/``, write the tombstone, delete the folder. A failure before the
        tombstone is written (a read-only or full disk) puts the folder back: nothing is erased."""
        folder = self._dir(user)
        try:  # a corrupt log (a quarantined user) is erased all the same, its turns uncounted
            turns: int | None = len(turns_in(self.events(user))) if folder.is_dir() else 0
        except (StoreError, RecordError):
            turns = None
        tombstone = Tombstone(user_sha256=self._user_key(user), erased_at=now_iso(), turns_erased=turns)
        if folder.is_dir():
            parked = self.root / "trash" / uuid.uuid4().hex
            try:
                os.replace(folder, parked)
            except OSError as exc:
                raise os_error(folder, exc, "erase (move out of users/)") from None
            try:
                self._advance(user)  # advanced in vain if the tombstone then fails: a replica only loads again
                atomic_write_json(self._tombstone_path(user), tombstone.stored())
            except StoreError:
                os.replace(parked, folder)
                raise
            crash_point("serve.erase.before_delete")
            shutil.rmtree(parked, ignore_errors=True)  # what is left is removed at the next start
        return tombstone

    def rewrite(self, user: str, events: list[CaptureEvent], purged: set[str], through: int, generation: int) -> bool:
        """Derived state first (a crash before the log is replaced leaves the expired turns in it, purged again at
        the next look; never records or history of turns the log no longer holds), then the log, atomically."""
        if self.generation(user) != generation:
            return False
        events = [*events, *self.events(user, since=through)]
        if not turns_in(events):
            self.erase(user)
            return True
        folder = self._dir(user)
        (folder / "organised.json").unlink(missing_ok=True)
        for derived in ("records", ".git", "derived"):
            shutil.rmtree(folder / derived, ignore_errors=True)
        self._drop_recalls(folder, purged)
        self._git(folder, "init", "-q")
        atomic_write_text(folder / "capture.jsonl", "".join(e.to_json() + "\n" for e in events))
        self._advance(user)
        return True

    def erase_turn(self, user: str, turn: str) -> TurnErased:
        """Note the erasure in the user's folder (ids only), then carry it out (:meth:`_finish_turn_erasure`); a crash
        between is finished when the store is next opened."""
        folder = self._dir(user)
        held = next((t for t in turns_in(self.events(user)) if t.id == turn), None)
        if held is None:
            raise UnknownTurn(user, turn)
        erased = TurnErased(turn=turn, session=held.session, erased_at=now_iso(),
                            organised=held.session in self.organised(user))
        atomic_write_json(folder / _ERASING, erased.stored())
        self._finish_turn_erasure(user, erased)
        return erased

    def _finish_turn_erasure(self, user: str, erased: TurnErased) -> None:
        """Every step, each idempotent: the Git history rewritten without the turn's words and pruned, the current
        records likewise (the session's records and rollup removed, to be organised again), the capture log without
        the turn, the session no longer marked organised, the recalls that packed the turn dropped, the embedding
        cache dropped, the generation advanced."""
        folder = self._dir(user)
        session_dir = f"records/{_safe(erased.session)}/"
        rewrite_history(folder, lambda path: path == "records/memory.yaml" or path.startswith(session_dir),
                        lambda path, data: _without_turn(path, data, erased))
        shutil.rmtree(folder / session_dir, ignore_errors=True)
        memory = folder / "records" / "memory.yaml"
        if memory.is_file():
            atomic_write_bytes(memory, _without_turn("records/memory.yaml", memory.read_bytes(), erased))
        if self._git(folder, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode == 0:
            self._git(folder, "reset", "-q")
            self._git(folder, "add", "-A", "records")
            if self._git(folder, "diff", "--cached", "--quiet", check=False).returncode != 0:
                self._git(folder, "commit", "-q", "-m", f"erase a turn of session {erased.session}: its record, "
                                                        "rollup and facts removed, history rewritten")
            prune(folder)
        log = folder / "capture.jsonl"
        events = self._read_events(log) if log.exists() else []
        kept = without_turn(events, erased.turn)
        if kept != events:
            atomic_write_text(log, "".join(e.to_json() + "\n" for e in kept))
        atomic_write_json(folder / "organised.json", sorted(self.organised(user) - {erased.session}))
        self._drop_recalls(folder, {erased.turn})
        shutil.rmtree(folder / "derived" / "embeddings", ignore_errors=True)  # vectors of texts holding its words
        self._advance(user)
        (folder / _ERASING).unlink(missing_ok=True)

    # ---------------------------------------------------------------- how users are named

    def naming(self) -> Naming | None:
        """How the store names users: as recorded, else unkeyed if it holds any name, else ``None`` (a new store)."""
        path = self.root / _NAMING
        raw = read_json(path, None)
        if raw is not None:
            return load_record(Naming, raw, str(path))
        audit = self.root / AUDIT_FILE
        held = any(any((self.root / sub).iterdir()) for sub in _NAMED) or (audit.exists() and audit.stat().st_size)
        return LEGACY if held else None

    def set_naming(self, naming: Naming) -> None:
        atomic_write_json(self.root / _NAMING, naming.stored())

    def rekey(self, names: Pseudonyms, audit_lines: list[str]) -> int:
        """Name users under ``names`` (from unkeyed sha256): the tombstones and generations renamed, the audit
        replaced by ``audit_lines``; staged, committed by ``naming.json``, then moved in place. Names renamed."""
        stage = self.root / _REKEY
        shutil.rmtree(stage, ignore_errors=True)
        renamed = 0
        for sub in _NAMED:
            ensure_dir(stage / sub)
            for path in sorted((self.root / sub).glob("*.json")):
                name, raw = names.keyed(path.stem), read_json(path)
                if sub == "tombstones":
                    raw = load_record(Tombstone, raw, str(path)).model_copy(update={"user_sha256": name}).stored()
                atomic_write_json(stage / sub / f"{name}.json", raw)
                renamed += 1
        atomic_write_text(stage / AUDIT_FILE, "".join(line + "\n" for line in audit_lines))
        crash_point("serve.rekey.before_commit")
        self.set_naming(names.naming)
        self.names = names
        crash_point("serve.rekey.after_commit")
        self._finish_rekey()
        return renamed

    def _finish_rekey(self) -> None:
        """Move a committed re-keying's staged files in place (or drop an uncommitted one's)."""
        stage = self.root / _REKEY
        if not stage.is_dir():
            return
        if read_json(self.root / _NAMING, None) is None:  # not committed: the store is as it was
            shutil.rmtree(stage)
            return
        for sub in _NAMED:
            new, old = stage / sub, stage / f"old-{sub}"
            if new.is_dir():
                if (self.root / sub).is_dir() and not old.exists():
                    os.replace(self.root / sub, old)
                os.replace(new, self.root / sub)
        if (stage / AUDIT_FILE).exists():
            os.replace(stage / AUDIT_FILE, self.root / AUDIT_FILE)
        shutil.rmtree(stage)

    def _tombstone_path(self, user: str) -> Path:
        return self.root / "tombstones" / f"{self._user_key(user)}.json"

    def tombstone(self, user: str) -> Tombstone | None:
        path = self._tombstone_path(user)
        raw = read_json(path, None)
        return None if raw is None else load_record(Tombstone, raw, str(path))

    def verify(self, user: str) -> list[str]:
        folder = self._dir(user)
        problems: list[str] = []
        try:
            events = self._read_events(folder / "capture.jsonl")
        except (StoreError, RecordError) as exc:
            return [str(exc)]
        texts = {t.id: t.text for t in turns_in(events)}
        for session in sorted(self.organised(user)):
            records = sorted((folder / "records" / _safe(session)).glob("[0-9]*.md"))
            if not records:
                problems.append(f"session {session} is marked organised but has no records")
            for path in records:
                try:
                    raw, body = read_record(path)
                    meta = load_record(TurnMeta, raw, str(path))
                except (StoreError, RecordError, yaml.YAMLError, UnicodeDecodeError) as exc:
                    problems.append(f"{path}: unreadable record ({exc})")
                    continue
                if not meta.holds(body, texts.get(meta.id)):
                    problems.append(f"{path}: does not match turn {meta.id!r} of the capture log")
        dirty = self._git(folder, "status", "--porcelain", "records", check=False).stdout.strip()
        if dirty and self.organised(user):
            problems.append(f"{folder}/records has uncommitted changes: {dirty.splitlines()[0]}")
        problems += [f"{p}: temp file of an interrupted write" for p in folder.rglob(".*.tmp")]
        return problems

    def close(self) -> None:
        """Nothing is held open between calls."""
