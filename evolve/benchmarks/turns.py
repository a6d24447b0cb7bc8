"""One turn, one meaning: a turn as a client states it (text, image caption, time, session) becomes the runtime's
:class:`~evolve.benchmarks.types.Turn` here, for the LoCoMo reader and the memory service alike, so caption folding,
time parsing and session naming cannot differ between what is evaluated offline and what is served."""
from __future__ import annotations

import re
from datetime import datetime, timezone

from evolve.benchmarks.types import Turn
from evolve.errors import UserError

_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_CAPTION_PREFIX = re.compile(r"^\s*an? (?:photo|photography|picture|image) of\s+", re.IGNORECASE)
#: LoCoMo's session key (``session_3``, no leading zero): the session its turns' ids name (``D3:n``).
_LOCOMO_SESSION = re.compile(r"session_(0|[1-9][0-9]*)")


class TurnError(UserError, ValueError):
    """A turn's field cannot be read (an unparseable time); the message names where."""


def parse_locomo_date(text: str) -> datetime:
    """Parse LoCoMo's session stamp, e.g. ``"1:56 pm on 8 May, 2023"``."""
    return datetime.strptime(" ".join(text.split()), _DATE_FORMAT)


def format_locomo_date(moment: datetime) -> str:
    """Inverse of :func:`parse_locomo_date` (minute resolution)."""
    hour = moment.hour % 12 or 12
    meridiem = "am" if moment.hour < 12 else "pm"
    return f"{hour}:{moment.minute:02d} {meridiem} on {moment.day} {moment:%B}, {moment.year}"


def naive(moment: datetime) -> datetime:
    """A zoned moment in UTC without its zone, so every time of a conversation compares (naive ones are taken as
    given)."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo is not None else moment


def parse_moment(text: str) -> datetime:
    """An ISO 8601 or LoCoMo-style (``1:56 pm on 8 May, 2023``) moment, a zoned one as naive UTC (:func:`naive`);
    ``ValueError`` if it is neither."""
    try:
        return naive(datetime.fromisoformat(text))
    except ValueError:
        return naive(parse_locomo_date(text))


def fold_caption(text: str, caption: object) -> str:
    """A turn's text with its photo's caption folded in: ``text [shares a photo of CAPTION]``, a leading "a photo
    of" (or picture, image) dropped from the caption; the text alone without a caption."""
    if not isinstance(caption, str) or not caption.strip():
        return text
    return f"{text} [shares a photo of {_CAPTION_PREFIX.sub('', caption).strip()}]"


def session_id(name: str) -> str:
    """The session a client's session name stands for: LoCoMo's key ``session_N`` is ``DN``, the prefix of its
    turns' ids, as the LoCoMo reader has always named it; any other name as given."""
    match = _LOCOMO_SESSION.fullmatch(name)
    return f"D{match.group(1)}" if match else name


def client_turn(turn_id: str, speaker: str, text: str, session: str, time: str | None = None,
                image_caption: object = None, where: str = "turn") -> Turn:
    """The runtime's turn for a turn as a client sends it: the caption folded into the text (:func:`fold_caption`),
    the time parsed (:func:`parse_moment`; none: the session's time applies), the session named by
    :func:`session_id`. :class:`TurnError` naming ``where`` for an unparseable time."""
    moment = None
    if time:
        try:
            moment = parse_moment(time)
        except ValueError:
            raise TurnError(f"{where}.time: unparseable time {time!r} (ISO 8601 or e.g. '1:56 pm on 8 May, "
                            "2023')") from None
    return Turn(turn_id, speaker, fold_caption(text, image_caption), session_id(session), moment)
