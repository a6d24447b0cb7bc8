"""Fingerprint a stores directory so that two runs of the same config can be compared across code versions.

Reads the files as plain JSON (no project import, so the same script reads stores written by any commit), drops
what changes from run to run (timestamps, wall times, the journal's per-entry hashes that chain those
timestamps), and prints one SHA-256 per store file plus the decisions in order.  Two stores with the same
fingerprints made the same decisions on the same strategies with the same evidence.

    python experiments/bench/store_fingerprint.py STORES [STORES_B]

With two directories it prints the files whose fingerprints differ and the first differing record of each.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

#: Keys whose values differ between two runs of the same config (clock readings and hashes chained over them).
VOLATILE = {"ts", "committed_at", "saved_at", "wall_time_s", "hash", "prev_hash", "payload_hash", "record_hash",
            "manifest_sha256"}
FILES = ("journal.jsonl", "candidate_outcomes.jsonl", "stage_audits.jsonl", "diagnosis_log.jsonl", "state.json",
         "scoreboard.json", "dimension_effects.json", "hypothesis_tree.json", "question_histories.json",
         "escalations.json")


def _strip(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def records(path: Path) -> list[object]:
    """The file's records with volatile keys removed (a ``.json`` file is one record)."""
    if not path.exists():
        return []
    if path.suffix == ".jsonl":
        return [_strip(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    state = _strip(json.loads(path.read_text()))
    if path.name == "state.json" and isinstance(state, dict):
        state.pop("journal_head", None)
    return [state]


def fingerprint(stores: Path) -> dict[str, str]:
    """SHA-256 of each store file's normalised records, plus the set of strategy files and checkpoints."""
    out = {}
    for name in FILES:
        blob = json.dumps(records(stores / name), sort_keys=True).encode()
        out[name] = hashlib.sha256(blob).hexdigest()[:16]
    for folder in ("strategies", "best"):
        listing = sorted(p.relative_to(stores).as_posix() for p in (stores / folder).rglob("*") if p.is_file())
        digest = hashlib.sha256()
        for rel in listing:
            path = stores / rel
            body = json.dumps(records(path), sort_keys=True).encode() if path.suffix == ".json" else path.read_bytes()
            digest.update(rel.encode() + b"\0" + body)
        out[folder + "/"] = digest.hexdigest()[:16]
    return out


def decisions(stores: Path) -> list[str]:
    """One line per decided candidate: id, moves, verdict, rule, strategy hash."""
    lines = []
    for rec in records(stores / "candidate_outcomes.jsonl"):
        decision = rec.get("decision") or {}
        lines.append(f"{rec.get('candidate_id')}  {'&'.join(rec.get('change_keys') or [])}  "
                     f"{decision.get('verdict')}/{decision.get('rule') or rec.get('decided_by')}  "
                     f"{str(rec.get('strategy_hash'))[:12]}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__)
        return 2
    stores = [Path(a) for a in argv]
    prints = [fingerprint(s) for s in stores]
    if len(stores) == 1:
        for name, digest in prints[0].items():
            print(f"{digest}  {name}")
        print("\n".join(decisions(stores[0])))
        return 0
    differing = [name for name in prints[0] if prints[0][name] != prints[1][name]]
    for name in differing:
        print(f"differs: {name}  {prints[0][name]} vs {prints[1][name]}")
        a, b = (records(s / name) for s in stores) if not name.endswith("/") else ([], [])
        for i, (ra, rb) in enumerate(zip(a, b)):
            if ra != rb:
                print(f"  first difference at record {i}:\n    {json.dumps(ra, sort_keys=True)[:600]}\n"
                      f"    {json.dumps(rb, sort_keys=True)[:600]}")
                break
        else:
            if len(a) != len(b):
                print(f"  {len(a)} vs {len(b)} records")
    print("identical" if not differing else f"{len(differing)} of {len(prints[0])} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
