"""One turn, one meaning: admission. A turn as a client or a file states it (:class:`DialogueTurn`: text, image
caption, time, session) becomes the runtime's :class:`~evolve.benchmarks.types.Turn`, and the photo it shares an
:class:`ImageObservation`, here, for the LoCoMo reader and the memory service alike, so caption folding, time
parsing, session naming and image ids cannot differ between what is evaluated offline and what is served."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from evolve.benchmarks.observations import DialogueTurn, ImageObservation, Photo, Provenance, image_id
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


@dataclass(frozen=True)
class Admitted:
    """A session's admitted turns and the image observations they share, in turn order."""

    turns: tuple[Turn, ...]
    images: tuple[ImageObservation, ...]


def admit_turn(turn: DialogueTurn, images_before: int = 0, session_time: datetime | None = None,
               where: str = "turn") -> tuple[Turn, ImageObservation | None]:
    """The runtime's turn for ``turn`` (caption folded into the text, :func:`fold_caption`; time parsed,
    :func:`parse_moment`, none: the session's; session named by :func:`session_id`) and the image it shares, the
    session's ``images_before + 1``-th, dated by the turn or else by ``session_time``. :class:`TurnError` naming
    ``where`` for an unparseable time."""
    moment = None
    if turn.time:
        try:
            moment = parse_moment(turn.time)
        except ValueError:
            raise TurnError(f"{where}.time: unparseable time {turn.time!r} (ISO 8601 or e.g. '1:56 pm on 8 May, "
                            "2023')") from None
    admitted = Turn(turn.id, turn.speaker, fold_caption(turn.text, turn.image_caption), session_id(turn.session),
                    moment)
    photo = turn.photo
    return admitted, shared_image(admitted, photo, images_before, session_time, turn.provenance) if photo.shared \
        else None


def shared_image(turn: Turn, photo: Photo, images_before: int, session_time: datetime | None,
                 provenance: Provenance) -> ImageObservation:
    """The image observation of the ``photo`` an admitted ``turn`` shares: its session's ``images_before + 1``-th,
    dated by the turn or else by ``session_time`` (the LoCoMo reader and the live conversation both number here)."""
    return ImageObservation(id=image_id(turn.session_id, images_before + 1), session=turn.session_id,
                            time=turn.timestamp or session_time, caption=(photo.caption or "").strip(),
                            source_turn=turn.id, speaker=turn.speaker, url=photo.url, path=photo.path,
                            provenance=provenance)


def admit_session(turns: Sequence[DialogueTurn], session_time: datetime | None = None,
                  where: str = "session") -> Admitted:
    """:func:`admit_turn` of a session's turns in order, its images numbered from 1 (``where[i]`` names turn i in an
    error)."""
    admitted, images = [], []
    for index, turn in enumerate(turns):
        one, image = admit_turn(turn, len(images), session_time, f"{where}[{index}]")
        admitted.append(one)
        if image is not None:
            images.append(image)
    return Admitted(tuple(admitted), tuple(images))


def client_turn(turn_id: str, speaker: str, text: str, session: str, time: str | None = None,
                photo: Photo = Photo(), where: str = "turn") -> tuple[Turn, Photo | None]:
    """The runtime's turn for a turn as a client sends it (:func:`admit_turn`), and the photo it shares (``None``:
    none)."""
    payload = DialogueTurn(id=turn_id, speaker=speaker, text=text, session=session, time=time or None,
                           image_caption=photo.caption, image_url=photo.url, image_path=photo.path,
                           provenance=Provenance(source="client", record=turn_id))
    return admit_turn(payload, where=where)[0], photo if photo.shared else None
