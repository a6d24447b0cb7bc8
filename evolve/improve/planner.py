"""Planner: map digested symptoms to ranked mutation directions (:class:`~evolve.strategy.moves.Move`).

The symptom-triggered bundle table (``bundles.yaml``) lists, per ``root_cause[qualifier]/category``,
the directions worth trying, most promising first. A ``*`` category matches the aggregate
(all-category) symptom of that root cause; a ``[qualifier]`` entry applies when at least
``min_qualifier_share`` of the symptom's failures show that sub-pattern (see
:data:`evolve.improve.digest.QUALIFIERS`).

Priority of a direction reached through symptom ``s`` at position ``i`` of its candidate list::

    s.share_of_failures * factor / (1 + 0.25 * i)        # severity, decayed down the bundle order
      + effects.reputation(key)                          # track record (reverts lower it)
      - revert_penalty * (effects.reverts(key, s.key)    # reverted for this very symptom,
                          + effects.mismatches(key, s.key))  # or gained without moving it (mechanism refuted)

``factor`` = 1.25 for a category-specific entry, x1.25 again for a qualified one, times the
qualifier's share. With the hypothesis tree enabled, ``i`` is the UCB1 rank instead of the
bundle position and refuted/exhausted hypotheses are skipped. Directions that cannot move the
current value (at the schema bound, already enabled, blocked by an invariant) are dropped, and
so are moves of a path whose switch (:data:`REQUIRES`) is off (a decay half-life while decay is off),
and moves of a dimension the run cannot move (a prompt edit when no LLM serves the prompt's role; see
:func:`evolve.strategy.schema.live_dimensions`).
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from evolve.benchmarks.types import CATEGORIES
from evolve.errors import EvolveError
from evolve.observe.ladder import ROOT_CAUSES
from evolve.improve.digest import QUALIFIERS, WILDCARD, Digest, Symptom
from evolve.improve.effects import DimensionEffects
from evolve.improve.hypotheses import HypothesisTree
from evolve.verify.hypothesis import Prediction, predicted
from evolve.strategy.moves import EDIT, Move, Step, set_value
from evolve.strategy.prompts import add_instruction
from evolve.strategy.schema import EvolvableDimension, bundles_path, evolvable_dimensions
from evolve.strategy.invariants import invariant_violations
from evolve.strategy.paths import value_at, with_value
from evolve.strategy import strict_yaml
from evolve.verify.critic import fixing_groups, group_of
from evolve.strategy.strict_yaml import YAMLInputError

SPECIFICITY = 1.25
POSITION_DECAY = 0.25
#: The settings a path acts only under (a path, or a section standing for its paths other than the switch itself,
#: mapped to the values its switches must have): moving it while they do not hold changes nothing.
REQUIRES: dict[str, dict[str, Any]] = {
    "retrieval.time_decay.half_life_days": {"retrieval.time_decay.enabled": True},
    "extraction.date_style": {"extraction.resolve_relative_dates": True},
    "retrieval.rerank.top_n": {"retrieval.rerank.enabled": True},
    "retrieval.rerank.overlap_weight": {"retrieval.rerank.enabled": True},
    "retrieval.second_hop": {"retrieval.second_hop.enabled": True},
    "images": {"images.route.enabled": True},
    "features.fusion": {"features.fusion.enabled": True},
    "retrieval.graph": {"retrieval.graph.enabled": True},
    "assembly.fact_unit": {"assembly.unit": "memory"},
    "assembly.fact_span": {"assembly.unit": "memory", "assembly.fact_unit": "span"},
    "assembly.reserved.profile": {"features.profile_layer": True},
    "assembly.reserved.corrections": {"features.profile_layer": True},
    "lifecycle.decay": {"lifecycle.decay.enabled": True},
    "lifecycle.category_channel": {"lifecycle.category_channel.enabled": True},
    "lifecycle.expiry.lead_days": {"lifecycle.expiry.mode": "kernel"},
    "lifecycle.expiry.upcoming_floor": {"lifecycle.expiry.mode": "kernel"},
    "lifecycle.expiry.after_half_life_days": {"lifecycle.expiry.mode": "kernel"},
    "lifecycle.expiry.hide_passed": {"lifecycle.expiry.mode": "kernel"},
    "lifecycle.numeric_rescue.min_relevance": {"lifecycle.decay.enabled": True},
}
_BUNDLE_KEY = re.compile(r"^(?P<cause>[a-z_]+)(?:\[(?P<qualifier>[a-z_]+)\])?/(?P<category>[a-z0-9_]+|\*)$")


class BundleError(EvolveError, ValueError):
    """The bundle table is malformed; the message names the file, line and entry."""


# ---------------------------------------------------------------- legal moves


def _typed(dim: EvolvableDimension, value: float) -> int | float:
    return int(round(value)) if dim.kind == "integer" else round(float(value), 10)


def max_steps(dim: EvolvableDimension) -> int:
    """How many ``step``s fit in one move of at most ``max_step``."""
    return int(math.floor(dim.max_step / dim.step + 1e-9))


def move_values(strategy: dict, dim: EvolvableDimension, step: Step) -> list:
    """Values ``step`` can move ``dim`` to from its current value, nearest first: within the
    schema range, at most ``max_step`` away (in multiples of ``step``), and breaking no invariant.
    ValueError if the step is not legal for the dimension's kind."""
    step.check(dim)
    current = value_at(strategy, dim.path)
    if step.direction == "enable":
        values = [True] if current is False else []
    elif step.direction == "disable":
        values = [False] if current is True else []
    elif step.direction == EDIT:
        edited = add_instruction(current, step.value)
        values = [edited] if edited is not None else []
    elif not step.relative:
        target = set_value(dim, step.value)
        values = [target] if target != current else []
    elif step.at_bound(dim, current):
        values = []
    else:
        sign = 1 if step.direction == "increase" else -1
        values = []
        for k in range(1, max_steps(dim) + 1):
            value = _typed(dim, min(dim.high, max(dim.low, current + sign * k * dim.step)))
            if value != current and value not in values:
                values.append(value)
    return [v for v in values if not invariant_violations(with_value(strategy, dim.path, v))]


# ---------------------------------------------------------------- bundle table


#: The bundle table's list of moves that shrink the packed context, tried with a gain the cost rule blocked.
RELIEF_KEY = "cost_relief"
#: The bundle table's list of moves that pack more, offered first while the context leaves its word cap unused.
FILL_KEY = "budget_fill"
#: Share of the word cap below which the context counts as leaving it unused.
FILL_BELOW = 0.9


@dataclass(frozen=True)
class BundleTable:
    """Validated ``root_cause[qualifier]/category -> [move text, ...]`` as written in the table, plus the
    :data:`RELIEF_KEY` moves."""

    entries: dict[str, tuple[str, ...]]
    relief: tuple[str, ...] = ()
    fill: tuple[str, ...] = ()

    def lookup(self, symptom: Symptom, min_qualifier_share: float) -> list[tuple[str, float, str]]:
        """``(key, factor, table_key)`` for every direction the symptom triggers, in table order, deduplicated."""
        specific = symptom.category != WILDCARD
        base = SPECIFICITY if specific else 1.0
        qualified = sorted(((share, q) for q, share in symptom.qualifiers.items() if share >= min_qualifier_share),
                           key=lambda t: (-t[0], t[1]))
        sources = [(f"{symptom.root_cause}[{q}]/{symptom.category}", base * SPECIFICITY * share)
                   for share, q in qualified]
        sources.append((symptom.key, base))
        out: dict[str, tuple[str, float, str]] = {}
        for table_key, factor in sources:
            for key in self.entries.get(table_key, ()):
                out.setdefault(key, (key, factor, table_key))
        return list(out.values())


def _validate_key(table_key: str) -> None:
    match = _BUNDLE_KEY.match(table_key)
    if not match:
        raise ValueError("expected '<root_cause>[<qualifier>]/<category or *>' (qualifier optional)")
    cause, qualifier, category = match["cause"], match["qualifier"], match["category"]
    if cause not in ROOT_CAUSES:
        raise ValueError(f"unknown root cause {cause!r} (known: {', '.join(ROOT_CAUSES)})")
    if qualifier is not None and qualifier not in QUALIFIERS.get(cause, ()):
        known = ", ".join(QUALIFIERS.get(cause, ())) or "none"
        raise ValueError(f"unknown qualifier {qualifier!r} for {cause} (known: {known})")
    if category != WILDCARD and category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r} (known: {', '.join(CATEGORIES)}, *)")


def _validate_entry(entry: str, dims: dict[str, EvolvableDimension]) -> None:
    for step in Move.parse(entry).steps:
        if step.path not in dims:
            raise ValueError(f"{step.path!r} is not an evolvable schema path")
        step.check(dims[step.path])


def requirements(path: str, table: Mapping[str, dict[str, Any]] = REQUIRES) -> dict[str, Any]:
    """The settings ``path`` acts only under (``table``'s entry for the path or its section, the switch itself
    excepted; ``{}`` for a path that always acts)."""
    for key, settings in table.items():
        if (path == key or path.startswith(key + ".")) and path not in settings:
            return settings
    return {}


def switched_off(strategy: dict, move: Move, path: str) -> bool:
    """Whether ``path`` acts only under a setting (:data:`REQUIRES`) that ``strategy`` does not have and that
    ``move`` does not make."""
    return any(value_at(strategy, switch) != value and Step.to(switch, value) not in move.steps
               for switch, value in requirements(path).items())


def can_move(strategy: dict, move: Move, dims: dict[str, EvolvableDimension]) -> bool:
    """Whether every step of ``move`` is on a dimension of ``dims``, is not switched off (:data:`REQUIRES`) and has a
    legal move from ``strategy`` as the steps before it left it (its smallest), as the evolver applies them: so
    ``retrieval.top_k::increase&retrieval.rerank.top_n::increase`` can move where ``top_n`` equals ``top_k``."""
    moved = strategy
    for step in move.steps:
        if step.path not in dims or switched_off(strategy, move, step.path):
            return False
        values = move_values(moved, dims[step.path], step)
        if not values:
            return False
        moved = with_value(moved, step.path, values[0])
    return True


def parse_bundles(text: str, source: str = "<bundles>",
                  dims: dict[str, EvolvableDimension] | None = None) -> BundleTable:
    """Parse and validate a bundle table against the schema's evolvable dimensions."""
    dims = dims or evolvable_dimensions()
    try:
        root, _ = strict_yaml.compose(text)
    except YAMLInputError as exc:
        where = f"{exc.path}: " if exc.path else ""
        raise BundleError(f"{source}:{exc.line or '?'}: {where}{exc.problem}") from None
    if not isinstance(root, yaml.MappingNode):
        raise BundleError(f"{source}: expected a mapping of '<root_cause>/<category>' to direction lists")
    entries: dict[str, tuple[str, ...]] = {}
    for key_node, value_node in root.value:
        table_key, line = str(key_node.value), key_node.start_mark.line + 1
        try:
            if table_key not in (RELIEF_KEY, FILL_KEY):
                _validate_key(table_key)
        except ValueError as exc:
            raise BundleError(f"{source}:{line}: {table_key}: {exc}") from None
        if not isinstance(value_node, yaml.SequenceNode) or not value_node.value:
            raise BundleError(f"{source}:{line}: {table_key}: expected a non-empty list of '<path>::<direction>'")
        keys: list[str] = []
        for item in value_node.value:
            item_line = item.start_mark.line + 1
            if not isinstance(item, yaml.ScalarNode):
                raise BundleError(f"{source}:{item_line}: {table_key}: expected a '<path>::<direction>' string")
            try:
                _validate_entry(item.value, dims)
            except ValueError as exc:
                raise BundleError(f"{source}:{item_line}: {table_key}: {item.value}: {exc}") from None
            if item.value in keys:
                raise BundleError(f"{source}:{item_line}: {table_key}: {item.value}: listed twice")
            keys.append(item.value)
        entries[table_key] = tuple(keys)
    relief, fill = entries.pop(RELIEF_KEY, ()), entries.pop(FILL_KEY, ())
    return BundleTable(entries, relief, fill)


def load_bundles(path: str | Path | None = None) -> BundleTable:
    """The bundle table at ``path`` (default: the active schema's, :func:`evolve.strategy.schema.bundles_path`)."""
    path = Path(path) if path is not None else bundles_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_bundles(text, str(path))


# ---------------------------------------------------------------- planning


@dataclass(frozen=True)
class Direction:
    """A planned move (one step, or several coupled), the symptom it addresses, its priority and why."""

    move: Move
    symptom_key: str
    priority: float
    why: str
    #: Candidates whose accepted changes this move joins (see :func:`evolve.loop.learning.merged`).
    merged_from: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The move's text: the key of its dimension effects, hypotheses and Optuna parameter."""
        return str(self.move)

    @property
    def path(self) -> str:
        return self.move.first.path

    @property
    def direction(self) -> str:
        return self.move.first.verb

    @property
    def prediction(self) -> Prediction | None:
        """The hypothesis the direction carries: its symptom's failure category goes down (a wildcard symptom's over
        every category; ``None`` for a symptom naming no root cause)."""
        return predicted(self.symptom_key)

    def to_dict(self) -> dict:
        out = {"key": self.key, "path": self.path, "direction": self.direction, "symptom_key": self.symptom_key,
               "priority": self.priority, "why": self.why}
        if self.prediction is not None:
            out["predict"] = str(self.prediction)
        return {**out, "merged_from": list(self.merged_from)} if self.merged_from else out


def interleave(directions: list[Direction]) -> list[Direction]:
    """Round-robin over symptoms, keeping each symptom's internal order and symptoms ordered by their best."""
    by_symptom: dict[str, list[Direction]] = {}
    for d in directions:
        by_symptom.setdefault(d.symptom_key, []).append(d)
    queues = list(by_symptom.values())
    out: list[Direction] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        out.extend(q[depth] for q in queues if depth < len(q))
    return out


class Planner:
    """Rule-based :class:`~evolve.improve.proposer.Proposer` over the bundle table, dimension effects and
    (optionally) the UCB1 tree; ``dims`` are the dimensions the run may move (default: every evolvable one)."""

    def __init__(self, table: BundleTable, effects: DimensionEffects, tree: HypothesisTree | None = None,
                 use_tree: bool = False, max_symptoms: int = 8, min_qualifier_share: float = 0.25,
                 revert_penalty: float = 0.25,
                 cost_violation: Callable[[float, float], str | None] | None = None,
                 dims: dict[str, EvolvableDimension] | None = None, max_words: float | None = None):
        if use_tree and tree is None:
            raise ValueError("Planner: use_tree=True needs a HypothesisTree")
        self.table, self.effects, self.tree, self.use_tree = table, effects, tree, use_tree
        self.max_symptoms, self.min_qualifier_share = max_symptoms, min_qualifier_share
        self.revert_penalty, self.cost_violation, self.max_words = revert_penalty, cost_violation, max_words
        self.dims = dims if dims is not None else evolvable_dimensions()

    def plan(self, digest: Digest, strategy: dict, max_directions: int = 6, *,
             words: float | None = None) -> list[Direction]:
        """The top directions, interleaved across symptoms (each symptom's best first, then each one's
        second, ...) so that one round's candidates probe several diagnosed failures instead of one. Given
        ``cost_violation(words_parent, words_candidate)`` (the decision's cost rule) and the strategy's mean context
        ``words``, a direction whose recorded context growth would break it goes behind the others (the decision
        would not accept its gain). While ``words`` leave more than a tenth of ``max_words`` (the cost's word cap)
        unused, the best-reputed movable move of the table's ``budget_fill`` comes first, for the top symptom."""
        ranked = interleave(self.propose(digest, strategy, self.effects, self.dims))
        if self.cost_violation is not None and words:
            fits = [d for d in ranked if self._fits(d, words)]
            ranked = fits + [self._deferred(d, words) for d in ranked if not self._fits(d, words)]
        fill = self._fill(digest, strategy, words)
        taken = {d.key for d in fill}
        return (fill + [d for d in ranked if d.key not in taken])[:max_directions]

    def _fill(self, digest: Digest, strategy: dict, words: float | None) -> list[Direction]:
        """The best-reputed ``budget_fill`` move that can move from ``strategy`` (table order breaks ties), when its
        context leaves the word cap unused, for the top symptom its groups can fix (as the critic judges scope); one a
        round, so the diagnosed symptoms keep the other slots."""
        if self.max_words is None or not words or words >= FILL_BELOW * self.max_words:
            return []
        movable = [key for key in self.table.fill if can_move(strategy, Move.parse(key), self.dims)]
        best = max(movable, key=self.effects.reputation, default=None)  # max keeps the first of equals
        groups = {group_of(step.path) for step in Move.parse(best).steps} if best else set()
        top = next((s for s in digest.ranked() if groups & set(fixing_groups(s.root_cause))), None)
        if top is None:
            return []
        why = (f"fills the unused word budget: {words:.0f} of {self.max_words:g} context words per question packed; "
               f"for {top.key} ({top.count} failures), the top symptom a change in {'/'.join(sorted(groups))} can fix")
        return [Direction(Move.parse(best), top.key, round(top.share_of_failures + self.effects.reputation(best), 6),
                          why)]

    def _fits(self, direction: Direction, words: float) -> bool:
        growth = self.effects.growth(direction.key)
        return growth is None or self.cost_violation(words, words * (1 + growth)) is None

    def _deferred(self, direction: Direction, words: float) -> Direction:
        growth = self.effects.growth(direction.key)
        why = (f"{direction.why}; deferred: its recorded context growth ({growth:+.0%}) would take {words:.0f} "
               f"words past the cost limits")
        return dataclasses.replace(direction, why=why)

    def propose(self, digest: Digest, strategy: dict, effects: DimensionEffects,
                dims: dict[str, EvolvableDimension]) -> list[Direction]:
        """All triggered, movable directions of the ``max_symptoms`` most severe symptoms that have one (a cell the
        table lists nothing movable for takes no place), highest priority first (each key once, via its best symptom).

        With the tree enabled, hypotheses found at their bound are marked exhausted in it (and un-marked
        once movable again)."""
        best: dict[str, Direction] = {}
        read = 0
        for symptom in digest.ranked():
            if read == self.max_symptoms:
                break
            movable: dict[str, tuple[float, str]] = {}  # key -> (factor, table key), in table order
            for key, factor, table_key in self.table.lookup(symptom, self.min_qualifier_share):
                move = Move.parse(key)
                if move.first.path not in dims or switched_off(strategy, move, move.first.path):
                    continue  # a dimension this run cannot move (a prompt no LLM reads), or switched off
                movable_now = can_move(strategy, move, dims)
                if self.use_tree:
                    self.tree.mark_bound(key, not movable_now, parent=symptom.key)
                if movable_now:
                    movable[key] = (factor, table_key)
            read += bool(movable)
            order = self.tree.select(list(movable), parent=symptom.key) if self.use_tree else list(movable)
            for position, key in enumerate(order):
                factor, table_key = movable[key]
                direction = self._direction(symptom, key, factor, table_key, position, effects)
                if key not in best or direction.priority > best[key].priority:
                    best[key] = direction
        return sorted(best.values(), key=lambda d: (-d.priority, d.key))

    def _direction(self, symptom: Symptom, key: str, factor: float, table_key: str, position: int,
                   effects: DimensionEffects) -> Direction:
        severity = symptom.share_of_failures * factor / (1 + POSITION_DECAY * position)
        reputation = effects.reputation(key)
        reverts, mismatches = effects.reverts(key, symptom.key), effects.mismatches(key, symptom.key)
        priority = round(severity + reputation - self.revert_penalty * (reverts + mismatches), 6)
        rank_kind = "UCB rank" if self.use_tree else "bundle position"
        refuted = f", {mismatches} gain(s) that did not move it" if mismatches else ""
        why = (f"{symptom.key}: {symptom.count} failures ({symptom.share_of_failures:.0%} of failures, "
               f"{symptom.share_of_category:.0%} of {symptom.category}); via {table_key}, {rank_kind} {position + 1}; "
               f"reputation {reputation:+.3f}; {reverts} revert(s) for this symptom{refuted}")
        return Direction(Move.parse(key), symptom.key, priority, why)
