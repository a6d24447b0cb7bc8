"""Probe generators shaped like users' questions (:mod:`evolve.benchmarks.probes` assembles them):

* ``paraphrase`` — a first-person statement ("I painted a lake sunrise last year") asked of its object in other
  words: another person and tense, a synonym for common verbs, relative times resolved, or the other speaker's view
  (*What did Melanie tell Caroline they had painted in 2022?* → lake sunrise); kept only when no word pair of the
  evidence turn is repeated side by side, beyond names and the answer (:func:`verbatim_pairs`);
* ``temporal`` — every first-person event or plan said with a relative time: its date resolved against the session
  (absolute: ``7 May 2023``, ``2022``; relative to the session: ``the week before 9 June 2023``), ``N years ago``
  as said, or a duration (``How long has ...`` → ``4 years``). An event said without a time is not asked: every
  packed item carries its session's date, so its answer would test nothing but finding the turn;
* ``aggregation`` — facts of one kind told in several sessions, asked together (*What has Melanie painted?* →
  ``horse, sunset, lake sunrise``; activities, places, things made, read or bought; what a speaker did in one
  month; what they brought up with one topic word), with every evidence turn;
* ``image`` — a shared photo: what its caption shows, asked through its turn's words, or what the turn says of the
  photo, asked through its caption;
* ``inference`` — what a stated passion suggests (*What would Jon most likely spend a free afternoon on?* →
  dancing), LoCoMo's open-domain kind.
"""
from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass

from evolve.benchmarks.probe_base import (DEICTIC, TIME, Probe, caption, clean_clause, format_date, resolve_time,
                                          sentences, third_person, verbatim_pairs)
from evolve.benchmarks.types import Conversation, Turn
from evolve.words import content_words

#: ``base past participle -ing`` of irregular and frequent verbs (a regular verb's past is its participle).
_VERBS = """go went gone going|run ran run running|take took taken taking|get got gotten getting|see saw seen seeing
make made made making|meet met met meeting|do did done doing|give gave given giving|buy bought bought buying
find found found finding|begin began begun beginning|come came come coming|leave left left leaving
hear heard heard hearing|spend spent spent spending|win won won winning|write wrote written writing
draw drew drawn drawing|build built built building|sing sang sung singing|swim swam swum swimming
catch caught caught catching|fly flew flown flying|drive drove driven driving|bring brought brought bringing
teach taught taught teaching|hold held held holding|keep kept kept keeping|sell sold sold selling
ride rode ridden riding|read read read reading|eat ate eaten eating|lose lost lost losing|feel felt felt feeling
have had had having|paint painted painted painting|visit visited visited visiting|start started started starting
try tried tried trying|join joined joined joining|adopt adopted adopted adopting|bake baked baked baking
create created created creating|finish finished finished finishing|learn learned learned learning
watch watched watched watching|play played played playing|travel traveled traveled traveling
attend attended attended attending|explore explored explored exploring|pick picked picked picking
sign signed signed signing|take_up took_up taken_up taking_up|research researched researched researching
look looked looked looking|plan planned planned planning|launch launched launched launching
open opened opened opening|design designed designed designing|receive received received receiving
purchase purchased purchased purchasing|complete completed completed completing|produce produced produced producing
check checked checked checking|love loved loved loving|enjoy enjoyed enjoyed enjoying|like liked liked liking
adore adored adored adoring|study studied studied studying|investigate investigated investigated investigating
host hosted hosted hosting|organize organized organized organizing|volunteer volunteered volunteered volunteering
decide decided decided deciding|craft crafted crafted crafting|tour toured toured touring|grab grabbed grabbed grabbing
collect collected collected collecting|cook cooked cooked cooking|prepare prepared prepared preparing"""
_FORMS = [line.split() for line in _VERBS.replace("|", "\n").split("\n")]
_BASE = {f: forms[0] for forms in _FORMS for f in forms}  # any form -> base
_FORM = {forms[0]: dict(zip(("base", "past", "part", "ing"), forms)) for forms in _FORMS}
#: Another verb for the same act, as a base (``verb particle`` allowed): a question asks with it.
_SYNONYMS = {"buy": "purchase", "purchase": "buy", "make": "create", "create": "produce", "go": "travel",
             "visit": "explore", "get": "receive", "start": "begin", "begin": "start", "finish": "complete",
             "look": "check", "research": "investigate", "paint": "produce", "draw": "produce", "bake": "prepare",
             "cook": "prepare", "love": "adore", "enjoy": "love", "like": "enjoy", "attend": "go", "learn": "study",
             "take": "bring", "find": "discover", "pick": "choose", "watch": "see", "see": "watch", "read": "finish",
             "write": "produce", "build": "put together", "design": "create", "host": "organize", "join": "sign up for",
             "try": "test", "launch": "start", "open": "launch", "adopt": "take in"}
_EXTRA = {"discover": "discover discovered discovered discovering", "choose": "choose chose chosen choosing",
          "test": "test tested tested testing", "put together": "put_together put_together put_together "
                                                                  "putting_together",
          "sign up for": "sign_up_for signed_up_for signed_up_for signing_up_for",
          "take in": "take_in took_in taken_in taking_in"}
for _base, _line in _EXTRA.items():
    _FORM[_base] = dict(zip(("base", "past", "part", "ing"), (f.replace("_", " ") for f in _line.split())))
#: Verbs whose object is rarely a thing (``had to``, ``felt fulfilled``, ``got to feed``).
_NO_OBJECT = frozenset({"have", "feel", "do", "decide", "plan", "check"})
#: Verbs whose object may be a gerund (``started playing guitar``).
_GERUND_VERBS = frozenset({"start", "begin", "love", "enjoy", "like", "adore", "try", "finish", "take_up", "go"})
_TIME_WORDS = frozenset("last next week weekend month year years weeks months days ago today yesterday tomorrow "
                        "tonight recently lately".split())
_MOTION = frozenset({"go", "travel", "come", "fly", "drive", "run", "ride"})
_PARTICLES = ("up for", "up", "into", "out", "for", "to", "on", "at", "about", "over", "in", "with", "around",
              "through", "off", "back", "down", "away", "by")
#: Where an object noun phrase ends: a preposition, a conjunction, a time word, a relative pronoun.
_NP_END = re.compile(r"\b(?:with|for|at|in|on|to|from|by|about|during|since|until|after|before|last|next|this|"
                     r"yesterday|today|tonight|tomorrow|ago|and|but|so|because|cause|cuz|when|while|which|who|that|where|"
                     r"as|like|than|if|or|just|too|again|recently|lately|now|then|already|ever|yet|not|I|I'm)\b|[,;:!?.()\"“”–—-]",
                     re.IGNORECASE)
_LEAD = re.compile(r"^(?:a|an|the|my|our|some|his|her|their|a few|a couple of|a new|a little|a big|so many|"
                   r"lots of|a lot of)\s+", re.IGNORECASE)
_VAGUE = frozenset("it them him her you that this something anything everything nothing lot lots one things thing "
                   "time way stuff much more some what all".split())
_KIN = (r"kids|children|son|daughter|husband|wife|family|fam|friend|friends|partner|mom|dad|sister|brother|dog|cat|"
        r"team|students|group|crew|parents|grandma|grandpa|cousin|boss|mentor")
_STATEMENT = re.compile(rf"\b(?:I|We|[Mm]y (?P<who>(?:[a-z]+ )?(?:{_KIN}))(?: and I)?)(?P<aux>'ve been| have been|'ve| have|'m| am)?"
                        r"(?: just| finally| also| actually| recently| even| really| already| totally| always)?"
                        r" (?P<verb>[a-z]+)\b(?!['’])(?P<tail>[^.!?]*)")
_FUTURE = re.compile(r"\b(?:I'm|I am|we're|we are) (?:going to|gonna|planning to|planning on|hoping to|about to) "
                     r"(?P<verb>[a-z]+)\b(?P<tail>[^.!?]*)", re.IGNORECASE)
_DURATION = re.compile(r"\bfor (?P<n>\d+|a|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few) "
                       r"(?P<unit>day|week|month|year)s?\b", re.IGNORECASE)
_PASSION = re.compile(r"\b(?:I(?:'m| am) (?:really |so |super )?(?:passionate about|into|a big fan of|obsessed with)|"
                      r"I (?:really |just |absolutely )?(?:love|adore|enjoy)) (?P<what>[a-z][a-z' -]{2,40}?)"
                      r"(?=[.,;!?]| and | but | because | so |$)", re.IGNORECASE)
#: ``(class, question templates)`` of the facts asked together; ``{s}`` is the speaker.
_GROUPS = {
    "made": ({"make", "paint", "draw", "bake", "build", "create", "write", "design", "cook", "craft"},
             ("What things has {s} made or created?", "Which creations of their own has {s} mentioned?")),
    "visited": ({"go", "visit", "travel", "explore", "tour", "attend"},
                ("Which places or events has {s} been to?", "Where has {s} gone over the conversations?")),
    "took up": ({"start", "begin", "join", "take_up", "sign", "try", "learn", "volunteer"},
                ("What activities has {s} taken up?", "What new pursuits has {s} started?")),
    "acquired": ({"buy", "get", "adopt", "receive", "purchase", "find", "pick", "collect", "grab"},
                 ("What has {s} acquired?", "Which things has {s} obtained?")),
    "consumed": ({"read", "watch", "see", "hear", "play"},
                 ("What has {s} read, watched or played?", "Which books, shows or games has {s} taken in?")),
    "loves": ({"love", "enjoy", "like", "adore"}, ("What does {s} enjoy?", "What are some of {s}'s favourite things?")),
}


@dataclass(frozen=True)
class Statement:
    """A first-person statement of a turn: ``I <verb> <obj> <rest>``, its verb's base and tense, the time said."""

    turn: Turn
    base: str
    tense: str  # "past", "perfect", "progressive", "present", "future"
    obj: str  # the object noun phrase, determiners dropped
    phrase: str  # the object noun phrase as said
    rest: str  # the words after the object up to the clause's end
    particle: str
    who: str  # "" when the speaker did it, else whom they name ("kids" for "my kids")
    time: str | None  # the relative time expression of the sentence


def subject(statement: Statement) -> str:
    """Who a question about ``statement`` names: its speaker, or whom the speaker named (``Melanie's kids``)."""
    return f"{statement.turn.speaker}'s {statement.who}" if statement.who else statement.turn.speaker


def _stable(*parts: str) -> int:
    return int(hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:8], 16)


def _object(tail: str) -> tuple[str, str, str, str]:
    """``(particle, object, object as said, rest)`` of a verb's ``tail`` (its relative time left out); no object
    when the tail starts with the time (``These figurines I bought yesterday remind me``)."""
    if TIME.match(tail.strip()):
        return "", "", "", ""
    tail = " ".join(TIME.sub("", tail).split())
    particle = next((p for p in _PARTICLES if re.match(rf"{p}\b", tail, re.IGNORECASE)), "")
    after = tail[len(particle):].strip()
    end = _NP_END.search(after)
    phrase = clean_clause(after[:end.start()] if end else after)
    rest = after[len(phrase):] if after.startswith(phrase) else ""
    if phrase.lower() in _PARTICLES:  # "powered through": no object
        return "", "", "", ""
    rest = clean_clause(re.split(r"[,;:!?()]| [-–—] | but | because | so | and ", rest)[0])
    return particle, _LEAD.sub("", phrase), phrase, rest


def _base(word: str, aux: str) -> tuple[str, str] | None:
    """``(base, tense)`` of a verb form after ``I``/``I've``/``I'm``, or ``None`` if it is not a verb it knows."""
    aux = aux.strip().replace("'", "")
    base = _BASE.get(word)
    if aux in ("m", "am") or aux.endswith("been"):
        return (base, "progressive") if word.endswith("ing") and base else None
    if aux in ("ve", "have"):
        return (base, "perfect") if base and word == _FORM[base]["part"] else None
    if base and word == _FORM[base]["past"] and word != base:
        return base, "past"
    if base is None and not aux and re.fullmatch(r"[a-z]{3,}[^e]ed", word):  # a regular verb the table lacks
        return word, "past"
    if base in ("love", "enjoy", "like", "adore") and word == base:
        return base, "present"
    return None


def statements(turn: Turn) -> list[Statement]:
    """The first-person statements of ``turn`` whose verb :data:`_VERBS` knows and whose object is a definite noun
    phrase of one to five words."""
    out = []
    for sentence in sentences(turn):
        time = TIME.search(sentence)
        found = [(m, _base(m.group("verb").lower(), m.group("aux") or "")) for m in _STATEMENT.finditer(sentence)]
        found += [(m, (_BASE.get(m.group("verb").lower()), "future")) for m in _FUTURE.finditer(sentence)]
        for match, known in found:
            if known is None or known[0] is None:
                continue
            particle, obj, phrase, rest = _object(match.group("tail"))
            words = obj.lower().split()
            if not 1 <= len(words) <= 5 or words[0] in _VAGUE or DEICTIC.search(obj) or not content_words(obj) \
                    or known[0] in _NO_OBJECT or (particle == "to" and known[0] not in _MOTION) \
                    or words[0].endswith("ed") or (words[0].endswith("ing") and known[0] not in _GERUND_VERBS) \
                    or (words[0] in _BASE and not words[0].endswith("ing")):
                continue
            if known[0] == "take" and particle == "up":
                known = ("take_up", known[1])
            who = (match.groupdict().get("who") or "").lower()
            if known[1] == "progressive" and time and re.match(r"(?i)next|tomorrow|tonight", time.group(0)):
                known = (known[0], "future")  # I'm going to a festival next month
            out.append(Statement(turn, known[0], known[1], obj, phrase, rest if len(rest.split()) <= 6 else "",
                                 particle, who, time.group(0) if time else None))
    return out


def _form(base: str, form: str) -> str:
    """``base``'s ``form`` (a regular verb the table lacks is its own past and participle, and has no other)."""
    return _FORM[base][form].replace("_", " ") if base in _FORM else base


def _rest(statement: Statement, context: bool = True) -> str:
    """The statement's rest told of its speaker (none without ``context``), then the date its relative time
    resolves to."""
    rest = "" if not context else TIME.sub("", statement.rest) if statement.time else statement.rest
    rest = " ".join(third_person(rest).split())
    if DEICTIC.search(rest):
        rest = ""
    if statement.time and statement.turn.timestamp is not None:
        when = resolve_time(statement.time, statement.turn.timestamp)
        rest = f"{rest} {'in' if when[0].isdigit() and len(when) == 4 or not when[0].isdigit() else 'on'} {when}"
    return rest.strip()


def _other(conversation: Conversation, speaker: str) -> str:
    return next((s for s in conversation.speakers if s != speaker), "their friend")


def _paraphrase_of(statement: Statement, other: str, context: bool) -> str | None:
    """A question asking for ``statement``'s object in other words (with the words after it when ``context``), or
    ``None`` when none fits its tense."""
    s, rest = subject(statement), _rest(statement, context)
    synonym = _SYNONYMS.get(statement.base)
    verb = synonym if synonym in _FORM else statement.base
    particle = "" if verb != statement.base else statement.particle
    tail = " ".join(w for w in (particle, rest) if w)
    pick = _stable(statement.turn.id, statement.obj) % 3
    if statement.base in _MOTION and statement.particle in ("to", "into", "") and statement.tense != "present":
        if statement.tense == "future":
            return f"Where was {s} planning to go {rest}?"
        if statement.particle:  # went to the museum: where
            return (f"Where has {s} been {rest}?", f"Where did {s} tell {other} they had gone {rest}?",
                    f"Which place did {s} head for {rest}?")[pick]
        return f"What activity did {s} go and do {rest}?"  # went camping
    if statement.tense in ("past", "perfect"):
        part = _form(verb, "part")
        return (f"What has {s} {part} {tail}?", f"What did {statement.turn.speaker} tell {other} "
                f"{'their ' + statement.who if statement.who else 'they'} had {part} {tail}?",
                f"According to {other}'s friend {statement.turn.speaker}, what had {s} {part} {tail}?")[pick]
    if statement.tense == "progressive":
        return f"What has {s} been {_form(verb, 'ing')} {tail}?"
    if statement.tense == "present":
        return (f"What does {s} {_form(verb, 'base')} {tail}?", f"What did {s} tell {other} they {_form(verb, 'base')}"
                f" {tail}?", f"What is something {s} said they {_form(verb, 'base')} {tail}?")[pick]
    if statement.tense == "future":
        return f"What was {s} planning to {_form(verb, 'base')} {tail}?"
    return None


def _tidy(question: str) -> str:
    return re.sub(r"\s+([?,])", r"\1", re.sub(r"\s+", " ", question)).strip()


def paraphrases(conversation: Conversation, names: frozenset[str]) -> list[Probe]:
    """``paraphrase`` probes: statements asked of their object without a verbatim word pair of the turn."""
    out = []
    for turn in conversation.turns():
        other = _other(conversation, turn.speaker)
        for statement in statements(turn):
            allowed = names | content_words(statement.obj) | {w.lower() for w in statement.obj.split()}
            for context in (True, False):  # the words after the object may repeat the turn: then without them
                question = _paraphrase_of(statement, other, context)
                if question is not None and not verbatim_pairs(_tidy(question), turn.text, allowed):
                    out.append(Probe("paraphrase", _tidy(question), statement.obj, (turn.id,)))
                    break
    return out


def _clause(statement: Statement, form: str = "base") -> str:
    """The statement's event told of its speaker, its verb in ``form`` (``go to a pottery class with their
    kids``)."""
    words = [_form(statement.base, form), statement.particle, third_person(statement.phrase),
             third_person(statement.rest)]
    return re.sub(r" (?:about|around|over|again)$", "", " ".join(TIME.sub("", " ".join(w for w in words if w)).split()))


_PAST_FORMS = "|".join(sorted({f["past"] for f in _FORM.values() if "_" not in f["past"] and " " not in f["past"]}))
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
            known = statement.base in _FORM
            clause = _clause(statement) if known else _clause(statement, "past")
            did = "did" if known else "was it that"
            if DEICTIC.search(clause) or statement.tense == "present" or statement.base in _GROUPS["loves"][0]:
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
            duration = _DURATION.search(sentence)
            event = _STATEMENT.search(sentence[:duration.start()]) if duration else None
            if event is None or event.group("aux") is None:
                continue
            verb = event.group("verb").lower()
            known = _base(verb, event.group("aux")) or ((verb, "progressive") if verb.endswith("ing") else None)
            if known is None:
                continue
            particle, obj, _, _ = _object(event.group("tail")[:duration.start() - event.start("tail")])
            if obj and not DEICTIC.search(obj) and len(obj.split()) <= 5:
                doing = _form(known[0], "ing") if known[0] in _FORM else known[0]
                question = f"How long has {turn.speaker} been {doing} {particle} {_LEAD.sub('', obj)}?"
                out.append(Probe("temporal", _tidy(question), f"{duration.group('n')} {duration.group('unit')}s",
                                 (turn.id,)))
    return out


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
            for group, (verbs, _) in _GROUPS.items():
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
            question = f"What are all the things {speaker} has {_form(base, 'part')} {items[0].particle}?" if \
                base not in ("love", "enjoy", "like", "adore") else f"What does {speaker} {base}?"
        else:
            templates = _GROUPS[group][1]
            question = templates[_stable(speaker, group) % len(templates)].format(s=speaker)
        evidence = tuple(dict.fromkeys(i.turn.id for i in items))
        out.append(Probe("aggregation", _tidy(question), ", ".join(i.obj for i in items), evidence))
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
                did = " ".join(w for w in (_form(st.base, "past"), st.particle) if w)
                what = "the place" if st.base in _MOTION else "what"
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
            if statement.tense == "past" and not statement.time and statement.base not in _GROUPS["loves"][0]:
                clause = _clause(statement) if statement.base in _FORM else _clause(statement, "past")
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


def _caption_phrase(text: str) -> str:
    """The first noun phrase of a caption (``a dog walking past a wall`` → ``dog``)."""
    first = re.split(r"\b(?:with|and|on|in|at|over|under|next|near|holding|sitting|standing|walking|posing|that|is|"
                     r"are)\b", text)[0]
    return _LEAD.sub("", clean_clause(first))


def images(conversation: Conversation) -> list[Probe]:
    """``image`` probes: what a shared photo shows, asked through what its turn says (its statement, else its two
    rarest words), and what the turn says it had done, asked through the photo."""
    said_in = _said_in(conversation)
    out = []
    for turn in conversation.turns():
        shown = caption(turn)
        head = _caption_phrase(shown) if shown else ""
        if not content_words(head):
            continue
        s, other, said = turn.speaker, _other(conversation, turn.speaker), statements(turn)
        if said:
            first = said[0]
            told = third_person(" ".join(w for w in (_form(first.base, "part"), first.particle, first.phrase) if w))
            out.append(Probe("image", _tidy(f"{s} shared a picture when telling {other} they had {told}. What did it "
                                            f"show?"), head, (turn.id,)))
            out.append(Probe("image", _tidy(f"Along with a picture of {head}, what did {s} say they had "
                                            f"{_form(first.base, 'part')} {first.particle}?"), first.obj, (turn.id,)))
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
            for match in _PASSION.finditer(sentence):
                what = _LEAD.sub("", clean_clause(match.group("what")))
                first = what.split()[0].lower() if what else ""
                if not 1 <= len(what.split()) <= 4 or DEICTIC.search(what) or first in _VAGUE or \
                        first in ("being", "having", "getting", "seeing", "hearing", "how", "the", "to") or \
                        (re.match(r"(?i)I (?:really |just |absolutely )?(?:love|adore|enjoy)", match.group(0))
                         and not first.endswith("ing")):
                    continue
                frame = frames[_stable(turn.id, what) % len(frames)]
                out.append(Probe("inference", frame.format(s=turn.speaker, o=_other(conversation, turn.speaker)),
                                 what, (turn.id,)))
    return out


def _said_in(conversation: Conversation) -> dict[str, int]:
    """Content word -> number of turns whose own words say it."""
    said_in: dict[str, int] = defaultdict(int)
    for turn in conversation.turns():
        for word in content_words(" ".join(sentences(turn))):
            said_in[word] += 1
    return said_in


def _plain(word: str) -> bool:
    """Whether ``word`` can name a topic or an answer: a content word, not a verb form the table knows, not a time
    word."""
    return bool(content_words(word)) and word.lower() not in _BASE and not TIME.fullmatch(word) and \
        word.lower() not in _TIME_WORDS


def _rarest(sentence: str, said_in: dict[str, int], skip: set[str]) -> str | None:
    """The sentence's word said in the fewest turns (at most two, four letters or more, not in ``skip``)."""
    words = [w for w in re.findall(r"[A-Za-z]+", sentence) if _plain(w) and w.lower() not in skip]
    return min((w for w in words if len(w) > 3 and said_in[w.lower()] <= 2),
               key=lambda w: (said_in[w.lower()], words.index(w)), default=None)


def topic_lists(conversation: Conversation, max_items: int = 4) -> list[Probe]:
    """``aggregation`` probes over a topic: what a speaker brought up with a word (said in 3 to 15 turns) in at
    least two sessions, one item (the sentence's rarest word) per session, with every evidence turn."""
    said_in = _said_in(conversation)
    speakers = {w.lower() for s in conversation.speakers for w in s.split()}
    found: dict[tuple[str, str], dict[str, tuple[str, str]]] = defaultdict(dict)  # (speaker, topic) -> session -> item
    for turn in conversation.turns():
        for sentence in sentences(turn):
            lower = {w.lower() for w in re.findall(r"[A-Za-z]+", sentence)}
            for topic in sorted(w for w in lower if _plain(w) and 3 <= said_in[w] <= 15 and len(w) > 3
                                and w not in speakers):
                item = _rarest(sentence, said_in, speakers | {topic})
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
