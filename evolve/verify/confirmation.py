"""The night's confirmation: its final strategy against the strategy it started from, on questions the night's search
never saw, by one one-sided exact McNemar test at ``alpha``.

Whatever the search did on the other questions (how many rounds, how liberal its per-candidate rules, how many
candidates it compared), the confirmation questions played no part in choosing the final, so under the null (no
change the night tried helps) the final-vs-start comparison on them is a fresh paired comparison, and a night promotes
falsely with probability at most ``alpha`` (``experiments/bench/contract_simulation.py`` shows it by simulation).
"""
from __future__ import annotations

from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict

from evolve.verify.decision import TOLERANCE, AcceptanceRules, floor_breaches
from evolve.verify.statistics import mcnemar_exact


class Confirmation(BaseModel):
    """The confirmation of one night, as journaled (entry ``CONFIRM``) and summarised."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verdict: Literal["CONFIRMED", "REFUSED"]
    reason: str
    start: str
    final: str
    questions: int
    score_start: float
    score_final: float
    improved: int
    regressed: int
    p: float
    alpha: float
    words_start: float
    words_final: float

    @property
    def delta(self) -> float:
        return self.score_final - self.score_start


def category_rows(start: Mapping[str, Mapping], final: Mapping[str, Mapping], ids: list[str]) -> dict[str, dict]:
    """Per question category (the start's ``category``): n, delta and the two-sided exact McNemar p of its
    discordant questions, as the contract's category floor reads them."""
    rows: dict[str, dict] = {}
    for category in sorted({str(start[q].get("category")) for q in ids}):
        members = [q for q in ids if str(start[q].get("category")) == category]
        up = sum(bool(final[q]["correct"]) and not start[q]["correct"] for q in members)
        down = sum(bool(start[q]["correct"]) and not final[q]["correct"] for q in members)
        rows[category] = {"n": len(members), "delta": (up - down) / len(members), "mcnemar_p": mcnemar_exact(up, down)}
    return rows


def confirm(start: Mapping[str, Mapping], final: Mapping[str, Mapping], *, alpha: float, start_hash: str,
            final_hash: str, words: tuple[float, float], max_words: float | None = None,
            floors: AcceptanceRules | None = None) -> Confirmation:
    """Decide a night from the start's and the final's outcomes (``{question id: {"correct": bool, "category",
    ...}}``) on the confirmation questions and their mean context ``words`` on the search's questions (where every
    candidate was held to the cap; the confirmation's share is another sample of the same benchmark, a word or two
    away): CONFIRMED when the one-sided p is at most ``alpha``, no category breaks the contract's floor there
    (``floors``: a drop beyond its epsilon whose exact McNemar p, Holm-adjusted over the categories, is at most
    ``alpha``) and the final's context stays within ``max_words`` (the cost's absolute cap; its growth per change was
    checked candidate by candidate), else REFUSED (the start is restored). The floor and the cap can only refuse, so
    the night's false promotion stays at most ``alpha``."""
    ids = sorted(start.keys() & final.keys())
    if not ids:
        raise ValueError("confirmation: the start and the final share no scored question")
    up = sum(bool(final[q]["correct"]) and not start[q]["correct"] for q in ids)
    down = sum(bool(start[q]["correct"]) and not final[q]["correct"] for q in ids)
    p = mcnemar_exact(up, down, "greater")
    score_start = sum(bool(start[q]["correct"]) for q in ids) / len(ids)
    score_final = sum(bool(final[q]["correct"]) for q in ids) / len(ids)
    over = (f"{words[1]:.1f} context words per question exceed max_context_words {max_words:g}"
            if max_words is not None and words[1] > max_words + TOLERANCE else None)
    stats_ = f"{score_start:.3f} -> {score_final:.3f} on {len(ids)} questions, improved {up}, regressed {down}, " \
             f"one-sided McNemar p={p:.4g} (alpha {alpha:g})"
    breached = ({c: q for c, q in floor_breaches(category_rows(start, final, ids),
                                                 floors.model_copy(update={"alpha": alpha})).items()
                 if c not in floors.floor_exempt} if floors is not None else {})
    if over is not None:
        verdict, reason = "REFUSED", f"cost: {over} ({stats_})"
    elif breached:
        verdict, reason = "REFUSED", ("category floor: " + ", ".join(f"{c} (Holm-adjusted p={q:.4g})"
                                                                      for c, q in breached.items())
                                      + f" fell beyond its epsilon ({stats_})")
    elif p <= alpha:
        verdict, reason = "CONFIRMED", f"gain confirmed: {stats_}"
    else:
        verdict, reason = "REFUSED", f"gain not confirmed: {stats_}"
    return Confirmation(verdict=verdict, reason=reason, start=start_hash, final=final_hash, questions=len(ids),
                        score_start=round(score_start, 6), score_final=round(score_final, 6), improved=up,
                        regressed=down, p=p, alpha=alpha, words_start=round(words[0], 3),
                        words_final=round(words[1], 3))
