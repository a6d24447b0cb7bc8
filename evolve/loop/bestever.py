"""The best-ever checkpoint rule: checkpoint a new best, and restore the best when the score fell too far below it."""
from __future__ import annotations

from dataclasses import dataclass, field

from evolve.state.checkpoint import CheckpointRecord
from evolve.state.stores import RoundBundle
from evolve.strategy.artifact import policy_hash


@dataclass
class BestEver:
    """The outcome for one round: what to checkpoint, the record to restore (if any) and journal entries."""

    checkpoint: dict | None = None
    restore: CheckpointRecord | None = None
    journal: list[tuple[str, dict]] = field(default_factory=list)

    def apply(self, bundle: RoundBundle) -> None:
        bundle.checkpoint = self.checkpoint
        bundle.journal.extend(self.journal)


def best_ever(best: CheckpointRecord | None, round_no: int, strategy: dict, score: float | None,
              restore_threshold: float, meta: dict) -> BestEver:
    """Compare the round's outcome (``strategy`` scoring ``score``) with the stored best-ever ``best``. A round that
    scored no question (every one failed under ``on_role_error: mark``) says nothing about the strategy: it neither
    checkpoints nor restores."""
    out = BestEver()
    if best is not None and best.fallback_from:
        out.journal.append(("RESTORE", {"what": "checkpoint", "fallback_from": best.fallback_from,
                                        "refused": [list(r) for r in best.refused],
                                        "using": best.strategy_hash, "generation": best.generation}))
        if score <= best.score:  # re-save the intact generation so CURRENT points at a good checkpoint again
            out.checkpoint = {"strategy": best.strategy, "score": best.score, "meta": best.meta}
    if score is None:
        return out
    if best is None or score > best.score:
        out.checkpoint = {"strategy": strategy, "score": score,
                          "meta": {"round": round_no, **meta, "policy_hash": policy_hash(strategy)}}
    elif score < best.score - restore_threshold:
        out.restore = best
    return out
