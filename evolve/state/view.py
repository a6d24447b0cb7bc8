"""Reading a stores directory: the readers both sides share, and the read-only :class:`StoreView`.

:class:`StoreView` takes no run lock, repairs nothing and never writes, so it can be used while a run holds the
lock (workflow commands, reports). The writer, :class:`evolve.state.stores.StoreSet`, shares :class:`StoreReader`.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from evolve.state.content import ContentStore
from evolve.files import MAX_TEXT_BYTES, StoreError, iter_jsonl, read_bounded, read_json
from evolve.state.entries import JournalEntry
from evolve.state.journal import Journal, VerifyResult, journal_key
from evolve.state.layout import DOC_STORES, JSONL_STORES, StoreLayout
from evolve.state.strategy_files import strategy_from_yaml


class ReadOnlyJournal(Journal):
    """A :class:`Journal` opened for reading only: no torn-tail repair and no head parsing on open."""

    def __init__(self, path: str | Path):  # Journal.__init__ would repair a torn tail, i.e. write
        self.path = Path(path)
        self.key = journal_key()
        self.repaired_tail = b""

    def append(self, type: str, payload: dict, round: int | None = None, seq: int | None = None) -> dict:
        raise StoreError(self.path, "journal opened read-only; open a StoreSet to append")


class StoreReader:
    """Readers of the named stores and stored strategies under :attr:`layout`."""

    layout: StoreLayout
    root: Path

    def read_jsonl(self, name: str) -> list[dict]:
        if name not in JSONL_STORES:
            raise StoreError(self.root / name, f"not a JSONL store; expected one of {', '.join(JSONL_STORES)}")
        return [record for _, record in iter_jsonl(self.layout.store(name))]

    def read_doc(self, name: str, default: Any = None) -> Any:
        if name not in DOC_STORES:
            raise StoreError(self.root / name, f"not a document store; expected one of {', '.join(DOC_STORES)}")
        return read_json(self.layout.store(name), default)

    def strategy_path(self, digest: str) -> Path:
        return self.layout.strategy(digest)

    @property
    def content(self) -> ContentStore:
        """The users' words the records refer to."""
        return ContentStore(self.layout.content)

    def get_strategy(self, digest: str) -> dict:
        """A stored strategy, checked against its hash (:class:`StoreError` if missing or edited); needs no lock,
        since strategy files are written once, atomically."""
        path = self.layout.strategy(digest)
        try:
            text = read_bounded(path, MAX_TEXT_BYTES).decode("utf-8")
        except FileNotFoundError:
            raise StoreError(path, "no stored strategy with this hash") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(path, f"cannot read stored strategy: {exc}") from None
        return strategy_from_yaml(text, digest, path)


class StoreView(StoreReader):
    """Lock-free, read-only access to the stores under ``root``."""

    def __init__(self, root: str | Path):
        self.layout = StoreLayout(Path(root))
        self.root = self.layout.root
        if not self.layout.state.is_file():
            raise StoreError(self.root, "not a stores directory (no state.json): run `memevolve run` first "
                                        "or pass --stores DIR")
        self.journal = ReadOnlyJournal(self.layout.journal)

    @cached_property
    def state(self) -> dict:
        return read_json(self.layout.state)

    @cached_property
    def entries(self) -> list[JournalEntry]:
        """The journal's entries, their payloads typed, read once per view (verify with :meth:`verify_journal`)."""
        return self.journal.typed_entries()

    @property
    def harness(self) -> dict | None:
        """The harness identity (benchmark, judge, question count, schema) the stores were built on."""
        return self.state.get("harness")

    def verify_journal(self) -> VerifyResult:
        """Chain check plus the committed head recorded in ``state.json``."""
        return self.journal.verify(anchor=self.state.get("journal_head"))
