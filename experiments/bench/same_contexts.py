"""Whether two code versions retrieve and pack the same contexts, question by question.

A refactoring of the runtime (a faster retrieval, say) must not change what a strategy retrieves, packs or answers.
This script exports git revision ``--against`` (default ``HEAD``) into a temporary directory, evaluates each strategy
on the benchmark under that tree and under this working tree (one process each, the deterministic roles, fresh
ingestion caches; item and question vectors are shared, as embedders are batch-invariant), twice in one harness (the
second evaluation reads what the first cached, as a night's later candidates do), and compares every question's trace
of each pass field by field: the retrieved hits with their channel ranks and scores, the filtered and dropped
items, the packed text, the answer and its verdict; measured times are left out
(:meth:`evolve.observe.trace.Trace.deterministic_dict`), and so are fields only one version's traces have.

    python experiments/bench/same_contexts.py [--against REV] [--bench SPEC] [--strategy PATH ...]

Prints, per strategy, the number of questions whose traces differ and the first fields that differ; exits 1 when
any does. ``--pin PATH`` instead writes this tree's pin of the retrieval and packing fields on the pinned benchmark
(``synthetic:0:2``) for the default strategies: the file ``tests/runtime/test_pinned_contexts.py`` checks; rewrite it
only for a deliberate change of what the runtime retrieves or packs. A trace matches its pin when every pinned field
is equal, but for each hit's dense (vector channel) score, which may be one unit of its last rounded decimal away:
the score a CPU's kernels round up another's round down (:data:`evolve.runtime.retrieval.DENSE_DECIMALS`). ``--pin``
writes a pin only when an evaluation on other kernels of this machine matches it too.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BENCH = f"locomo:{(ROOT / '../shared/data/locomo/locomo_dev4.json').resolve()}"
STRATEGIES = (ROOT / "strategies" / "baseline.yaml", ROOT / "experiments" / "strategies" / "locomo_answer_turns.yaml")
#: The benchmark ``--pin`` digests: small and generated, so the pinned test needs no data file.
PINNED_BENCH = "synthetic:0:2"
#: The trace fields ``--pin`` digests: what the runtime retrieved, removed, packed and answered (fields other
#: stages add to a trace do not unpin it).
PINNED_FIELDS = ("intent", "subqueries", "retrieved", "filtered", "packed", "dropped", "context_tokens", "answer",
                 "answer_support")


def traces(bench_spec: str, strategy: Path, cache_dir: Path, passes: int = 1) -> list[dict[str, dict]]:
    """``{question id: deterministic trace}`` of each of ``passes`` evaluations of ``strategy`` by one harness on the
    benchmark, under the ``evolve`` imported."""
    from evolve.benchmarks import load_benchmark
    from evolve.observe.harness import Harness
    from evolve.runtime import IngestionCache
    from evolve.strategy.artifact import load_strategy

    harness = Harness(load_benchmark(bench_spec), cache=IngestionCache(cache_dir), progress=False)
    try:
        runs = [harness.evaluate(load_strategy(strategy)) for _ in range(passes)]
    finally:
        harness.close()
    return [{t.question_id: json.loads(json.dumps(t.deterministic_dict(), default=str)) for t in run.traces}
            for run in runs]


#: Other x86_64 kernels for the model's forward pass, on any x86_64 CPU: torch's vectorised operators and oneDNN's
#: matrix products without AVX. Their vectors differ from the native ones in the last bits, as another CPU's do.
OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}


class PinnedQuestion(BaseModel):
    """One question's pin: the SHA-256 of its :data:`PINNED_FIELDS` without the dense scores, and each retrieved
    hit's dense score (``None``: the vector channel did not find it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    dense: list[float | None]


class Pin(BaseModel):
    """The file ``--pin`` writes: the benchmark and, per strategy file name, each question's pin."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    benchmark: str
    strategies: dict[str, dict[str, PinnedQuestion]]


def pin_of(trace: dict) -> PinnedQuestion:
    """The pin of a deterministic trace (:func:`traces`)."""
    fields = json.loads(json.dumps({k: trace[k] for k in PINNED_FIELDS}))
    dense = [hit["channels"].get("vector", {}).pop("score", None) for hit in fields["retrieved"]]
    return PinnedQuestion(digest=hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest(), dense=dense)


def mismatch(pinned: PinnedQuestion, trace: dict) -> str | None:
    """Why ``trace`` does not match ``pinned`` (``None`` when it does): a field other than a dense score differs, or
    a hit's dense score is more than one unit of its last rounded decimal from the pinned one."""
    from evolve.runtime.retrieval import DENSE_DECIMALS

    got = pin_of(trace)
    if got.digest != pinned.digest:
        return "retrieved ids, ranks or scores, filtered, packed, dropped or the answer differ"
    for rank, (want, have) in enumerate(zip(pinned.dense, got.dense), start=1):  # the digest holds which are None
        if want is not None and round(abs(have - want) * 10**DENSE_DECIMALS) > 1:
            return f"hit {rank}'s dense score {have} (pinned {want})"
    return None


def pin(strategies: list[Path], cache_dir: Path) -> Pin:
    """This tree's pin of ``strategies`` on :data:`PINNED_BENCH`; ``ValueError`` when an evaluation under
    :data:`OTHER_KERNELS` (a child process, its own vectors) does not match it, on either pass."""
    from evolve.runtime.cache import SHARED_EMBEDDINGS_ENV

    os.environ.pop(SHARED_EMBEDDINGS_ENV, None)  # each evaluation embeds its texts itself
    pinned = Pin(benchmark=PINNED_BENCH, strategies={
        s.name: {qid: pin_of(t) for qid, t in traces(PINNED_BENCH, s, cache_dir / "native")[0].items()}
        for s in strategies})
    (cache_dir / "other").mkdir()
    other = run_under(ROOT, PINNED_BENCH, strategies, cache_dir / "other", cache_dir / "other.json", OTHER_KERNELS)
    failed, rounded = [], 0
    for name, runs in other.items():
        for n, run in enumerate(runs, start=1):
            for qid, trace in run.items():
                why = mismatch(pinned.strategies[name][qid], trace)
                if why:
                    failed.append(f"{name}, pass {n}, {qid}: {why}")
                rounded += pin_of(trace).dense != pinned.strategies[name][qid].dense
    if failed:
        raise ValueError(f"{len(failed)} traces on other kernels do not match the pin: " + "; ".join(failed[:5]))
    print(f"other kernels ({', '.join(f'{k}={v}' for k, v in OTHER_KERNELS.items())}): every trace matches, "
          f"{rounded} of {sum(len(r) for runs in other.values() for r in runs)} by a dense score rounded the other way")
    return pinned


def dump(bench_spec: str, strategies: list[Path], cache_dir: Path, out: Path) -> None:
    """Write ``{strategy file name: [{question id: trace} of each of two passes]}`` to ``out``."""
    out.write_text(json.dumps({s.name: traces(bench_spec, s, cache_dir, passes=2) for s in strategies}))


def run_under(tree: Path, bench_spec: str, strategies: list[Path], cache_dir: Path, out: Path,
              env: dict[str, str] | None = None) -> dict:
    """The traces of :func:`dump` with ``tree``'s ``evolve`` package (a child process, with ``env`` added to this
    one's environment)."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(tree)}
    command = [sys.executable, __file__, "--dump", str(out), "--cache", str(cache_dir), "--bench", bench_spec,
               *(arg for s in strategies for arg in ("--strategy", str(s)))]
    subprocess.run(command, cwd=tree, env=env, check=True)
    return json.loads(out.read_text())


def export(revision: str, into: Path) -> Path:
    """The files of ``revision`` (``git archive``) under ``into``."""
    archive = into / "rev.tar"
    with archive.open("wb") as handle:
        subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", revision], stdout=handle, check=True)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def differences(old: dict, new: dict) -> list[tuple[str, list[str]]]:
    """``(question id, fields that differ)`` for every question whose common trace fields differ."""
    out = []
    for qid in sorted(set(old) | set(new)):
        if qid not in old or qid not in new:
            out.append((qid, ["<question missing on one side>"]))
            continue
        common = sorted(set(old[qid]) & set(new[qid]))
        changed = [k for k in common if old[qid][k] != new[qid][k]]
        if changed:
            out.append((qid, changed))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="git revision compared with this tree (default HEAD)")
    parser.add_argument("--bench", default=DEFAULT_BENCH, help="benchmark spec (default LoCoMo dev4)")
    parser.add_argument("--strategy", type=Path, action="append",
                        help="strategy file, repeatable (default: the baseline and locomo_answer_turns.yaml)")
    parser.add_argument("--pin", type=Path, help=f"write this tree's digests on {PINNED_BENCH} to PATH and stop")
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    strategies = [s.resolve() for s in (args.strategy or STRATEGIES)]
    if args.dump:
        dump(args.bench, strategies, args.cache, args.dump)
        return 0
    if args.pin:
        with tempfile.TemporaryDirectory(prefix="pin-") as tmp:
            try:
                pinned = pin(list(STRATEGIES), Path(tmp))
            except ValueError as error:
                print(f"{args.pin} not written: {error}", file=sys.stderr)
                return 1
        args.pin.write_text(pinned.model_dump_json(indent=1) + "\n")
        print(f"wrote {args.pin}")
        return 0
    with tempfile.TemporaryDirectory(prefix="same-contexts-") as tmp:
        tmp_path = Path(tmp)
        old_tree = export(args.against, tmp_path)
        (tmp_path / "embeddings").mkdir()
        results = {}
        for label, tree in ((args.against, old_tree), ("this tree", ROOT)):
            cache = tmp_path / f"cache-{len(results)}"
            cache.mkdir()
            (cache / "embeddings").symlink_to(tmp_path / "embeddings")  # vectors shared, stores not
            results[label] = run_under(tree, args.bench, strategies, cache, tmp_path / f"traces-{len(results)}.json")
    old, new = results.values()
    status = 0
    for name in old:
        for n, (before, after) in enumerate(zip(old[name], new[name]), start=1):
            diff = differences(before, after)
            print(f"{name}, pass {n}: {len(before)} questions, {len(diff)} with different traces than {args.against}")
            for qid, changed in diff[:5]:
                print(f"  {qid}: {', '.join(changed)}")
            status |= bool(diff)
    return status


if __name__ == "__main__":
    sys.exit(main())
