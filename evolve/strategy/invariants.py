"""The cross-field invariants JSON Schema cannot express, each with its check and, where the optimizer can break
it, the repair the evolver applies. The schema's ``x-invariants`` prose lists exactly these rules (a test holds
them equal), validation runs every check, and the evolver runs every repair."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from evolve.strategy.paths import get_path
from evolve.strategy.schema import framework_markers, is_framework

#: ``(path, rule, offending value)`` of one broken invariant.
Violation = tuple[str, str, Any]
#: ``value(path)`` reads the assignment being repaired (changes first, then the strategy).
Lookup = Callable[[str], Any]

WEIGHT_CHANNELS = ("bm25", "vector", "subquery")


@dataclass(frozen=True)
class Invariant:
    rule: str  # as stated in the schema's ``x-invariants``
    check: Callable[[dict], Iterator[Violation]]
    repair: Callable[[Lookup, dict[str, float]], dict[str, Any]] | None = None  # (value, step by path) -> fixes


def _window(s: dict) -> Iterator[Violation]:
    ex = s["extraction"]
    if ex["window_overlap"] >= ex["window_size"]:
        yield "extraction.window_overlap", "must be < extraction.window_size", ex["window_overlap"]


def _top_n(s: dict) -> Iterator[Violation]:
    rt = s["retrieval"]
    if rt["rerank"]["top_n"] > rt["top_k"]:
        yield "retrieval.rerank.top_n", "must be <= retrieval.top_k", rt["rerank"]["top_n"]


def _pool(s: dict) -> Iterator[Violation]:
    rt = s["retrieval"]
    if rt["candidate_pool"] < rt["top_k"]:
        yield "retrieval.candidate_pool", "must be >= retrieval.top_k", rt["candidate_pool"]


def _weights(s: dict) -> Iterator[Violation]:
    rt = s["retrieval"]
    weight_sets = {"retrieval.weights": rt["weights"]}
    weight_sets.update({f"retrieval.intent_overrides.{k}.weights": v["weights"] for k, v in rt["intent_overrides"].items()})
    for path, weights in weight_sets.items():
        if sum(weights.values()) <= 0:
            yield path, "channel weights must sum to more than 0", weights


def _reserved(s: dict) -> Iterator[Violation]:
    reserved = s["assembly"]["reserved"]["profile"] + s["assembly"]["reserved"]["corrections"]
    if reserved >= 1:
        yield "assembly.reserved", "profile + corrections must be < 1", reserved


def _markers(s: dict) -> Iterator[Violation]:
    for path, needed in framework_markers().items():
        section, key = path.split(".")
        prompt = s.get(section, {}).get(key)
        if not isinstance(prompt, dict):
            continue
        for marker in needed:
            if marker not in prompt["template"]:
                yield (f"{path}.template", f"must contain marker {marker!r}, which the framework requires for {path}",
                       None)
        for marker in prompt["required_markers"]:
            if marker not in prompt["template"]:
                yield f"{path}.template", f"must contain required marker {marker!r}", None


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("extraction.window_overlap < extraction.window_size", _window,
              lambda v, step: {"extraction.window_overlap": min(v("extraction.window_overlap"),
                                                                v("extraction.window_size") - 1)}),
    Invariant("retrieval.rerank.top_n <= retrieval.top_k", _top_n,
              lambda v, step: {"retrieval.rerank.top_n": min(v("retrieval.rerank.top_n"), v("retrieval.top_k"))}),
    Invariant("retrieval.candidate_pool >= retrieval.top_k", _pool,
              lambda v, step: {"retrieval.candidate_pool": max(v("retrieval.candidate_pool"), v("retrieval.top_k"))}),
    Invariant("sum(retrieval.weights) > 0, and for every intent override", _weights,
              lambda v, step: {} if sum(v(f"retrieval.weights.{c}") for c in WEIGHT_CHANNELS) > 0
              else {"retrieval.weights.bm25": step["retrieval.weights.bm25"]}),
    Invariant("assembly.reserved.profile + assembly.reserved.corrections < 1", _reserved,
              lambda v, step: {} if v("assembly.reserved.profile") + v("assembly.reserved.corrections") < 1
              else {"assembly.reserved.corrections": round(max(0.0, 1 - v("assembly.reserved.profile")
                                                               - step["assembly.reserved.corrections"]), 10)}),
    Invariant("every prompt's required_markers occur in its template", _markers),
)


def invariant_violations(strategy: dict) -> list[Violation]:
    """Every broken invariant of a schema-valid strategy, in table order (none under an external knob schema: the
    invariants are the framework's)."""
    return [v for inv in INVARIANTS for v in inv.check(strategy)] if is_framework() else []


def repair(strategy: dict, changes: dict[str, Any], steps: dict[str, float]) -> dict[str, Any]:
    """``changes`` adjusted so that every repairable invariant holds once applied to ``strategy``
    (``steps``: the schema step of each evolvable path)."""
    out = dict(changes)
    if not is_framework():
        return out

    def value(path: str) -> Any:
        return out[path] if path in out else get_path(strategy, path)

    for inv in INVARIANTS:
        if inv.repair is not None:
            out.update(inv.repair(value, steps))
    return out
