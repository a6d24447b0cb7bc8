"""Probe generators of one turn, shaped like users' questions (:mod:`evolve.benchmarks.probes` assembles them;
:mod:`evolve.benchmarks.probe_lists` writes those of several turns):

* ``paraphrase`` — a first-person statement ("I painted a lake sunrise last year") asked of its object in other
  words: another person and tense, a synonym for common verbs, relative times resolved, or the other speaker's view
  (*What did Melanie tell Caroline they had painted in 2022?* → lake sunrise); kept only when no word pair of the
  evidence turn is repeated side by side, beyond names and the answer (:func:`verbatim_pairs`);
* ``temporal`` — every first-person event or plan said with a relative time: its date resolved against the session
  (absolute: ``7 May 2023``, ``2022``; relative to the session: ``the week before 9 June 2023``), ``N years ago``
  as said, or a duration (``How long has ...`` → ``4 years``). An event said without a time is not asked: every
  packed item carries its session's date, so its answer would test nothing but finding the turn;
* ``image`` — a shared photo: what its caption shows, asked through its turn's words, or what the turn says of the
  photo, asked through its caption;
* ``inference`` — what a stated passion suggests (*What would Jon most likely spend a free afternoon on?* →
  dancing), LoCoMo's open-domain kind.
"""
from __future__ import annotations

import re

from evolve.benchmarks.probe_base import (DEICTIC, TIME, Probe, caption, clean_clause, format_date, resolve_time,
                                          sentences, third_person, verbatim_pairs)
from evolve.benchmarks.probe_grammar import (FORM, GROUPS, LEAD, MOTION, PASSION, STATEMENT, DURATION, SYNONYMS, VAGUE,
                                             Statement, caption_phrase, clause_of, verb_form, other_speaker, rest_of,
                                             turn_counts, stable, statements, subject, tidy, verb_base, object_of)
from evolve.benchmarks.types import Conversation, Turn
from evolve.words import content_words

def _paraphrase_of(statement: Statement, other: str, context: bool) -> str | None:
    """A question asking for ``statement``'s object in other words (with the words after it when ``context``), or
    ``None`` when none fits its tense."""
    s, rest = subject(statement), rest_of(statement, context)
    synonym = SYNONYMS.get(statement.base)
    verb = synonym if synonym in FORM else statement.base
    particle = "" if verb != statement.base else statement.particle
    tail = " ".join(w for w in (particle, rest) if w)
    pick = stable(statement.turn.id, statement.obj) % 3
    if statement.base in MOTION and statement.particle in ("to", "into", "") and statement.tense != "present":
        if statement.tense == "future":
            return f"Where was {s} planning to go {rest}?"
        if statement.particle:  # went to the museum: where
            return (f"Where has {s} been {rest}?", f"Where did {s} tell {other} they had gone {rest}?",
                    f"Which place did {s} head for {rest}?")[pick]
        return f"What activity did {s} go and do {rest}?"  # went camping
    if statement.tense in ("past", "perfect"):
        part = verb_form(verb, "part")
        return (f"What has {s} {part} {tail}?", f"What did {statement.turn.speaker} tell {other} "
                f"{'their ' + statement.who if statement.who else 'they'} had {part} {tail}?",
                f"According to {other}'s friend {statement.turn.speaker}, what had {s} {part} {tail}?")[pick]
    if statement.tense == "progressive":
        return f"What has {s} been {verb_form(verb, 'ing')} {tail}?"
    if statement.tense == "present":
        return (f"What does {s} {verb_form(verb, 'base')} {tail}?", f"What did {s} tell {other} they {verb_form(verb, 'base')}"
                f" {tail}?", f"What is something {s} said they {verb_form(verb, 'base')} {tail}?")[pick]
    if statement.tense == "future":
        return f"What was {s} planning to {verb_form(verb, 'base')} {tail}?"
    return None


def paraphrases(conversation: Conversation, names: frozenset[str]) -> list[Probe]:
    """``paraphrase`` probes: statements asked of their object without a verbatim word pair of the turn."""
    out = []
    for turn in conversation.turns():
        other = other_speaker(conversation, turn.speaker)
        for statement in statements(turn):
            allowed = names | content_words(statement.obj) | {w.lower() for w in statement.obj.split()}
            for context in (True, False):  # the words after the object may repeat the turn: then without them
                question = _paraphrase_of(statement, other, context)
                if question is not None and not verbatim_pairs(tidy(question), turn.text, allowed):
                    out.append(Probe("paraphrase", tidy(question), statement.obj, (turn.id,)))
                    break
    return out


_PAST_FORMS = "|".join(sorted({f["past"] for f in FORM.values() if "_" not in f["past"] and " " not in f["past"]}))
_PAST_CLAUSE = re.compile(rf"\b(?:I|[Ww]e)(?: just| finally| also| actually| recently| even)? "
                          rf"((?:[a-z]{{3,}}ed|{_PAST_FORMS})\b[^.!?]*)")
_CLAUSE_END = re.compile(r",|;|:| [-–—] | and | but | because | so | which | when | while | after | before ")


def _timed(turn: Turn, done: set[str]) -> list[Probe]:
    """``temporal`` probes of a turn's first-person past clauses said with a relative time that no statement
    covered (``done``: turn ids already asked about): ``When was it that ...`` → the date it resolves to."""
    if turn.id in done or turn.timestamp is None:
        return []
    out = []
    for sentence in sentences(turn):
        time, event = TIME.search(sentence), _PAST_CLAUSE.search(sentence)
        if time is None or event is None or TIME.match(event.group(1).split(" ", 1)[-1]):
            continue  # no time, no event, or the time right after the verb ("the figurines I bought yesterday")
        clause = " ".join(TIME.sub("", event.group(1)).split())
        clause = third_person(clean_clause(_CLAUSE_END.split(clause)[0]))
        if 2 <= len(content_words(clause)) and len(clause.split()) <= 12 and not DEICTIC.search(clause):
            out.append(Probe("temporal", f"When was it that {turn.speaker} {clause}?",
                             resolve_time(time.group(0), turn.timestamp), (turn.id,)))
    return out


def temporal(conversation: Conversation) -> list[Probe]:
    """``temporal`` probes over every dated event: when it happened (or will), and how long a stated state lasts."""
    out = []
    for turn in conversation.turns():
        if turn.timestamp is None:
            continue
        for statement in statements(turn):
            s = subject(statement)
            known = statement.base in FORM
            clause = clause_of(statement) if known else clause_of(statement, "past")
            did = "did" if known else "was it that"
            if DEICTIC.search(clause) or statement.tense == "present" or statement.base in GROUPS["loves"][0]:
                continue
            if statement.tense == "future":
                answer = resolve_time(statement.time, turn.timestamp) if statement.time else None
                if answer:
                    out.append(Probe("temporal", f"When was {s} planning to {clause}?", answer, (turn.id,)))
                continue
            if statement.time:
                answer = resolve_time(statement.time, turn.timestamp)
                ago = re.fullmatch(r"(\d+|a|one|two|three|four|five|six|a couple of) (year|month)s? ago",
                                   statement.time.lower())
                question = (f"How long before {format_date(turn.timestamp)} {did} {s} {clause}?" if ago else
                            f"When {did} {s} {clause}?")
                out.append(Probe("temporal", question, statement.time if ago else answer, (turn.id,)))
        out += _timed(turn, {p.evidence[0] for p in out})
        for sentence in sentences(turn):
            duration = DURATION.search(sentence)
            event = STATEMENT.search(sentence[:duration.start()]) if duration else None
            if event is None or event.group("aux") is None:
                continue
            verb = event.group("verb").lower()
            known = verb_base(verb, event.group("aux")) or ((verb, "progressive") if verb.endswith("ing") else None)
            if known is None:
                continue
            particle, obj, _, _ = object_of(event.group("tail")[:duration.start() - event.start("tail")])
            if obj and not DEICTIC.search(obj) and len(obj.split()) <= 5:
                doing = verb_form(known[0], "ing") if known[0] in FORM else known[0]
                question = f"How long has {turn.speaker} been {doing} {particle} {LEAD.sub('', obj)}?"
                out.append(Probe("temporal", tidy(question), f"{duration.group('n')} {duration.group('unit')}s",
                                 (turn.id,)))
    return out


def images(conversation: Conversation) -> list[Probe]:
    """``image`` probes: what a shared photo shows, asked through what its turn says (its statement, else its two
    rarest words), and what the turn says it had done, asked through the photo."""
    said_in = turn_counts(conversation)
    out = []
    for turn in conversation.turns():
        shown = caption(turn)
        head = caption_phrase(shown) if shown else ""
        if not content_words(head):
            continue
        s, other, said = turn.speaker, other_speaker(conversation, turn.speaker), statements(turn)
        if said:
            first = said[0]
            told = third_person(" ".join(w for w in (verb_form(first.base, "part"), first.particle, first.phrase) if w))
            out.append(Probe("image", tidy(f"{s} shared a picture when telling {other} they had {told}. What did it "
                                            f"show?"), head, (turn.id,)))
            out.append(Probe("image", tidy(f"Along with a picture of {head}, what did {s} say they had "
                                            f"{verb_form(first.base, 'part')} {first.particle}?"), first.obj, (turn.id,)))
            continue
        rare = sorted((w for w in content_words(" ".join(sentences(turn))) if w.isalpha() and len(w) > 3
                       and w not in content_words(head) and w not in {x.lower() for x in conversation.speakers}),
                      key=lambda w: (said_in[w], w))[:2]
        if len(rare) == 2:
            out.append(Probe("image", f"{s} shared a picture while talking about {rare[0]} and {rare[1]}. What did it "
                                      f"show?", head, (turn.id,)))
    return out


def inferences(conversation: Conversation) -> list[Probe]:
    """``inference`` probes: a stated passion asked as what the speaker would likely choose."""
    frames = ("What would {s} most likely spend a free afternoon on?", "What kind of gift would {s} probably enjoy?",
              "Which hobby would {s} likely pick for a weekend?", "What might {s} recommend to {o} as a way to unwind?")
    out = []
    for turn in conversation.turns():
        for sentence in sentences(turn):
            for match in PASSION.finditer(sentence):
                what = LEAD.sub("", clean_clause(match.group("what")))
                first = what.split()[0].lower() if what else ""
                if not 1 <= len(what.split()) <= 4 or DEICTIC.search(what) or first in VAGUE or \
                        first in ("being", "having", "getting", "seeing", "hearing", "how", "the", "to") or \
                        (re.match(r"(?i)I (?:really |just |absolutely )?(?:love|adore|enjoy)", match.group(0))
                         and not first.endswith("ing")):
                    continue
                frame = frames[stable(turn.id, what) % len(frames)]
                out.append(Probe("inference", frame.format(s=turn.speaker, o=other_speaker(conversation, turn.speaker)),
                                 what, (turn.id,)))
    return out
