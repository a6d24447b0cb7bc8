"""A night: the rounds of one ``memevolve run``, when they end, and the confirmation of the night's final.

A night runs rounds until the run's round count, its patience (rounds in a row that applied no change), its
evaluation count or its wall time is spent (config ``night``). Its state is kept in the stores with each round's
commit, so a night that a crash or a budget stop cut short goes on in the next run. The round that ends it also
decides it: with ``night.confirmation`` the final is compared with the night's start on the confirmation questions
(:func:`evolve.verify.confirmation.confirm`); refused, the start is restored and becomes the best-ever checkpoint
again, so no later round can bring the refused strategy back. The round journals a ``NIGHT`` entry either way.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from evolve.loop.config import NightConfig
from evolve.state.entries import EndReason, NightRecord

__all__ = ["EndReason", "NightRecord", "NightState"]


class NightState(BaseModel):
    """An open night, as kept in the stores' ``state.json`` (field ``night``) between its rounds."""

    model_config = ConfigDict(extra="forbid")

    start: str = Field(description="hash of the strategy the night started from")
    first_round: int = Field(ge=1)
    rounds: int = Field(0, ge=0, description="rounds committed in this night")
    idle: int = Field(0, ge=0, description="rounds in a row, up to the latest, that applied no change")
    evaluations: int = Field(0, ge=0, description="candidates fully compared in this night")

    def after_round(self, applied: bool, compared: int) -> "NightState":
        """The state once one more round, which applied a change or not and fully compared ``compared`` candidates,
        is committed."""
        return self.model_copy(update={"rounds": self.rounds + 1, "idle": 0 if applied else self.idle + 1,
                                       "evaluations": self.evaluations + compared})

    def ends(self, config: NightConfig, *, minutes: float, last: bool) -> EndReason | None:
        """Why the night ends after its latest round (``last``: the run has no round left), or ``None``."""
        if config.patience is not None and self.idle >= config.patience:
            return "patience"
        if config.max_evaluations is not None and self.evaluations >= config.max_evaluations:
            return "evaluations"
        if config.max_minutes is not None and minutes >= config.max_minutes:
            return "minutes"
        return "rounds" if last else None
