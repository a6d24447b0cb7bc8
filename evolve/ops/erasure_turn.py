"""``memevolve erase --turn USER:ID``: one turn's words carried out of every copy the optimizer made, as a user's are
(:mod:`evolve.ops.erasure` runs the steps; this module finds the turn and says what holds it).

The turn is found in the exports (:mod:`evolve.ops.manifest`): in the sample the manifest gives its user, the turn
whose ``dia_id`` is its id. Its words are its text and its image caption (``blip_caption``), if any. A turn the
exports no longer hold but a manifest lists as erased is done: nothing is looked for, nothing changes.

**What quotes the turn.** Texts are compared normalised: case-folded, each run of characters other than letters and
digits one space, so punctuation, case and line breaks do not matter. The turn's *quotes* are its sentences (split
after ``.``, ``!``, ``?`` or ``;``, or at a line break), its whole text and its caption, each kept only if it has at
least :data:`MIN_WORDS` words and no other turn of the exports holds it. A text quotes the turn when it holds one of
the quotes as whole words. So "Thanks!" or "I'm so happy for you!" said in other turns too quotes nothing, and a text
sharing words with the turn but not one of its quotes is not reached.

Besides quotes, the structure of a copy says whether it holds the turn (within the turn's conversation only):

- the export: the turn leaves its session (an emptied session goes with it); a question (``qa``, ``unanswered``) goes
  when its evidence cites the turn or its question or answer quotes it: these are the *removed questions*;
- candidate examples (side files, inline rows): a row of the conversation asking a removed question, and any row a
  word field of which quotes the turn, is erased;
- tracked artifacts: a JSON line of the conversation citing the turn (gold evidence, an item's ``source_ids``) or
  asking a removed question, and any line quoting the turn, is dropped; an artifact still quoting it is deleted;
- caches: an LLM reply quoting the turn, and one made for the conversation holding the turn's text (whatever its
  length) or a removed question, is deleted; the conversation's ingested stores and embedding shards are dropped, to
  be built again without the turn.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from evolve.errors import UserError
from evolve.ops.erasure_reach import speaks_of
from evolve.ops.manifest import ExportManifest, turn_sha256, user_sha256
from evolve.runtime.subject import subject_key
from evolve.state.content import WORDS, conversation_of

#: Fewest words a sentence (or a whole text) of the turn needs to be looked for as a quote of it.
MIN_WORDS = 5
#: Keys whose lists of turn ids cite a turn: a question's evidence, a trace's gold evidence, a memory item's sources.
CITING = ("evidence", "outdated_evidence", "gold_evidence", "known_evidence", "source_ids")
_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")


def normalised(text: str) -> str:
    """``text`` case-folded, its letters and digits kept as words one space apart."""
    return " ".join(_WORD.findall(text.casefold()))


def holds(text: str, phrase: str) -> bool:
    """Whether normalised ``text`` holds the normalised ``phrase`` as whole words."""
    return bool(phrase) and f" {phrase} " in f" {text} "


def strings(data: Any) -> Iterator[str]:
    """Every string value in parsed JSON ``data``."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from strings(value)
    elif isinstance(data, list):
        for value in data:
            yield from strings(value)


def cites(data: Any, turn: str) -> bool:
    """Whether parsed JSON ``data`` lists ``turn`` under one of the :data:`CITING` keys, at any depth."""
    if isinstance(data, list):
        return any(cites(value, turn) for value in data)
    if not isinstance(data, dict):
        return False
    for key, value in data.items():
        if key in CITING and isinstance(value, list) and \
                any(turn in re.split(r"[\s,;]+", str(v)) for v in value if isinstance(v, str)):
            return True
        if isinstance(value, (dict, list)) and cites(value, turn):
            return True
    return False


def sessions(sample: dict) -> Iterator[tuple[str, list]]:
    """A LoCoMo sample's sessions: (key, turns)."""
    conversation = sample.get("conversation") or {}
    for key, value in conversation.items():
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list):
            yield key, value


def turn_words(turn: dict) -> list[str]:
    """What a LoCoMo turn says: its text and its image caption."""
    return [str(turn[k]) for k in ("text", "blip_caption") if turn.get(k) not in (None, "")]


def parse_turn(text: str) -> tuple[str, str]:
    """``USER:ID`` as (user, turn id); :class:`UserError` saying what is wrong otherwise."""
    user, sep, turn = text.partition(":")
    if not sep or not user.strip() or not turn.strip():
        raise UserError(f"--turn {text!r}: not USER:ID (the user id, a colon, the turn id, e.g. ann:D1:3)")
    if "/" in user or "\\" in user or ".." in user:
        raise UserError(f"--turn {text!r}: {user!r} is not a user id (a user id names no path)")
    return user, turn


def exported_turns(named: list[tuple[str, str]], manifests: dict[Path, ExportManifest],
                   name_of: Callable[[str], str]) -> list[tuple[str, str]]:
    """Of the turns ``named`` (user's name, turn id; the service's records name a user by ``name_of`` its id), those
    of a user the manifests list whose export holds the turn or erased it before: (user id, turn id)."""
    users = {name_of(u.user): u.user for m in manifests.values() for u in m.users}
    out = []
    for name, turn in dict.fromkeys(named):
        user = users.get(name)
        if user is None:
            continue
        if any(turn in u.turns for m in manifests.values() for u in m.users if u.user == user) or \
                any(e.turn_sha256 == turn_sha256(user, turn) for m in manifests.values() for e in m.erased_turns):
            out.append((user, turn))
    return out


@dataclass
class FoundTurn:
    """A turn to erase, as the exports hold it."""

    user: str
    turn: str
    #: The sample ids the exports give its user.
    conversations: set[str]
    words: list[str]
    quotes: set[str] = field(default_factory=set)
    #: The removed questions (normalised).
    questions: set[str] = field(default_factory=set)

    @property
    def subjects(self) -> set[str]:
        return {subject_key(c) for c in self.conversations}

    @property
    def sha256(self) -> str:
        return turn_sha256(self.user, self.turn)

    def whole(self) -> set[str]:
        """The turn's words normalised, whatever their length."""
        return {n for n in map(normalised, self.words) if n}

    def gone(self, question: dict) -> bool:
        """Whether a question (``qa`` or ``unanswered`` item) leaves the export with the turn."""
        said = [normalised(str(question.get(k) or "")) for k in ("question", "answer")]
        return cites(question, self.turn) or any(holds(s, q) for s in said for q in self.quotes)


def _phrases(text: str) -> set[str]:
    parts = [normalised(s) for s in _SENTENCE_END.split(text)] + [normalised(text)]
    return {p for p in parts if len(p.split()) >= MIN_WORDS}


def find_turns(refs: list[tuple[str, str]], manifests: dict[Path, ExportManifest],
               samples: dict[Path, list[dict]]) -> tuple[list[FoundTurn], int]:
    """The turns ``refs`` names as the exports hold them, their quotes and removed questions set, and how many the
    manifests list as erased already; :class:`UserError` naming the user or turn and the manifests when one is in no
    export."""
    found: dict[tuple[str, str], FoundTurn] = {}
    done = 0
    for user, turn in dict.fromkeys(refs):
        listed = [(path, u) for path, m in manifests.items() for u in m.users if u.user == user]
        if not listed:
            if any(e.user_sha256 == user_sha256(user) for m in manifests.values() for e in m.erased):
                done += 1
                continue
            raise UserError(f"--turn {user}:{turn}: user {user!r} is in none of the exports "
                            f"({', '.join(map(str, manifests))})")
        for path, u in listed:
            sample = next((s for s in samples[path] if s.get("sample_id") == u.sample_id), {})
            for _, turns in sessions(sample):
                for t in turns:
                    if isinstance(t, dict) and t.get("dia_id") == turn:
                        held = found.setdefault((user, turn), FoundTurn(user, turn, set(), []))
                        held.conversations.add(u.sample_id)
                        held.words += [w for w in turn_words(t) if w not in held.words]
        if (user, turn) in found:
            continue
        if any(e.turn_sha256 == turn_sha256(user, turn) for m in manifests.values() for e in m.erased_turns):
            done += 1
            continue
        path, u = listed[0]
        shown = ", ".join(u.turns[:6]) + (", …" if len(u.turns) > 6 else "")
        raise UserError(f"--turn {user}:{turn}: user {user!r} has no turn {turn!r} in the export of {path} (its turns "
                        f"there: {shown or 'none'})")
    turns = list(found.values())
    _quote(turns, samples)
    return turns, done


def _quote(turns: list[FoundTurn], samples: dict[Path, list[dict]]) -> None:
    """Set each turn's quotes (its phrases no other turn of the exports holds) and removed questions."""
    erased = {(c, t.turn) for t in turns for c in t.conversations}
    others = [normalised(w) for rows in samples.values() for s in rows for _, members in sessions(s)
              for t in members if isinstance(t, dict) and (s.get("sample_id"), t.get("dia_id")) not in erased
              for w in turn_words(t)]
    for t in turns:
        t.quotes = {p for w in t.words for p in _phrases(w) if not any(holds(o, p) for o in others)}
        t.questions = {normalised(str(q.get("question") or "")) for rows in samples.values() for s in rows
                       if s.get("sample_id") in t.conversations for q in questions(s) if t.gone(q)} - {""}


def questions(sample: dict) -> list[dict]:
    """A sample's questions: answered (``qa``) and not (``unanswered``)."""
    return [q for key in ("qa", "unanswered") for q in sample.get(key) or [] if isinstance(q, dict)]


def without_turns(sample: dict, turns: list[FoundTurn]) -> tuple[dict, list[FoundTurn], int]:
    """``sample`` without ``turns`` (those of its conversation), an emptied session and the questions that go with
    them; the turns removed and the number of questions removed."""
    mine = [t for t in turns if sample.get("sample_id") in t.conversations]
    ids = {t.turn for t in mine}
    conversation = dict(sample.get("conversation") or {})
    removed: set[str] = set()
    for key, members in list(sessions(sample)):
        kept = [t for t in members if not (isinstance(t, dict) and t.get("dia_id") in ids)]
        removed |= {t.get("dia_id") for t in members if isinstance(t, dict) and t.get("dia_id") in ids}
        if kept:
            conversation[key] = kept
        else:
            conversation.pop(key)
            conversation.pop(f"{key}_date_time", None)
    out = {**sample, "conversation": conversation}
    dropped = 0
    for key in ("qa", "unanswered"):
        if isinstance(sample.get(key), list):
            out[key] = [q for q in sample[key] if not (isinstance(q, dict) and any(t.gone(q) for t in mine))]
            dropped += len(sample[key]) - len(out[key])
    return out, [t for t in mine if t.turn in removed], dropped


class TurnReach:
    """Every copy of the words of ``turns`` (see the module for the rule)."""

    def __init__(self, turns: list[FoundTurn]):
        self.turns = turns
        self.subjects = set().union(*(t.subjects for t in turns)) if turns else set()
        self.side_subjects = None
        self.quotes = set().union(*(t.quotes for t in turns)) if turns else set()

    def _quotes(self, text: str) -> bool:
        said = normalised(text)
        return any(holds(said, q) for q in self.quotes)

    def _asks(self, subject: str, question: object) -> bool:
        asked = normalised(str(question or ""))
        return bool(asked) and any(subject in t.subjects and asked in t.questions for t in self.turns)

    def cache_entry(self, subject: str | None, said: str) -> bool:
        text = normalised(said)
        return any(holds(text, q) for q in self.quotes) or any(
            subject in t.subjects and any(holds(text, p) for p in t.whole() | t.questions) for t in self.turns)

    def side_file(self, subject: str, words: dict[str, Any]) -> bool:
        return self._asks(subject, words.get("question")) or \
            any(self._quotes(str(v)) for v in words.values() if v not in (None, ""))

    def row(self, row: dict) -> bool:
        return self.side_file(subject_key(conversation_of(row)), {k: row.get(k) for k in WORDS})

    def line(self, row: object) -> bool:
        if speaks_of(row):
            conversation = conversation_of(row)
            if any(conversation in t.conversations and (cites(row, t.turn) or
                                                        normalised(str(row.get("question") or "")) in t.questions)
                   for t in self.turns):
                return True
        return any(self._quotes(s) for s in strings(row))

    def quoted(self, text: str) -> bool:
        return any(self._quotes(s) for s in _plain(text))


def _plain(text: str) -> Iterator[str]:
    """The strings of an artifact's text: of its JSON, or of each JSON line, escapes decoded; else the text."""
    try:
        yield from strings(json.loads(text))
        return
    except json.JSONDecodeError:
        pass
    for line in text.splitlines():
        try:
            yield from strings(json.loads(line))
        except json.JSONDecodeError:
            yield line
