"""Benchmark adapters: every source format becomes a :class:`Benchmark`; :func:`load_benchmark` picks one by spec."""
from __future__ import annotations

from pathlib import Path

from evolve.benchmarks.locomo import load_locomo
from evolve.benchmarks.longmemeval import load_longmemeval
from evolve.benchmarks.lifecycle import generate_lifecycle
from evolve.benchmarks.probes import load_probes
from evolve.benchmarks.scene_gen import scenes_bench
from evolve.benchmarks.scenes import load_scenes
from evolve.benchmarks.synthetic import generate_synthetic, write_locomo
from evolve.benchmarks.types import (CATEGORIES, LIFECYCLE_CATEGORIES, LOCOMO_CATEGORIES, LONGMEMEVAL_CATEGORIES,
                                     Benchmark, BenchmarkError, Conversation, Question, Session, Turn, file_spec)

__all__ = ["CATEGORIES", "LIFECYCLE_CATEGORIES", "LOCOMO_CATEGORIES", "LONGMEMEVAL_CATEGORIES", "Benchmark", "BenchmarkError", "Conversation", "Question", "Session", "Turn",
           "generate_lifecycle", "generate_synthetic", "load_benchmark", "load_locomo", "load_longmemeval", "select_questions",
           "write_locomo"]

_FILE_LOADERS = {"locomo": load_locomo, "longmemeval": load_longmemeval, "probes": load_probes, "scenes": load_scenes}
SPEC_HELP = ("expected 'locomo:PATH[#CONV,...]', 'longmemeval:PATH[#CONV,...]', 'probes:PATH[#CONV,...]', "
             "'scenes:PATH[#CONV,...]', 'synthetic[:SEED[:N_PERSONAS]]', 'lifecycle[:SEED[:N_PERSONAS]]' or "
             "'scenegen[:SEED[:HOMES]]'")
_GENERATORS = {"synthetic": generate_synthetic, "lifecycle": generate_lifecycle, "scenegen": scenes_bench}


def _generated(spec: str, args: list[str]) -> Benchmark:
    if len(args) > 2:
        raise BenchmarkError(f"benchmark spec {spec!r}: too many fields; {SPEC_HELP}")
    try:
        numbers = [int(arg) for arg in args]
    except ValueError:
        raise BenchmarkError(f"benchmark spec {spec!r}: SEED and N_PERSONAS must be integers") from None
    return _GENERATORS[spec.partition(":")[0]](*numbers)


def subset(bench: Benchmark, ids: list[str], spec: str) -> Benchmark:
    """The conversations ``ids`` of ``bench`` (in the file's order) and their questions."""
    unknown = [c for c in ids if c not in bench.conversations]
    if unknown:
        raise BenchmarkError(f"benchmark spec {spec!r}: no conversation {', '.join(map(repr, unknown))} in the file; "
                             f"it has {', '.join(bench.conversations)}")
    wanted = set(ids)
    return Benchmark(f"{bench.name}#{','.join(c for c in bench.conversations if c in wanted)}",
                     {c: conv for c, conv in bench.conversations.items() if c in wanted},
                     [q for q in bench.questions if q.conversation_id in wanted], list(bench.warnings))


def load_benchmark(spec: str) -> Benchmark:
    """Load a benchmark from ``"locomo:PATH"``, ``"longmemeval:PATH"``, ``"probes:PATH"`` (probe questions generated
    from a LoCoMo-format file's conversations), ``"scenes:PATH"`` (a scene-to-sensor file),
    ``"synthetic[:SEED[:N_PERSONAS]]"``, ``"lifecycle[:SEED[:N_PERSONAS]]"`` or ``"scenegen[:SEED[:HOMES]]"``;
    ``PATH#ID,ID`` keeps only those conversations of the file."""
    scheme, _, rest = spec.partition(":")
    if scheme in _GENERATORS:
        return _generated(spec, rest.split(":") if rest else [])
    parts = file_spec(spec)
    if parts is None:
        raise BenchmarkError(f"benchmark spec {spec!r}: unknown scheme {scheme!r}; {SPEC_HELP}")
    _, file, selection = parts
    if not file:
        raise BenchmarkError(f"benchmark spec {spec!r}: missing path; {SPEC_HELP}")
    path = Path(file).expanduser()
    if not path.exists():
        raise BenchmarkError(f"benchmark spec {spec!r}: {scheme} file not found: {path}")
    bench = _FILE_LOADERS[scheme](path)
    if "#" not in spec:
        return bench
    ids = [c.strip() for c in selection.split(",") if c.strip()]
    if not ids:
        raise BenchmarkError(f"benchmark spec {spec!r}: no conversation id after '#'; {SPEC_HELP}")
    return subset(bench, ids, spec)


def select_questions(bench: Benchmark, spec: str, limit: int | None = None,
                     include_adversarial: bool = False) -> list[Question]:
    """The first ``limit`` questions (all if ``None``); :class:`BenchmarkError` if none of them can be scored."""
    questions = bench.questions[:limit] if limit else list(bench.questions)
    scored = [q for q in questions if include_adversarial or q.category != "adversarial"]
    if not scored:
        held = f"{len(questions)} question(s), all adversarial (pass --include-adversarial / include_adversarial: " \
               "true to score them)" if questions else "no questions"
        raise BenchmarkError(f"benchmark {spec!r}: nothing to score: {held}")
    return questions
