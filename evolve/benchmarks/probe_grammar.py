"""The grammar the probe generators share: verb forms and synonyms, first-person statements (``I painted a lake
sunrise last year``) with their verb, tense, object and time, and how a question tells them of their speaker."""
from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass

from evolve.benchmarks.probe_base import DEICTIC, TIME, clean_clause, resolve_time, sentences, third_person
from evolve.benchmarks.types import Conversation, Turn
from evolve.words import content_words

#: ``base past participle -ing`` of irregular and frequent verbs (a regular verb's past is its participle).
VERBS = """go went gone going|run ran run running|take took taken taking|get got gotten getting|see saw seen seeing
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
FORMS = [line.split() for line in VERBS.replace("|", "\n").split("\n")]
BASE = {f: forms[0] for forms in FORMS for f in forms}  # any form -> base
FORM = {forms[0]: dict(zip(("base", "past", "part", "ing"), forms)) for forms in FORMS}
#: Another verb for the same act, as a base (``verb particle`` allowed): a question asks with it.
SYNONYMS = {"buy": "purchase", "purchase": "buy", "make": "create", "create": "produce", "go": "travel",
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
for _extra, _line in _EXTRA.items():
    FORM[_extra] = dict(zip(("base", "past", "part", "ing"), (f.replace("_", " ") for f in _line.split())))
#: Verbs whose object is rarely a thing (``had to``, ``felt fulfilled``, ``got to feed``).
_NO_OBJECT = frozenset({"have", "feel", "do", "decide", "plan", "check"})
#: Verbs whose object may be a gerund (``started playing guitar``).
_GERUND_VERBS = frozenset({"start", "begin", "love", "enjoy", "like", "adore", "try", "finish", "take_up", "go"})
TIME_WORDS = frozenset("last next week weekend month year years weeks months days ago today yesterday tomorrow "
                        "tonight recently lately".split())
MOTION = frozenset({"go", "travel", "come", "fly", "drive", "run", "ride"})
_PARTICLES = ("up for", "up", "into", "out", "for", "to", "on", "at", "about", "over", "in", "with", "around",
              "through", "off", "back", "down", "away", "by")
#: Where an object noun phrase ends: a preposition, a conjunction, a time word, a relative pronoun.
_NP_END = re.compile(r"\b(?:with|for|at|in|on|to|from|by|about|during|since|until|after|before|last|next|this|"
                     r"yesterday|today|tonight|tomorrow|ago|and|but|so|because|cause|cuz|when|while|which|who|that|where|"
                     r"as|like|than|if|or|just|too|again|recently|lately|now|then|already|ever|yet|not|I|I'm)\b|[,;:!?.()\"“”–—-]",
                     re.IGNORECASE)
LEAD = re.compile(r"^(?:a|an|the|my|our|some|his|her|their|a few|a couple of|a new|a little|a big|so many|"
                   r"lots of|a lot of)\s+", re.IGNORECASE)
VAGUE = frozenset("it them him her you that this something anything everything nothing lot lots one things thing "
                   "time way stuff much more some what all".split())
_KIN = (r"kids|children|son|daughter|husband|wife|family|fam|friend|friends|partner|mom|dad|sister|brother|dog|cat|"
        r"team|students|group|crew|parents|grandma|grandpa|cousin|boss|mentor")
STATEMENT = re.compile(rf"\b(?:I|We|[Mm]y (?P<who>(?:[a-z]+ )?(?:{_KIN}))(?: and I)?)(?P<aux>'ve been| have been|'ve| have|'m| am)?"
                        r"(?: just| finally| also| actually| recently| even| really| already| totally| always)?"
                        r" (?P<verb>[a-z]+)\b(?!['’])(?P<tail>[^.!?]*)")
_FUTURE = re.compile(r"\b(?:I'm|I am|we're|we are) (?:going to|gonna|planning to|planning on|hoping to|about to) "
                     r"(?P<verb>[a-z]+)\b(?P<tail>[^.!?]*)", re.IGNORECASE)
DURATION = re.compile(r"\bfor (?P<n>\d+|a|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few) "
                       r"(?P<unit>day|week|month|year)s?\b", re.IGNORECASE)
PASSION = re.compile(r"\b(?:I(?:'m| am) (?:really |so |super )?(?:passionate about|into|a big fan of|obsessed with)|"
                      r"I (?:really |just |absolutely )?(?:love|adore|enjoy)) (?P<what>[a-z][a-z' -]{2,40}?)"
                      r"(?=[.,;!?]| and | but | because | so |$)", re.IGNORECASE)
#: ``(class, question templates)`` of the facts asked together; ``{s}`` is the speaker.
GROUPS = {
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


def stable(*parts: str) -> int:
    return int(hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:8], 16)


def object_of(tail: str) -> tuple[str, str, str, str]:
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
    return particle, LEAD.sub("", phrase), phrase, rest


def verb_base(word: str, aux: str) -> tuple[str, str] | None:
    """``(base, tense)`` of a verb form after ``I``/``I've``/``I'm``, or ``None`` if it is not a verb it knows."""
    aux = aux.strip().replace("'", "")
    base = BASE.get(word)
    if aux in ("m", "am") or aux.endswith("been"):
        return (base, "progressive") if word.endswith("ing") and base else None
    if aux in ("ve", "have"):
        return (base, "perfect") if base and word == FORM[base]["part"] else None
    if base and word == FORM[base]["past"] and word != base:
        return base, "past"
    if base is None and not aux and re.fullmatch(r"[a-z]{3,}[^e]ed", word):  # a regular verb the table lacks
        return word, "past"
    if base in ("love", "enjoy", "like", "adore") and word == base:
        return base, "present"
    return None


def statements(turn: Turn) -> list[Statement]:
    """The first-person statements of ``turn`` whose verb :data:`VERBS` knows and whose object is a definite noun
    phrase of one to five words."""
    out = []
    for sentence in sentences(turn):
        time = TIME.search(sentence)
        found = [(m, verb_base(m.group("verb").lower(), m.group("aux") or "")) for m in STATEMENT.finditer(sentence)]
        found += [(m, (BASE.get(m.group("verb").lower()), "future")) for m in _FUTURE.finditer(sentence)]
        for match, known in found:
            if known is None or known[0] is None:
                continue
            particle, obj, phrase, rest = object_of(match.group("tail"))
            words = obj.lower().split()
            if not 1 <= len(words) <= 5 or words[0] in VAGUE or DEICTIC.search(obj) or not content_words(obj) \
                    or known[0] in _NO_OBJECT or (particle == "to" and known[0] not in MOTION) \
                    or words[0].endswith("ed") or (words[0].endswith("ing") and known[0] not in _GERUND_VERBS) \
                    or (words[0] in BASE and not words[0].endswith("ing")):
                continue
            if known[0] == "take" and particle == "up":
                known = ("take_up", known[1])
            who = (match.groupdict().get("who") or "").lower()
            if known[1] == "progressive" and time and re.match(r"(?i)next|tomorrow|tonight", time.group(0)):
                known = (known[0], "future")  # I'm going to a festival next month
            out.append(Statement(turn, known[0], known[1], obj, phrase, rest if len(rest.split()) <= 6 else "",
                                 particle, who, time.group(0) if time else None))
    return out


def verb_form(base: str, form: str) -> str:
    """``base``'s ``form`` (a regular verb the table lacks is its own past and participle, and has no other)."""
    return FORM[base][form].replace("_", " ") if base in FORM else base


def rest_of(statement: Statement, context: bool = True) -> str:
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


def other_speaker(conversation: Conversation, speaker: str) -> str:
    return next((s for s in conversation.speakers if s != speaker), "their friend")


def tidy(question: str) -> str:
    return re.sub(r"\s+([?,])", r"\1", re.sub(r"\s+", " ", question)).strip()


def clause_of(statement: Statement, form: str = "base") -> str:
    """The statement's event told of its speaker, its verb in ``form`` (``go to a pottery class with their
    kids``)."""
    words = [verb_form(statement.base, form), statement.particle, third_person(statement.phrase),
             third_person(statement.rest)]
    return re.sub(r" (?:about|around|over|again)$", "", " ".join(TIME.sub("", " ".join(w for w in words if w)).split()))


def caption_phrase(text: str) -> str:
    """The first noun phrase of a caption (``a dog walking past a wall`` → ``dog``)."""
    first = re.split(r"\b(?:with|and|on|in|at|over|under|next|near|holding|sitting|standing|walking|posing|that|is|"
                     r"are)\b", text)[0]
    return LEAD.sub("", clean_clause(first))


def turn_counts(conversation: Conversation) -> dict[str, int]:
    """Content word -> number of turns whose own words say it."""
    said_in: dict[str, int] = defaultdict(int)
    for turn in conversation.turns():
        for word in content_words(" ".join(sentences(turn))):
            said_in[word] += 1
    return said_in


def plain(word: str) -> bool:
    """Whether ``word`` can name a topic or an answer: a content word, not a verb form the table knows, not a time
    word."""
    return bool(content_words(word)) and word.lower() not in BASE and not TIME.fullmatch(word) and \
        word.lower() not in TIME_WORDS


def rarest(sentence: str, said_in: dict[str, int], skip: set[str]) -> str | None:
    """The sentence's word said in the fewest turns (at most two, four letters or more, not in ``skip``)."""
    words = [w for w in re.findall(r"[A-Za-z]+", sentence) if plain(w) and w.lower() not in skip]
    return min((w for w in words if len(w) > 3 and said_in[w.lower()] <= 2),
               key=lambda w: (said_in[w.lower()], words.index(w)), default=None)
