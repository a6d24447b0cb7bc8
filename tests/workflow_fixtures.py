"""Real stores for the workflow and report tests: one short engine run plus committed accept rounds.

An engine run this small rarely accepts a candidate, so rounds holding ACCEPT / ACCEPT_WITH_MONITOR records
are committed through :meth:`StoreSet.commit_round` exactly as the engine commits its own, built from a
real evaluated record of the run. Import the fixtures into a test module with
the ``engine_stores`` / ``stores`` fixtures of ``conftest.py``. The CLI helpers (:func:`cli`,
:func:`cli_subprocess`), :func:`snapshot` of a stores directory and :func:`write_config` are shared by the
failure and scenario tests.
"""
from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from evolve.benchmarks import load_benchmark
from evolve.cli import main
from evolve.loop.config import RunConfig
from evolve.data import BASELINE_PATH
from evolve.loop.engine import Engine
from evolve.state.records import load_record, record_hash, report_hash
from evolve.state.stores import RoundBundle, StoreSet
from evolve.strategy.artifact import derive, policy_hash, strategy_hash
from evolve.strategy.diff import change_keys, diff_strategies
from evolve.verify.decision import AcceptanceRules

BENCHMARK = "synthetic:0"


def cli(capsys, *argv: object) -> tuple[int, str]:
    """``memevolve ARGV`` in-process: exit code and stdout + stderr."""
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def cli_subprocess(cwd: Path, *argv: object, limit_bytes: int | None = None,
                   wrap: list[str] | None = None) -> subprocess.CompletedProcess:
    """``python -m evolve.cli ARGV`` in a child, optionally under a file-size limit or inside ``wrap``."""
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversize writes fail with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.RLIM_INFINITY))

    command = [*(wrap or []), sys.executable, "-m", "evolve.cli", *map(str, argv)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300,
                          preexec_fn=limit if limit_bytes is not None else None)


def snapshot(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (``None`` for directories), minus paths starting with ``skip``."""
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == "run.lock.owner" or rel.startswith(skip) or any(rel == s.rstrip("/") for s in skip):
            continue
        out[rel] = None if path.is_dir() else path.read_bytes()
    return out


def write_config(path: Path, **settings) -> Path:
    """A small run config at ``path``; ``settings`` override the defaults (paths become strings)."""
    base = dict(benchmark="synthetic:0", strategy=str(BASELINE_PATH), limit=30, probe_size=10, rounds=2,
                candidates_per_round=1, seed=0)
    base.update({k: str(v) if isinstance(v, Path) else v for k, v in settings.items()})
    path.write_text(yaml.safe_dump(base))
    return path


def journal(root: Path) -> list[dict]:
    """The journal's entries, parsed line by line (no verification)."""
    return [json.loads(line) for line in (root / "journal.jsonl").read_text().splitlines()]


def run_engine(base: Path) -> Path:
    """One engine round on 120 synthetic questions; returns the stores directory."""
    config = RunConfig(benchmark=BENCHMARK, strategy=BASELINE_PATH, stores=base / "stores", rounds=1,
                       candidates_per_round=2, limit=120, probe_size=20,
                       acceptance=AcceptanceRules(protected_slices=["temporal"]))
    Engine(config, track=False, progress=False).run()
    return config.stores


def commit_accept_round(root: Path, changes: dict, verdict: str = "ACCEPT", *, applied: bool = True,
                        delta: float = 0.05, harness: dict | None = None, p: float | None = None) -> dict:
    """Commit the next round with one candidate ``changes`` away from the current strategy, decided ``verdict``
    (``p``: its gain test's p, alone in its round)."""
    with StoreSet(root) as stores:
        n, state = stores.last_committed_round + 1, stores.state
        parent_hash = state["current_strategy"]
        parent = stores.get_strategy(parent_hash)
        records = stores.read_jsonl("candidate_outcomes")
        template = next(r for r in records if r.get("paired"))
        summaries = {d["strategy_hash"]: d["summary"] for d in stores.read_jsonl("diagnosis_log")}
        summaries.update({r["strategy_hash"]: r["summary"] for r in records if r.get("summary")})
        before = summaries[parent_hash]
        candidate = derive(parent, changes)
        cand_hash = strategy_hash(candidate)
        diff = diff_strategies(parent, candidate)
        cid = f"r{n:03d}-c00"
        record = {**template, "key": cid, "candidate_id": cid, "round": n, "parent_hash": parent_hash,
                  "strategy_hash": cand_hash, "policy_hash": policy_hash(candidate), "changes": changes,
                  "change_keys": change_keys(parent, candidate), "diff": diff.to_dict(), "diff_text": diff.render(),
                  "decided_by": "decision", "applied": applied, "harness": harness or state["harness"],
                  "paired": _paired(template["paired"], delta, verdict),
                  "summary": _shifted(before, cand_hash, delta), "examples": _examples(template["paired"])}
        if p is not None:
            record["paired"]["mcnemar_p"] = p
            record.pop("multiple_testing", None)
        record["decision"] = {"verdict": verdict, "rule": "accept" if verdict == "ACCEPT" else
                              "protected_slice_regression", "reason": f"accepted: delta={delta:+.4f}"}
        new_hash = cand_hash if applied else parent_hash
        after = before["accuracy"] + (delta if applied else 0.0)
        scoreboard = stores.read_doc("scoreboard")
        best_before = scoreboard["rounds"][-1]["best_score"]
        best = max(after, best_before)
        scoreboard["rounds"].append({"round": n, "strategy_hash": new_hash, "objective": "accuracy", "score": after,
                                     "observed_score": before["accuracy"], "best_score": best, "accuracy": after,
                                     "observed_accuracy": before["accuracy"],
                                     "root_causes": before["root_causes"], "dcr": before.get("dcr"),
                                     "accepted": cid if applied else None, "restored": False,
                                     "decisions": {cid: verdict}})
        bundle = RoundBundle(
            records={"candidate_outcomes": [record],
                     "diagnosis_log": [{"key": f"r{n:03d}", "round": n, "strategy_hash": parent_hash,
                                        "summary": before, "digest": {}, "directions": []}]},
            docs={"scoreboard": scoreboard},
            journal=[("CANDIDATE", {"candidate_id": cid, "strategy_hash": cand_hash, "parent_hash": parent_hash,
                                    "diff": record["diff"], "decided_by": "decision"}),
                     ("ACCEPT", {"candidate_id": cid, "strategy_hash": cand_hash, "decision": record["decision"],
                                 "applied": applied, "report_hash": report_hash(load_record(record)),
                                 "record_hash": record_hash(load_record(record)), "restore_to": parent_hash}),
                     ("ROUND", {"round": n, "from": parent_hash, "to": new_hash, "accuracy": after,
                                "harness": state["harness"], "accepted": cid if applied else None})],
            strategies=[parent, candidate],
            checkpoint={"strategy": candidate, "score": after, "meta": {"round": n}} if after > best_before else None,
            state={"current_strategy": new_hash, "baseline_strategy": state["baseline_strategy"],
                   "harness": state["harness"]})
        stores.commit_round(n, bundle)
    return record


def _paired(template: dict, delta: float, verdict: str) -> dict:
    per_category = {c: {**row, "acc_candidate": row["acc_baseline"] + delta, "delta": delta}
                    for c, row in template["per_category"].items()}
    if verdict == "ACCEPT_WITH_MONITOR":
        row = per_category["temporal"]
        per_category["temporal"] = {**row, "acc_candidate": row["acc_baseline"] - 0.05, "delta": -0.05}
    return {**template, "delta": delta, "acc_candidate": template["acc_baseline"] + delta, "mcnemar_p": 0.012,
            "ci_low": delta / 3, "ci_high": delta * 1.8, "significant": True, "per_category": per_category,
            "improved": template["both_wrong"][:2], "regressed": template["both_correct"][:1]}


def _shifted(summary: dict, digest: str, delta: float) -> dict:
    by_cat = {c: a + delta for c, a in summary["accuracy_by_category"].items()}
    return {**summary, "accuracy": summary["accuracy"] + delta, "accuracy_by_category": by_cat,
            "strategy_hash": digest}


def _examples(paired: dict) -> dict:
    questions = {q.id: q for q in load_benchmark(BENCHMARK).questions}

    def row(qid: str, fixed: bool) -> dict:
        q = questions[qid]
        return {"question_id": qid, "question": q.question, "gold": q.answer, "category": q.category,
                "baseline_answer": "unknown" if fixed else q.answer,
                "candidate_answer": q.answer if fixed else "unknown",
                "baseline_root_cause": "retrieval_gap" if fixed else None,
                "candidate_root_cause": None if fixed else "kf_filtered"}

    return {"improved": [row(q, True) for q in paired["both_wrong"][:2]],
            "regressed": [row(q, False) for q in paired["both_correct"][:1]]}


def build(base: Path) -> Path:
    """Engine round 1, then round 2 ACCEPT (applied) and round 3 ACCEPT_WITH_MONITOR (not applied)."""
    root = run_engine(base)
    commit_accept_round(root, {"retrieval.top_k": 7}, "ACCEPT", applied=True)
    commit_accept_round(root, {"assembly.token_budget": 192}, "ACCEPT_WITH_MONITOR", applied=False, delta=0.02)
    return root
