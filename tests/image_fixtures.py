"""A small conversation whose turns share photos: two named puppies, a painting and bowls (the image tests' fixture)."""
from __future__ import annotations

from datetime import datetime

from evolve.benchmarks.observations import DialogueTurn, Provenance
from evolve.benchmarks.turns import admit_session
from evolve.benchmarks.types import Conversation, Session

D1, D2 = datetime(2023, 5, 8, 13, 56), datetime(2023, 6, 9, 10, 0)


def _session(number: int, when: datetime, turns: list[tuple[str, str, str | None]]) -> Session:
    payloads = [DialogueTurn(id=f"D{number}:{i}", speaker=who, text=text, session=f"session_{number}",
                             time=when.isoformat(), image_caption=caption,
                             provenance=Provenance(source="test", record=f"D{number}:{i}"))
                for i, (who, text, caption) in enumerate(turns, start=1)]
    admitted = admit_session(payloads, when)
    return Session(f"D{number}", when, admitted.turns, admitted.images)


PETS = Conversation("pets", ("Ana", "Ben"), (
    _session(1, D1, [("Ana", "We got a new puppy last weekend!", "a photo of a small dog sitting on a rug"),
                     ("Ben", "Aww! Who is this little one?", None),
                     ("Ana", "This is Luna, she already loves the rug.", None),
                     ("Ben", "I painted this at the lake last week.", "a painting of a sunset over a lake")]),
    _session(2, D2, [("Ana", "Here's a pic of Oliver, our second puppy.", "a photo of a black puppy in the grass"),
                     ("Ben", "Made these in pottery class.", "a photo of a stack of bowls with different designs"),
                     ("Ana", "They look great, the bowls have lovely colours.", None)])))
