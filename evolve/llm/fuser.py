"""The fusion judge role (``fuser``): an LLM decides, for each observation with candidate packs, CreatePack,
UpdatePack(pack) or Standalone (:mod:`evolve.runtime.fusion`). The candidates are those the rule judge sees; a turn
with none opens its own pack without a call. A reply that stays unusable after the repair turns keeps the
observation standalone: an ambiguous event stays atomic and is recovered by its own words."""
from __future__ import annotations

from collections import Counter
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.benchmarks.types import Turn
from evolve.llm.client import LLMClient
from evolve.llm.prompting import ask_json, fill, json_payload, load_prompt, validation_errors
from evolve.runtime.fusion import Candidate, Decision, Pack
from evolve.runtime.text import format_date
from evolve.strategy.policy import Fusion

FUSE_PROMPT = "fuse.v1"
FUSE_SCHEMA = {"type": "object", "required": ["decision"], "properties": {
    "decision": {"type": "string", "enum": ["update", "create", "standalone"]},
    "pack": {"type": ["integer", "null"]}}}


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    decision: Literal["update", "create", "standalone"]
    pack: int | None = None


def _when(turn: Turn) -> str:
    return turn.timestamp.strftime("%Y-%m-%d %H:%M") if turn.timestamp else "undated"


def _line(turn: Turn) -> str:
    return f"({_when(turn)}) {turn.speaker}: {turn.text}"


class LLMFusionJudge:
    """Decides through the framework's fusion prompt; counts its decisions (``decided``) and the observations it had to
    keep standalone for want of a usable reply (``unusable``)."""

    def __init__(self, client: LLMClient, max_attempts: int = 2):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.client, self.max_attempts = client, max_attempts
        self.name = f"llm-fuser/{client.model}"
        self.unusable = 0
        self.decided: Counter[str] = Counter()
        self._template = load_prompt(FUSE_PROMPT)

    def decide(self, turn: Turn, candidates: Sequence[Candidate], policy: Fusion,
               recent: Sequence[Pack] = ()) -> Decision:
        if not candidates:
            return Decision("create")
        packs = "\n".join(f"{n}. " + " | ".join(_line(t) for t in c.pack.members)
                          for n, c in enumerate(candidates, start=1))
        ended = "\n".join(f"- {_line(p.anchor)} (and {len(p.members) - 1} more until {_when(p.members[-1])})"
                           for p in recent) or "(none)"
        prompt = fill(self._template, time=format_date(turn.timestamp) if turn.timestamp else "undated",
                      observation=_line(turn), packs=packs, recent=ended)

        def parse(reply: str) -> tuple[_Reply | None, list[str]]:
            try:
                value = _Reply.model_validate(json_payload(reply))
            except ValueError as exc:
                return None, [validation_errors(exc) if isinstance(exc, ValidationError) else str(exc)]
            if value.decision == "update" and not (value.pack is not None and 1 <= value.pack <= len(candidates)):
                return None, [f"pack: an update names one of the packs 1 to {len(candidates)}, got {value.pack}"]
            return value, []

        reply, errors, _ = ask_json(self.client, prompt, parse, self.max_attempts, FUSE_SCHEMA)
        if reply is None or errors:
            self.unusable += 1
            return Decision("standalone")
        self.decided[reply.decision] += 1
        return Decision(reply.decision, reply.pack - 1 if reply.decision == "update" else None)
