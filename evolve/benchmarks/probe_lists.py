"""Probe generators that ask about several turns at once: ``aggregation`` (a speaker's facts of one kind told in
several sessions, what they did in one month, what they brought up with one topic word) and the statements that name
something a chained ``multi_hop`` question can refer to (:func:`name_facts`)."""
from __future__ import annotations

import re
from collections import defaultdict

from evolve.benchmarks.probe_base import DEICTIC, Probe, sentences
from evolve.benchmarks.probe_grammar import (FORM, GROUPS, MOTION, Statement, clause_of, verb_form, plain, rarest, turn_counts,
                                             stable, statements, subject, tidy)
from evolve.benchmarks.types import Conversation
from evolve.words import content_words

def aggregations(conversation: Conversation, max_items: int = 5) -> list[Probe]:
    """``aggregation`` probes: a speaker's objects of one kind of act (one verb, or a class of verbs) told in at
    least two sessions; the answer lists them (at most ``max_items``, the earliest), the evidence is every turn."""
    by_key: dict[tuple[str, str], dict[str, Statement]] = defaultdict(dict)
    for turn in conversation.turns():
        for statement in statements(turn):
            if statement.tense == "future":
                continue
            key = statement.obj.lower()
            by_key[(subject(statement), "verb:" + statement.base)].setdefault(key, statement)
            for group, (verbs, _) in GROUPS.items():
                if statement.base in verbs:
                    by_key[(subject(statement), group)].setdefault(key, statement)
    out, listed = _monthly(conversation, max_items), set()
    for (speaker, group), found in by_key.items():
        items = list(found.values())[:max_items]
        key = (speaker, tuple(i.obj for i in items))
        if len({i.turn.session_id for i in items}) < 2 or key in listed:
            continue
        listed.add(key)
        if group.startswith("verb:"):
            base = group[5:]
            question = f"What are all the things {speaker} has {verb_form(base, 'part')} {items[0].particle}?" if \
                base not in ("love", "enjoy", "like", "adore") else f"What does {speaker} {base}?"
        else:
            templates = GROUPS[group][1]
            question = templates[stable(speaker, group) % len(templates)].format(s=speaker)
        evidence = tuple(dict.fromkeys(i.turn.id for i in items))
        out.append(Probe("aggregation", tidy(question), ", ".join(i.obj for i in items), evidence))
    return out


def name_facts(conversation: Conversation) -> list[tuple[str, str, str]]:
    """Statements whose object names something (a name, ``I went to Rome``, or a phrase of two or three words,
    ``I started a dance studio``), as ``(name, turn id, description)``: how a later question can name it through the
    statement (``the place Jon went to in January 2023``, ``what Jon started in January 2023``)."""
    speakers = {w for s in conversation.speakers for w in s.split()}
    out = []
    for turn in conversation.turns():
        if turn.timestamp is None:
            continue
        for st in statements(turn):
            named = re.fullmatch(r"[A-Z][a-z]+(?: [A-Z][a-z]+)?", st.obj) or \
                (2 <= len(st.obj.split()) <= 3 and len(content_words(st.obj)) >= 2)
            if st.tense in ("past", "perfect", "progressive") and named and not set(st.obj.split()) & speakers:
                did = " ".join(w for w in (verb_form(st.base, "past"), st.particle) if w)
                what = "the place" if st.base in MOTION else "what"
                out.append((st.obj, turn.id, f"{what} {subject(st)} {did} in {turn.timestamp:%B} "
                                             f"{turn.timestamp.year}"))
    return out


def _monthly(conversation: Conversation, max_items: int) -> list[Probe]:
    """Aggregation over time: what a speaker did in one month, told in at least two of its sessions."""
    by_month: dict[tuple[str, str], dict[str, Statement]] = defaultdict(dict)
    for turn in conversation.turns():
        if turn.timestamp is None:
            continue
        for statement in statements(turn):
            if statement.tense == "past" and not statement.time and statement.base not in GROUPS["loves"][0]:
                clause = clause_of(statement) if statement.base in FORM else clause_of(statement, "past")
                if not DEICTIC.search(clause) and len(clause.split()) <= 8:
                    month = f"{turn.timestamp:%B} {turn.timestamp.year}"
                    by_month[(subject(statement), month)].setdefault(clause, statement)
    out = []
    for (speaker, month), found in by_month.items():
        items = list(found.items())[:max_items]
        if len({st.turn.session_id for _, st in items}) >= 2:
            out.append(Probe("aggregation", f"What did {speaker} do in {month}?", ", ".join(c for c, _ in items),
                             tuple(dict.fromkeys(st.turn.id for _, st in items))))
    return out


def topic_lists(conversation: Conversation, max_items: int = 4) -> list[Probe]:
    """``aggregation`` probes over a topic: what a speaker brought up with a word (said in 3 to 15 turns) in at
    least two sessions, one item (the sentence's rarest word) per session, with every evidence turn."""
    said_in = turn_counts(conversation)
    speakers = {w.lower() for s in conversation.speakers for w in s.split()}
    found: dict[tuple[str, str], dict[str, tuple[str, str]]] = defaultdict(dict)  # (speaker, topic) -> session -> item
    for turn in conversation.turns():
        for sentence in sentences(turn):
            lower = {w.lower() for w in re.findall(r"[A-Za-z]+", sentence)}
            for topic in sorted(w for w in lower if plain(w) and 3 <= said_in[w] <= 15 and len(w) > 3
                                and w not in speakers):
                item = rarest(sentence, said_in, speakers | {topic})
                if item is not None:
                    found[(turn.speaker, topic)].setdefault(turn.session_id, (item, turn.id))
    out = []
    for (speaker, topic), sessions in found.items():
        items = list(sessions.values())[:max_items]
        if len(items) >= 2:
            out.append(Probe("aggregation", f"What has {speaker} brought up in connection with {topic} across their "
                                            f"conversations?", ", ".join(i for i, _ in items),
                             tuple(dict.fromkeys(t for _, t in items))))
    return out
