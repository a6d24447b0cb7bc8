"""The hypothesis check: a change names a failure category it should make rarer (or commoner), and a paired test says
whether it did.

A failure category is a root cause of the evidence-loss ladder, optionally within one question category
(``ingestion_gap/temporal``; ``ingestion_gap/*`` or ``ingestion_gap`` over every category): the loop's directions
target one (their symptom, wildcard symptoms included) and predict it goes ``down``. Over the questions both sides
count (those of the named category), each question's indicator "its failure has that root cause" is compared paired
under parent and candidate: exact McNemar (:func:`evolve.verify.statistics.mcnemar_exact`) on the questions that
left the category against those that entered it. The prediction holds when the category moved the predicted way
with p <= alpha; "any movement" no longer counts. Rule ``hypothesis_mismatch`` of
:func:`evolve.verify.decision.decide` reads it only for a would-be accept: a mismatch turns an accept into
FEATURE_FLAG (or is named in the reason), so it can only add flags, never accept a change.

Records written before this check held a question category that was predicted to rise, matched by any delta > 0 (no
``mcnemar_p``); they read back and replay as decided.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping

from evolve.observe.ladder import ROOT_CAUSES
from evolve.verify.statistics import mcnemar_exact

Direction = Literal["up", "down"]
#: Who made a prediction: the night's planner (its own hypothesis about the move it proposes) or an engineer (``gate``).
Author = Literal["planner", "engineer"]
#: The question category of a failure category over every category.
EVERY = "*"


@dataclass(frozen=True)
class Prediction:
    """A failure category (root cause, optionally x question category) and the direction it should move."""

    root_cause: str
    category: str = EVERY
    direction: Direction = "down"
    author: Author = "engineer"

    @property
    def key(self) -> str:
        return f"{self.root_cause}/{self.category}"

    def __str__(self) -> str:
        return f"{self.key}:{self.direction}"

    @classmethod
    def parse(cls, text: str) -> "Prediction":
        """``ROOT_CAUSE[/CATEGORY][:down|up]`` (every category and ``down`` when left out); ``ValueError`` saying
        what is wrong."""
        target, _, direction = text.partition(":")
        root_cause, _, category = target.partition("/")
        direction = direction or "down"
        if root_cause not in ROOT_CAUSES:
            raise ValueError(f"{text!r}: {root_cause!r} is not a root cause (one of {', '.join(ROOT_CAUSES)})")
        if direction not in ("up", "down"):
            raise ValueError(f"{text!r}: direction {direction!r} is not up or down")
        return cls(root_cause, category or EVERY, direction)


@dataclass(frozen=True)
class HypothesisCheck:
    """The predicted movement of a failure category and the paired test of the observed one.

    ``category`` is the failure category's key (``root_cause/category``); ``observed_delta`` the change of its share
    of the ``n`` compared questions; ``before``/``after`` its counts under parent and candidate; ``left``/``entered``
    the discordant questions; ``mcnemar_p`` their exact McNemar p, held to ``alpha``. A record written before the
    test holds a question category, its accuracy delta and ``n`` only (the other fields ``None``)."""

    category: str
    predicted: str  # "up" | "down"
    observed_delta: float
    n: int
    before: int | None = None
    after: int | None = None
    left: int | None = None
    entered: int | None = None
    mcnemar_p: float | None = None
    alpha: float | None = None
    #: Who predicted it; a record written before authors were kept reads as ``engineer`` (it was decided so).
    author: Author = "engineer"

    @property
    def binding(self) -> bool:
        """Whether a mismatch may flag the change: an engineer's prediction is the human method's requirement; the
        planner's is its own guess at the mechanism, which a mismatch refutes in its tree, never in the decision."""
        return self.author == "engineer"

    @property
    def legacy(self) -> bool:
        """Written before the paired test: a question category's accuracy, any move counting."""
        return self.mcnemar_p is None

    @property
    def matches(self) -> bool:
        moved = self.observed_delta > 0 if self.predicted == "up" else self.observed_delta < 0
        return moved if self.legacy else moved and self.mcnemar_p <= self.alpha

    def describe(self) -> str:
        verdict = "matches" if self.matches else "mismatch"
        if self.legacy:
            return (f"predicted {self.category} {self.predicted}, observed {self.observed_delta:+.4f} on {self.n} "
                    f"questions ({verdict})")
        return (f"predicted {self.category} {self.predicted}: {self.before} -> {self.after} of {self.n} questions "
                f"({self.observed_delta:+.4f}; {self.left} left, {self.entered} entered, exact McNemar "
                f"p={self.mcnemar_p:.4g}, alpha {self.alpha:g}) ({verdict})")

    def to_dict(self) -> dict[str, Any]:
        """The fields set (``author`` only when it is the planner: a record without one reads as an engineer's)."""
        return {k: v for k, v in asdict(self).items() if v is not None and (k, v) != ("author", "engineer")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HypothesisCheck":
        tested = {name: data[name] for name in ("before", "after", "left", "entered") if name in data}
        if "mcnemar_p" in data:
            if len(tested) < 4 or "alpha" not in data:
                raise ValueError("a tested check needs before, after, left, entered, mcnemar_p and alpha")
            tested.update(mcnemar_p=float(data["mcnemar_p"]), alpha=float(data["alpha"]))
        author = data.get("author", "engineer")
        if author not in ("planner", "engineer"):
            raise ValueError(f"author {author!r} is not planner or engineer")
        return cls(str(data["category"]), str(data["predicted"]), float(data["observed_delta"]), int(data["n"]),
                   **{k: int(v) if k not in ("mcnemar_p", "alpha") else v for k, v in tested.items()}, author=author)


def predicted(symptom: str) -> Prediction | None:
    """What a loop candidate aimed at ``symptom`` (``root_cause/category``, the category ``*`` for all) predicts, as the
    planner's own hypothesis: that failure category goes down (``None`` for a symptom that names no root cause, e.g. a merge's)."""
    root_cause, _, category = symptom.partition("/")
    return Prediction(root_cause, category or EVERY, author="planner") if root_cause in ROOT_CAUSES else None


def check(prediction: Prediction | None, base: Mapping[str, tuple[str, str | None]],
          cand: Mapping[str, tuple[str, str | None]], alpha: float) -> HypothesisCheck | None:
    """The prediction tested on the questions both sides count: ``base`` and ``cand`` map a question id to its
    category and root cause (``None``: not a failure). ``None`` without a prediction or without a compared question
    of its category."""
    if prediction is None:
        return None
    ids = [q for q in base.keys() & cand.keys() if prediction.category in (EVERY, base[q][0])]
    if not ids:
        return None
    before = {q for q in ids if base[q][1] == prediction.root_cause}
    after = {q for q in ids if cand[q][1] == prediction.root_cause}
    left, entered = len(before - after), len(after - before)
    return HypothesisCheck(prediction.key, prediction.direction, (len(after) - len(before)) / len(ids), len(ids),
                           len(before), len(after), left, entered, mcnemar_exact(left, entered), alpha,
                           prediction.author)
