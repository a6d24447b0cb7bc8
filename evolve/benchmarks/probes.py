"""Probe questions: label-free questions generated from a conversation itself, deterministically and without an LLM.

Each generator reads the turns (speaker, text, session date) and writes questions with their answer and evidence
turn ids, so a benchmark can be built from conversations that carry no gold questions:

* ``attribute`` — a stated fact about the speaker ("my favorite book is X", "my dog Max", "I'm from X"):
  *What is Caroline's favorite book?* → X;
* ``when`` — a first-person event with a relative time ("I went to a support group yesterday"), answered with the
  date resolved against the session date: *When was it that Caroline went to a support group?* → 7 May 2023;
* ``who`` — the same kind of first-person event, asking who did it: *Who went to a support group?* → Caroline
  (kept only when the other speakers' turns, taken together, do not hold all its content words);
* ``cloze`` — a sentence with a word said in no other turn, blanked: *Fill in the blank in what Melanie said:
  "… I painted that lake ___ last year …"* → sunrise;
* ``link`` — a name brought up in two sessions: *Sweden came up again on 27 June 2023. On what date was Sweden
  first mentioned?* → the first session's date (evidence: both turns);
* ``multi_hop`` — two facts chained: an event or cloze sentence naming someone the speaker introduced elsewhere
  ("my dog Max"), with the name replaced by the relation (*… took Melanie's dog to the beach*), evidence: both
  turns;
* ``llm`` — with a question-generation role configured (:mod:`evolve.llm.questions`), questions an LLM writes per
  session, kept when they pass the same filter.

Every probe passes :func:`probe_quality`: its answer has a content word, the question does not already hold all of
them, and they are recoverable from its evidence turns (speaker, text, session date and the dates their relative
time expressions resolve to). Question ids are ``{conversation}/p{index}``.
"""
from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from evolve.benchmarks.locomo import load_locomo
from evolve.benchmarks.types import Benchmark, BenchmarkError, Conversation, Question, Turn
from evolve.words import content_words


_NUMBER = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a couple of": 2, "couple of": 2}
_TIME = re.compile(r"\b(yesterday|last night|today|this morning|earlier today|last week(?:end)?|last month|last year|"
                   r"last (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
                   r"(\d+|a|one|two|three|four|five|six|a couple of|couple of) (day|week|month|year)s? ago)\b",
                   re.IGNORECASE)
_PAST_VERB = re.compile(r"\bI (?:just |finally |also |actually |recently |even )?((?:[a-z]+ed|went|ran|took|got|saw|"
                        r"made|met|did|gave|bought|found|began|came|left|told|heard|spent|won|wrote|drew|"
                        r"built|sang|swam|caught|flew|drove|brought|taught|held|kept|sold|rode)\b[^.!?]*)")
_CLAUSE_END = re.compile(r",|;|:| [-–—] | and (?=(?:it|it's|I|they|we|that|this|the|he|she|then)\b)| but | because "
                         r"| so | which | when | while | after | before ")
#: Words whose referent the clause alone does not give (the addressee, "this", "that"): a question built on them is
#: ambiguous.
_DEICTIC = re.compile(r"\b(?:you|your|yours|this|that|these|those|it|there)\b", re.IGNORECASE)
_CAPTION = re.compile(r"\s*\[[^\]]*\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d+")
_RELATIONS = ("dog", "cat", "puppy", "pet", "son", "daughter", "husband", "wife", "partner", "boyfriend", "girlfriend",
              "friend", "best friend", "brother", "sister", "mom", "mother", "dad", "father", "grandma", "grandmother",
              "grandpa", "grandfather", "cousin", "aunt", "uncle", "boss", "coworker", "colleague", "neighbor",
              "roommate", "mentor", "kid", "baby", "horse", "bird", "fish", "turtle", "hamster", "rabbit", "snake")
_REL = "|".join(sorted(map(re.escape, _RELATIONS), key=len, reverse=True))
_NAME = r"([A-Z][a-z]+(?: [A-Z][a-z]+)?)"
_PHRASE = r"([^.,;!?]{2,60}?)(?=[.,;!?]| and | but | because |$)"
#: ``(pattern, question template, answer group)``: ``{s}`` is the speaker, ``{1}``... the pattern's groups.
_ATTRIBUTES = (
    (re.compile(rf"\b[Mm]y (?:all-time )?(?:favorite|favourite) ([a-z]+(?: [a-z]+)?) (?:is|was|has to be|would be) "
                rf"{_PHRASE}"), "What is {s}'s favorite {1}?", 2),
    (re.compile(rf"\b[Mm]y ({_REL})(?:'s name is|,? (?:named|called)|,) {_NAME}"), "What is the name of {s}'s {1}?", 2),
    (re.compile(rf"\b[Mm]y ({_REL}) {_NAME}\b"), "What is the name of {s}'s {1}?", 2),
    (re.compile(rf"\bI (?:have|got|adopted|rescued) (?:a|an|two|three|a new) ([a-z]+(?: [a-z]+)?),? (?:named|called) "
                rf"{_NAME}"), "What is the name of {s}'s {1}?", 2),
    (re.compile(rf"\b[Mm]y ({_REL}) (?:is|turned|just turned) (\d+|[a-z]+)(?: years old| this year)"),
     "How old is {s}'s {1}?", 2),
    (re.compile(rf"\bI(?:'m| am) (?:originally )?from {_NAME}"), "Where is {s} from?", 1),
    (re.compile(rf"\bI (?:moved|came|immigrated) (?:here |over )?from {_NAME}"), "Where did {s} move from?", 1),
    (re.compile(rf"\bI work (?:as|at|for|in) {_PHRASE}"), "Where or as what does {s} work?", 1),
    (re.compile(rf"\bI(?:'ve| have) been (?:[a-z]+ing) {_PHRASE} for (\d+|[a-z]+) years"),
     "For how many years has {s} been at {1}?", 2),
)
#: Capitalised words that are not names (sentence openers, interjections, calendar words).
_NOT_NAMES = frozenset("""I I'm I've I'll I'd Hey Hi Wow Thanks Thank Yeah Yes No Oh Ok OK Okay Omg Haha Lol Sure Aww Aw
Great Good Nice Cool Awesome Amazing Congrats Congratulations Sorry Well So But And Or The A An It It's That That's
This What When Where Why How Who Mr Mrs Ms Dr God Monday Tuesday Wednesday Thursday Friday Saturday Sunday January
February March April May June July August September October November December Christmas Halloween Thanksgiving
Easter New Year Mon Tue Wed Thu Fri Sat Sun Door Mom Dad Grandma Grandpa Me You We They He She Just Also Definitely Absolutely Totally Anyway""".split())


@dataclass(frozen=True)
class Probe:
    """One generated question before it is numbered: its kind, text, answer and evidence turn ids."""

    kind: str
    question: str
    answer: str
    evidence: tuple[str, ...]


class Questioner(Protocol):
    """Writes probes about a conversation (the LLM question-generation role, :mod:`evolve.llm.questions`)."""

    def probes(self, conversation: Conversation) -> list[Probe]: ...


def format_date(day: datetime) -> str:
    """``7 May 2023``: the date style of LoCoMo's answers."""
    return f"{day.day} {day:%B} {day.year}"


def resolve_time(expression: str, said: datetime) -> str:
    """The date a relative time expression said at ``said`` refers to, in words (``yesterday`` → ``7 May 2023``,
    ``last week`` → ``the week before 9 June 2023``, ``last year`` → ``2022``)."""
    e = expression.lower()
    if e in ("yesterday", "last night"):
        return format_date(said - timedelta(days=1))
    if e in ("today", "this morning", "earlier today"):
        return format_date(said)
    if e in ("last week", "last weekend"):
        return f"the {e.split()[1]} before {format_date(said)}"
    if e == "last month":
        month = said.replace(day=1) - timedelta(days=1)
        return f"{month:%B} {month.year}"
    if e == "last year":
        return str(said.year - 1)
    if e.startswith("last "):
        return f"the {e.split()[1].capitalize()} before {format_date(said)}"
    count, unit = re.fullmatch(r"(.+) (day|week|month|year)s? ago", e).groups()
    n = int(count) if count.isdigit() else _NUMBER[count]
    if unit == "day":
        return format_date(said - timedelta(days=n))
    if unit == "year":
        return str(said.year - n)
    return f"{n} {unit}{'s' if n > 1 else ''} before {format_date(said)}"


def turn_facts(turn: Turn) -> str:
    """What a reader of ``turn`` knows: its speaker, its text, its session date and the dates its relative time
    expressions resolve to (the text a probe's answer must be recoverable from)."""
    dates = [] if turn.timestamp is None else [format_date(turn.timestamp)] + [
        resolve_time(m.group(0), turn.timestamp) for m in _TIME.finditer(turn.text)]
    return " ".join([turn.speaker, turn.text, *dates])


def probe_quality(question: str, answer: str, evidence: list[Turn]) -> str | None:
    """Why a probe is unusable, or ``None``: its answer has no content word, the question already holds all of them
    (trivial), or its evidence turns do not (not recoverable)."""
    words = content_words(answer)
    if not words:
        return "answer has no content word"
    if words <= content_words(question):
        return "answer is in the question"
    known: set[str] = set()
    for turn in evidence:
        known |= content_words(turn_facts(turn))
    if not words <= known:
        return f"answer words {sorted(words - known)} are not in the evidence turns"
    return None


def _sentences(turn: Turn) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(_CAPTION.sub("", turn.text)) if s.strip()]


def _third_person(clause: str) -> str:
    """A first-person clause told of its speaker: ``my`` → ``their``, ``me``/``myself`` → ``them``/``themselves``."""
    swaps = {"my": "their", "me": "them", "myself": "themselves", "i": "they", "i'm": "they're", "mine": "theirs",
             "we": "they", "our": "their", "us": "them"}
    return re.sub(r"\b(my|me|myself|I'm|I|mine|we|our|us)\b", lambda m: swaps[m.group(0).lower()], clause)


def _clean_clause(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[,;:\s]+$", "", text)).strip()


def _events(turn: Turn) -> list[tuple[str, re.Match | None]]:
    """First-person past events of ``turn``: the clause (time expression cut out) and the time expression's match."""
    out = []
    for sentence in _sentences(turn):
        event = _PAST_VERB.search(sentence)
        if event is None:
            continue
        clause, time = event.group(1), _TIME.search(event.group(1))
        if time is not None:  # the event is what precedes its time, unless that is a bare verb
            before = clause[:time.start()]
            clause = before if len(content_words(before)) >= 2 else before + clause[time.end():]
        clause = _clean_clause(_CLAUSE_END.split(clause)[0])
        if len(clause.split()) <= 14 and not _DEICTIC.search(clause) and len(content_words(clause)) >= 2:
            out.append((clause, time))
    return out


def _attributes(conversation: Conversation) -> list[tuple[Probe, tuple[str, str, str]]]:
    """Attribute probes with, for name facts, ``(speaker, relation, name)`` (the first hop of a chain)."""
    out = []
    for turn in conversation.turns():
        for sentence in _sentences(turn):
            for pattern, template, group in _ATTRIBUTES:
                match = pattern.search(sentence)
                if match is None:
                    continue
                answer = _clean_clause(match.group(group))
                if not 1 <= len(answer.split()) <= 6:
                    continue
                groups = {str(i): _clean_clause(g or "") for i, g in enumerate(match.groups(), 1)}
                question = re.sub(r"\{(\d)\}", lambda m: groups[m.group(1)], template.replace("{s}", turn.speaker))
                name = (turn.speaker, groups["1"], answer) if "name of" in template else ("", "", "")
                out.append((Probe("attribute", question, answer, (turn.id,)), name))
                break
    return out


def _when_who(conversation: Conversation) -> list[Probe]:
    by_speaker: dict[str, set[str]] = defaultdict(set)
    for turn in conversation.turns():
        by_speaker[turn.speaker] |= content_words(turn.text)
    out = []
    for turn in conversation.turns():
        for clause, time in _events(turn):
            told = _third_person(clause)
            if time is not None and turn.timestamp is not None:
                out.append(Probe("when", f"When was it that {turn.speaker} {told}?",
                                 resolve_time(time.group(0), turn.timestamp), (turn.id,)))
            words = content_words(clause)
            others = [s for s in by_speaker if s != turn.speaker and words <= by_speaker[s]]
            if len(words) >= 3 and not others and turn.speaker.lower() not in clause.lower():
                out.append(Probe("who", f"Who {told}?", turn.speaker, (turn.id,)))
    return out


def _word_turns(conversation: Conversation) -> dict[str, set[str]]:
    """Content word -> ids of the turns saying it."""
    seen: dict[str, set[str]] = defaultdict(set)
    for turn in conversation.turns():
        for word in content_words(_CAPTION.sub("", turn.text)):
            seen[word].add(turn.id)
    return seen


def _clozes(conversation: Conversation, rng: random.Random, per_session: int) -> list[Probe]:
    seen, names = _word_turns(conversation), {s.lower() for s in conversation.speakers}
    out = []
    for session in conversation.sessions:
        options = []
        for turn in session.turns:
            for sentence in _sentences(turn):
                tokens = _WORD.findall(sentence)
                for i, token in enumerate(tokens):
                    word = content_words(token)
                    if (len(word) == 1 and len(token) >= 5 and token.lower() not in names
                            and seen.get(next(iter(word)), set()) == {turn.id}):
                        left, right = tokens[max(0, i - 7):i], tokens[i + 1:i + 8]
                        if len(content_words(" ".join([*left, *right]))) < 4:
                            continue
                        options.append(Probe("cloze", f"Fill in the blank in what {turn.speaker} said: "
                                                      f"\"... {' '.join([*left, '___', *right])} ...\"",
                                             token, (turn.id,)))
        out.extend(rng.sample(options, min(per_session, len(options))))
    return out


def _names(conversation: Conversation) -> dict[str, list[Turn]]:
    """Capitalised names (not a speaker, not a sentence opener or calendar word) -> the turns saying them."""
    speakers = set(conversation.speakers)
    lower = set()
    for turn in conversation.turns():
        lower |= set(re.findall(r"\b[a-z]+\b", turn.text))
    found: dict[str, list[Turn]] = defaultdict(list)
    for turn in conversation.turns():
        for sentence in _sentences(turn):
            tokens = sentence.split()
            for token in tokens[1:]:
                name = token.strip(".,!?;:\"'()").removesuffix("'s").removesuffix("’s")
                if (re.fullmatch(r"[A-Z][a-z]{2,}", name) and name not in _NOT_NAMES and name.lower() not in lower
                        and not any(s.startswith(name) for s in speakers) and turn not in found[name]):
                    found[name].append(turn)
    return found


def _links(conversation: Conversation) -> list[Probe]:
    out = []
    for name, turns in _names(conversation).items():
        sessions = {t.session_id: t for t in reversed(turns)}  # each session's first mention
        if len(sessions) < 2:
            continue
        first, later = turns[0], next(t for t in turns if t.session_id != turns[0].session_id)
        if first.timestamp is None or later.timestamp is None:
            continue
        out.append(Probe("link", f"{name} came up again on {format_date(later.timestamp)}. On what date was {name} "
                                 f"first mentioned?", format_date(first.timestamp), (first.id, later.id)))
    return out


def _chains(conversation: Conversation, facts: list[tuple[Probe, tuple[str, str, str]]],
            singles: list[Probe]) -> list[Probe]:
    """Multi-hop probes: a ``when`` or ``cloze`` probe whose question names someone a name fact introduced, with
    the name replaced by the relation (``their dog`` when the same speaker says both); evidence: the fact's turn,
    then the probe's."""
    speaker_of = {t.id: t.speaker for t in conversation.turns()}
    out = []
    for fact, (speaker, relation, name) in facts:
        if not name:
            continue
        for probe in singles:
            if probe.kind in ("when", "cloze") and probe.evidence[0] != fact.evidence[0] and \
                    re.search(rf"\b{re.escape(name)}\b", probe.question):
                owner = "their" if speaker_of[probe.evidence[0]] == speaker else f"{speaker}'s"
                question = re.sub(rf"\b{re.escape(name)}\b", f"{owner} {relation}", probe.question)
                out.append(Probe("multi_hop", question, probe.answer, fact.evidence + probe.evidence))
    return out


def conversation_probes(conversation: Conversation, cloze_per_session: int = 2, seed: int = 0) -> list[Probe]:
    """The usable probes of one conversation (:func:`probe_quality`), one per distinct question, in generator order.
    ``cloze_per_session`` cloze probes are drawn per session with a generator seeded by ``seed``."""
    rng = random.Random(f"{seed}:{conversation.id}")
    facts = _attributes(conversation)
    singles = [p for p, _ in facts] + _when_who(conversation) + _clozes(conversation, rng, cloze_per_session)
    candidates = singles + _links(conversation) + _chains(conversation, facts, singles)
    turns = {t.id: t for t in conversation.turns()}
    out, asked = [], set()
    for probe in candidates:
        if probe.question in asked or probe_quality(probe.question, probe.answer,
                                                    [turns[e] for e in probe.evidence]) is not None:
            continue
        asked.add(probe.question)
        out.append(probe)
    return out


def probe_questions(bench: Benchmark, cloze_per_session: int = 2, seed: int = 0,
                    questioner: Questioner | None = None) -> list[Question]:
    """Probe questions for every conversation of ``bench``, asked after its last session; with a ``questioner``,
    its questions follow the deterministic ones (those asking a question already asked are left out)."""
    out = []
    for cid, conversation in bench.conversations.items():
        stamps = [s.timestamp for s in conversation.sessions if s.timestamp is not None]
        probes = conversation_probes(conversation, cloze_per_session, seed)
        if questioner is not None:
            asked = {p.question for p in probes}
            probes += [p for p in questioner.probes(conversation) if p.question not in asked]
        for i, probe in enumerate(probes):
            out.append(Question(f"{cid}/p{i}", cid, probe.question, probe.answer, f"probe_{probe.kind}",
                                probe.evidence, asked_at=max(stamps) if stamps else None))
    return out


def probe_benchmark(bench: Benchmark) -> Benchmark:
    """``bench``'s conversations with probe questions in place of its own (``probes:PATH``)."""
    questions = probe_questions(bench)
    if not questions:
        raise BenchmarkError(f"{bench.name}: no probe question could be generated from its conversations")
    return Benchmark(f"probes:{bench.name.partition(':')[2]}", bench.conversations, questions, list(bench.warnings))


def augment(bench: Benchmark, questioner: Questioner | None = None) -> Benchmark:
    """``bench`` with the probe questions of its conversations after its own labelled questions (``augment:
    probes``)."""
    return Benchmark(f"{bench.name}+probes", bench.conversations,
                     [*bench.questions, *probe_questions(bench, questioner=questioner)], list(bench.warnings))


def load_probes(path: Path) -> Benchmark:
    """The probe benchmark of a LoCoMo-format file's conversations (its labelled questions are not used)."""
    return probe_benchmark(load_locomo(path))
