"""Independent soft review of a gated, probed candidate before its full evaluation.

The critic runs only after every hard gate passed (:mod:`evolve.verify.gates`) and the probe screen let the
candidate through, so it can never admit a candidate a gate or the probe refused; it can only hold back one they let
through. It sees the probe's deltas and up to a few probe questions the candidate improved and regressed. Labels, by
precedence:

- ``out_of_scope`` the diff touches only stages downstream of where the evidence was lost, which
  cannot recover it (the stages of :mod:`evolve.observe.ladder` map to the groups ingestion ->
  retrieval -> assembly -> answering; ingestion_gap is fixable in ingestion, retrieval_gap in
  ingestion/retrieval, kf_filtered up to assembly, generation_error anywhere; groups come from the
  schema's ``x-evolvable``; a prompt belongs to its section's group). A root cause without a stage
  (``unresolved``, or no target) skips this check.
- ``duplicate``    the change keys equal those of a recently evaluated candidate.
- ``risky``        a change key has reputation <= ``reputation_floor``, a numeric change moves more
  than ``jump_fraction`` of its dimension's ``max_step``, or the probe's objective fell.
- ``actionable``   none of the above.

Only ``duplicate`` and ``out_of_scope`` block (:attr:`CriticReview.blocks`); ``risky`` is advice
the engine may weigh, e.g. by evaluating the candidate last.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Protocol

from evolve.numbers import is_real
from evolve.observe.ladder import Stage, stage_of, through
from evolve.strategy.schema import evolvable_dimensions
from evolve.strategy.diff import dimension_for, prompt_of

#: The dimension group whose changes act at each stage of the evidence-loss ladder.
STAGE_GROUP = {Stage.INGESTION: "ingestion", Stage.RETRIEVAL: "retrieval", Stage.FILTERING: "assembly",
               Stage.ASSEMBLY: "assembly", Stage.GENERATION: "answering"}


def loss_group(root_cause: str | None) -> str | None:
    """The group of the stage where ``root_cause`` lost the evidence (``None``: a cause without a stage)."""
    stage = stage_of(root_cause)
    return STAGE_GROUP[stage] if stage is not None else None


def fixing_groups(root_cause: str) -> tuple[str, ...]:
    """Groups whose changes can recover evidence lost at ``root_cause``: its stage and every upstream one."""
    stage = stage_of(root_cause)
    return tuple(dict.fromkeys(STAGE_GROUP[s] for s in through(stage))) if stage is not None else ()


def out_of_scope(root_cause: str | None, paths: Iterable[str]) -> str | None:
    """Why a change of ``paths`` cannot recover evidence lost at ``root_cause``: none of its groups is one of
    :func:`fixing_groups`. ``None`` when one is, or when the root cause has no stage (then scope is not checked)."""
    if loss_group(root_cause) is None:
        return None
    touched = sorted({g for g in map(group_of, paths) if g})
    allowed = fixing_groups(root_cause or "")
    if set(touched) & set(allowed):
        return None
    return f"needs a change in {'/'.join(allowed)}; diff touches {touched or 'nothing evolvable'}"


_BLOCKING = ("duplicate", "out_of_scope")


@dataclass
class CriticPacket:
    """Everything the critic sees about one candidate.

    ``examples`` (short question dicts of the target symptom) and ``probe_examples`` (probe questions improved and
    regressed) are carried for the review record and for model-based critics; the deterministic rules read only the
    probe's figures (``probe``: n, scores, delta, what changed, McNemar p).
    """

    diff: dict[str, list[Any]]  # {path: [old, new]} from evolve.strategy.diff.effective_diff
    change_keys: list[str]
    root_cause: str | None
    category: str | None
    reputations: dict[str, float] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    recent_keys: list[list[str]] = field(default_factory=list)  # change keys of recent candidates
    probe: dict[str, Any] | None = None
    probe_examples: dict[str, list[dict]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CriticReview:
    label: str
    reasons: list[str]

    @property
    def blocks(self) -> bool:
        """True only for ``duplicate`` and ``out_of_scope``."""
        return self.label in _BLOCKING

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "reasons": list(self.reasons), "blocks": self.blocks}


class Critic(Protocol):
    """Anything that labels a gated candidate: :class:`DeterministicCritic` or an LLM critic."""

    def review(self, packet: CriticPacket) -> CriticReview: ...


def group_of(path: str) -> str | None:
    """Dimension group of a strategy path (``None`` for paths outside the evolvable space)."""
    dim = dimension_for(prompt_of(path) or path)
    return dim.group if dim else None


class DeterministicCritic:
    """Rule-based critic; thresholds are constructor arguments so runs can record them."""

    def __init__(self, reputation_floor: float = -0.5, jump_fraction: float = 0.5):
        if not 0 < jump_fraction <= 1:
            raise ValueError(f"jump_fraction: must be in (0, 1], got {jump_fraction}")
        self.reputation_floor = reputation_floor
        self.jump_fraction = jump_fraction

    def review(self, packet: CriticPacket) -> CriticReview:
        symptom = f"{packet.root_cause}/{packet.category}"
        if not packet.diff:
            return CriticReview("out_of_scope", ["empty diff"])
        gap = out_of_scope(packet.root_cause, packet.diff)
        if gap is not None:
            return CriticReview("out_of_scope", [f"{symptom} {gap}"])
        keys = sorted(packet.change_keys)
        if any(sorted(recent) == keys for recent in packet.recent_keys):
            return CriticReview("duplicate", [f"same change keys as a recent candidate: {keys}"])
        risks = self._risks(packet)
        if risks:
            return CriticReview("risky", risks)
        stage = loss_group(packet.root_cause)
        scope = f"targets the {stage} stage of {symptom}" if stage else f"no stage for {symptom}; scope not checked"
        return CriticReview("actionable", [f"{', '.join(keys)} {scope}"])

    def _risks(self, packet: CriticPacket) -> list[str]:
        risks = [
            f"{key}: reputation {packet.reputations[key]:+.2f} <= {self.reputation_floor:+.2f}"
            for key in sorted(packet.change_keys)
            if key in packet.reputations and packet.reputations[key] <= self.reputation_floor
        ]
        dims = evolvable_dimensions()
        for path, (old, new) in sorted(packet.diff.items()):
            dim = dimension_for(path, dims)
            numeric = is_real(old) and is_real(new)
            if dim and dim.max_step and numeric and abs(new - old) > self.jump_fraction * dim.max_step:
                risks.append(
                    f"{path}: jump {abs(new - old):g} exceeds {self.jump_fraction:g} x max_step {dim.max_step:g}"
                )
        if packet.probe and is_real(packet.probe.get("delta")) and packet.probe["delta"] < 0:
            risks.append(f"probe: the objective fell {packet.probe['delta']:+.4f} on {packet.probe.get('n')} questions")
        return risks
