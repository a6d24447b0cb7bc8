"""Probe questions: label-free questions generated from a conversation itself, deterministically and without an LLM.

Each generator reads the turns (speaker, text, photo caption, session date) and writes questions with their answer
and evidence turn ids, so a benchmark can be built from conversations that carry no gold questions. They are asked
the way users ask (:mod:`evolve.benchmarks.probe_kinds`: ``paraphrase``, ``temporal``, ``aggregation``, ``image``,
``inference``), plus:

* ``attribute`` — a stated fact about the speaker ("my favorite book is X", "my dog Max", "I'm from X"):
  *What is Caroline's favorite book?* → X;
* ``link`` — a name brought up in two sessions: *Sweden came up again on 27 June 2023. On what date was Sweden
  first mentioned?* → the first session's date (evidence: both turns);
* ``multi_hop`` — two facts chained: a question naming someone or something a fact introduced elsewhere ("my dog
  Max", "I moved from Sweden"), with the name replaced by that fact (*... took Melanie's dog to the beach*),
  evidence: both turns;
* ``photo_count``, ``photo_name`` — under ``gallery`` (:class:`~evolve.benchmarks.probe_mix.ProbeSettings`), how
  many photos of a kind a speaker shared and the names given to their subjects, as a gallery (the reference image
  knowledge base) files the photos (:mod:`evolve.benchmarks.probe_photos`);
* ``llm`` — with a question-generation role configured (:mod:`evolve.llm.questions`), questions an LLM writes per
  session, kept when they pass the same filter.

Every probe passes :func:`probe_quality`; a conversation then keeps those :func:`~evolve.benchmarks.probe_mix.select`
chooses (the difficulty filter and the category mix of :class:`~evolve.benchmarks.probe_mix.ProbeSettings`).
Question ids are ``{conversation}/p{index}``; categories ``probe_{kind}``.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from evolve.benchmarks.locomo import load_locomo
from evolve.benchmarks.probe_base import (Probe, Questioner, clean_clause, format_date, probe_quality, resolve_time,
                                          sentences, turn_facts)
from evolve.benchmarks.probe_kinds import images, inferences, paraphrases, temporal
from evolve.benchmarks.probe_lists import aggregations, name_facts, topic_lists
from evolve.benchmarks.probe_mix import ProbeSettings, select
from evolve.benchmarks.probe_photos import Gallery, gallery_probes
from evolve.benchmarks.probe_time import LifecycleEvent, Timeline, event_probes, place
from evolve.benchmarks.types import Benchmark, BenchmarkError, Conversation, Question, Turn

__all__ = ["Gallery", "Probe", "ProbeSettings", "Questioner", "Timeline", "augment", "conversation_probes",
           "format_date", "load_probes", "probe_benchmark", "probe_quality", "probe_questions", "resolve_time",
           "turn_facts"]

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
#: How a chained question names what a fact introduced, per attribute question (``{s}`` speaker, ``{1}`` group 1).
_DESCRIPTIONS = {"What is the name of {s}'s {1}?": "{s}'s {1}", "Where is {s} from?": "{s}'s home country",
                 "Where did {s} move from?": "the place {s} moved from", "What is {s}'s favorite {1}?":
                 "{s}'s favorite {1}"}
#: Capitalised words that are not names (sentence openers, interjections, calendar words).
_NOT_NAMES = frozenset("""I I'm I've I'll I'd Hey Hi Wow Thanks Thank Yeah Yes No Oh Ok OK Okay Omg Haha Lol Sure Aww Aw
Great Good Nice Cool Awesome Amazing Congrats Congratulations Sorry Well So But And Or The A An It It's That That's
This What When Where Why How Who Mr Mrs Ms Dr God Monday Tuesday Wednesday Thursday Friday Saturday Sunday January
February March April May June July August September October November December Christmas Halloween Thanksgiving
Easter New Year Mon Tue Wed Thu Fri Sat Sun Door Mom Dad Grandma Grandpa Me You We They He She Just Also Definitely Absolutely Totally Anyway""".split())


def _attributes(conversation: Conversation) -> list[tuple[Probe, str]]:
    """Attribute probes, each with how a chained question names its answer (``Melanie's dog``; ``""`` if it
    cannot)."""
    out = []
    for turn in conversation.turns():
        for sentence in sentences(turn):
            for pattern, template, group in _ATTRIBUTES:
                match = pattern.search(sentence)
                if match is None:
                    continue
                answer = clean_clause(match.group(group))
                if not 1 <= len(answer.split()) <= 6:
                    continue
                groups = {str(i): clean_clause(g or "") for i, g in enumerate(match.groups(), 1)}

                def fill(text: str) -> str:
                    return re.sub(r"\{(\d)\}", lambda m: groups[m.group(1)], text.replace("{s}", turn.speaker))

                description = fill(_DESCRIPTIONS[template]) if template in _DESCRIPTIONS else ""
                out.append((Probe("attribute", fill(template), answer, (turn.id,)), description))
                break
    return out


def _names(conversation: Conversation) -> dict[str, list[Turn]]:
    """Capitalised names (not a speaker, not a sentence opener or calendar word) -> the turns saying them."""
    speakers = set(conversation.speakers)
    lower = set()
    for turn in conversation.turns():
        lower |= set(re.findall(r"\b[a-z]+\b", turn.text))
    found: dict[str, list[Turn]] = defaultdict(list)
    for turn in conversation.turns():
        for sentence in sentences(turn):
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


def _chains(conversation: Conversation, facts: list[tuple[str, str, str]], singles: list[Probe]) -> list[Probe]:
    """Multi-hop probes: a probe of a later turn whose question names what an earlier fact named (``facts``:
    ``(name, turn id, description)``), with the name replaced by the fact (``Melanie's dog``, ``the place Caroline
    moved from``; ``their dog`` when the same speaker says both); evidence: the fact's turn, then the probe's."""
    order = {t.id: i for i, t in enumerate(conversation.turns())}
    speaker_of = {t.id: t.speaker for t in conversation.turns()}
    out = []
    for name, fact_turn, description in facts:
        speaker = speaker_of[fact_turn]
        for probe in singles:
            if probe.kind in ("attribute", "link") or order[probe.evidence[0]] <= order[fact_turn] or \
                    not re.search(rf"\b{re.escape(name)}\b", probe.question, re.IGNORECASE):
                continue
            named = description.replace(f"{speaker}'s ", "their ") if speaker_of[probe.evidence[0]] == speaker \
                and description.startswith(f"{speaker}'s ") else description
            question = re.sub(rf"\b{re.escape(name)}\b", named, probe.question, flags=re.IGNORECASE)
            out.append(Probe("multi_hop", question, probe.answer, (fact_turn, *probe.evidence)))
    return out


def candidates(conversation: Conversation, gallery: Gallery | None = None) -> list[Probe]:
    """Every usable probe the generators write about ``conversation`` (:func:`probe_quality`), one per distinct
    question, in generator order; with a ``gallery``, its photo probes last (checked as they are written)."""
    facts = _attributes(conversation)
    names = frozenset(w.lower() for s in conversation.speakers for w in s.split())
    singles = ([p for p, _ in facts] + paraphrases(conversation, names) + images(conversation)
               + temporal(conversation) + inferences(conversation))
    named = [(p.answer, p.evidence[0], d) for p, d in facts if d and re.fullmatch(r"[A-Z][\w' -]*", p.answer)]
    named += name_facts(conversation)
    found = (singles + aggregations(conversation) + topic_lists(conversation) + _links(conversation)
             + _chains(conversation, named, singles))
    turns = {t.id: t for t in conversation.turns()}
    out, asked = [], set()
    for probe in found:
        if probe.question in asked or probe_quality(probe.question, probe.answer,
                                                    [turns[e] for e in probe.evidence]) is not None:
            continue
        asked.add(probe.question)
        out.append(probe)
    for probe in gallery_probes(conversation, gallery) if gallery is not None else ():
        if probe.question not in asked:
            asked.add(probe.question)
            out.append(probe)
    return out


def _usable(conversation: Conversation, probes: list[Probe]) -> list[Probe]:
    turns = {t.id: t for t in conversation.turns()}
    return [p for p in probes if probe_quality(p.question, p.answer, [turns[e] for e in p.evidence]) is None]


def _kept(conversation: Conversation, settings: ProbeSettings, events: list[LifecycleEvent] | None,
          gallery: Gallery | None) -> list[Probe]:
    """:func:`conversation_probes` with the timeline's ``events`` read already (``None``: no timeline)."""
    chosen = select(conversation, candidates(conversation, gallery if settings.gallery else None), settings)
    if events is None:
        return chosen
    return place(conversation, chosen, events, settings.asked) + place(
        conversation, _usable(conversation, event_probes(conversation, events)), events, settings.asked)


def conversation_probes(conversation: Conversation, settings: ProbeSettings = ProbeSettings(),
                        timeline: Timeline | None = None, gallery: Gallery | None = None) -> list[Probe]:
    """The probes ``conversation`` keeps: its :func:`candidates` as :func:`~evolve.benchmarks.probe_mix.select`
    chooses them under ``settings``. With a ``timeline``, each chosen one is asked at a session's time at which its
    answer holds (:func:`~evolve.benchmarks.probe_time.place`; those stale at every one are left out) and the probes
    of its lifecycle events follow (:func:`~evolve.benchmarks.probe_time.event_probes`, every usable one kept).
    ``gallery`` files the photos the ``gallery`` setting asks about."""
    return _kept(conversation, settings, None if timeline is None else timeline.events(conversation), gallery)


def probe_questions(bench: Benchmark, settings: ProbeSettings = ProbeSettings(),
                    questioner: Questioner | None = None, timeline: Timeline | None = None,
                    gallery: Gallery | None = None) -> list[Question]:
    """Probe questions for every conversation of ``bench``, asked after its last session or, with a ``timeline``,
    at the session :func:`conversation_probes` gives each; with a ``questioner``, its questions follow the
    deterministic ones (those asking a question already asked are left out)."""
    out = []
    for cid, conversation in bench.conversations.items():
        stamps = [s.timestamp for s in conversation.sessions if s.timestamp is not None]
        events = None if timeline is None else timeline.events(conversation)  # one lifecycle pass per conversation
        probes = _kept(conversation, settings, events, gallery)
        if questioner is not None:
            asked = {p.question for p in probes}
            written = [p for p in questioner.probes(conversation) if p.question not in asked]
            probes += written if events is None else place(conversation, written, events, settings.asked)
        for i, probe in enumerate(probes):
            out.append(Question(f"{cid}/p{i}", cid, probe.question, probe.answer, f"probe_{probe.kind}",
                                probe.evidence, asked_at=probe.asked_at or (max(stamps) if stamps else None),
                                outdated=probe.outdated))
    return out


def probe_benchmark(bench: Benchmark, settings: ProbeSettings = ProbeSettings(),
                    questioner: Questioner | None = None, timeline: Timeline | None = None,
                    gallery: Gallery | None = None) -> Benchmark:
    """``bench``'s conversations with probe questions in place of its own (``probes:PATH``, and a run on a file
    with no labelled question)."""
    questions = probe_questions(bench, settings, questioner, timeline, gallery)
    if not questions:
        raise BenchmarkError(f"{bench.name}: no probe question could be generated from its conversations")
    return Benchmark(f"probes:{bench.name.partition(':')[2]}", bench.conversations, questions, list(bench.warnings))


def augment(bench: Benchmark, questioner: Questioner | None = None, settings: ProbeSettings = ProbeSettings(),
            timeline: Timeline | None = None, gallery: Gallery | None = None) -> Benchmark:
    """``bench`` with the probe questions of its conversations after its own labelled questions (``augment:
    probes``)."""
    return Benchmark(f"{bench.name}+probes", bench.conversations,
                     [*bench.questions, *probe_questions(bench, settings, questioner, timeline, gallery)],
                     list(bench.warnings))


def load_probes(path: Path) -> Benchmark:
    """The probe benchmark of a LoCoMo-format file's conversations (its labelled questions, if any, are not used),
    asked after the last session: a run or ``eval`` of ``probes:PATH`` asks them at their sessions with the
    reference lifecycle's timeline."""
    return probe_benchmark(load_locomo(path))
