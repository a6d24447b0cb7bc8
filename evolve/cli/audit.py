"""``memevolve audit``: verify the service's access audit (naming the first broken line), witness its head, show
its lines."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from evolve.cli.argtypes import positive_int


def _store_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--data", metavar="DIR", help="the service's data directory (its audit.jsonl)")
    where.add_argument("--store", metavar="POSTGRES_URL", help="the shared store (its mem_audit table)")


def _open(args: argparse.Namespace):
    from evolve.files import StoreError
    from evolve.serve.audit import AUDIT_FILE, open_audit

    if args.data and not (Path(args.data) / AUDIT_FILE).is_file():
        raise StoreError(Path(args.data) / AUDIT_FILE, "no audit here (not a data directory a service wrote)")
    return open_audit(args.store or args.data)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """The first line is the verdict: ``ok: ...`` exactly when the command exits 0."""
    from evolve.serve.audit import verify_audit

    result, problems, checked = verify_audit(_open(args), [Path(w) for w in args.witness])
    if not result.ok:
        print(f"verification failed at entry {result.first_bad_index}: {result.reason}")
        return 1
    if problems:
        print(f"verification failed: the audit's {result.n} lines chain, but:")
        print("\n".join(f"  {p}" for p in problems))
        return 1
    keyed = " (MACs present but not checked: set MEMEVOLVE_AUDIT_KEY)" if result.unchecked_macs else ""
    print(f"ok: {result.n} lines chain{keyed}; {checked} witnessed head(s) checked")
    return 0


def cmd_audit_witness(args: argparse.Namespace) -> int:
    from evolve.serve.audit import witness_head

    head = witness_head(_open(args), Path(args.to))
    print(f"witnessed line {head['index']} ({head['hash'][:12]}) in {args.to}" if head else "the audit is empty")
    return 0


def cmd_audit_show(args: argparse.Namespace) -> int:
    audit = _open(args)
    wanted = audit.names.of(args.user) if args.user else None
    lines = [line for line in audit.read() if (wanted is None or line.event.user == wanted)
             and (args.type is None or line.type == args.type)]
    for line in lines[-args.last:] if args.last else lines:
        print(json.dumps({"index": line.index, "ts": line.ts, "type": line.type, "payload": line.payload},
                         ensure_ascii=False))
    return 0


def cmd_audit_rekey(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from evolve.serve.pseudonym import Pseudonyms
    from evolve.serve.rekey import rekey
    from evolve.serve.stores import open_backend
    from evolve.state.lock import ServiceLock

    _open(args)  # a data directory a service wrote
    with ServiceLock(args.data) if args.data else nullcontext():
        backend = open_backend(args.store or args.data)
        try:
            done = rekey(backend, Pseudonyms.from_env(), [Path(w) for w in args.witness])
        finally:
            backend.close()
    print(f"re-keyed: {done.lines} audit line(s) chained again, {done.renamed} tombstone(s) and generation(s) "
          f"renamed, {len(done.witnesses)} witness file(s) rewritten; new head {done.head['index']} "
          f"({done.head['hash'][:12]})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="the memory service's hash-chained access audit")
    asub = p.add_subparsers(dest="audit_command", required=True)
    v = asub.add_parser("verify", help="check the chain (naming the first broken line) and the witnessed heads")
    _store_args(v)
    v.add_argument("--witness", action="append", default=[], metavar="FILE",
                   help="a witness file whose heads must be lines of the audit (repeatable)")
    v.set_defaults(func=cmd_audit_verify)
    w = asub.add_parser("witness", help="append the audit's head to a witness file kept elsewhere")
    _store_args(w)
    w.add_argument("--to", required=True, metavar="FILE", help="the witness file (appended to)")
    w.set_defaults(func=cmd_audit_witness)
    r = asub.add_parser("rekey", help="name users by a keyed hash (MEMEVOLVE_USER_KEY) in a store written "
                                      "without one: audit, tombstones, generations (every service stopped)")
    _store_args(r)
    r.add_argument("--witness", action="append", default=[], metavar="FILE",
                   help="a witness file of the audit, rewritten to the re-chained heads (repeatable)")
    r.set_defaults(func=cmd_audit_rekey)
    s = asub.add_parser("show", help="print the audit's lines (one JSON object each)")
    _store_args(s)
    s.add_argument("--user", help="only lines about this user id (matched by its name, keyed under "
                                  "MEMEVOLVE_USER_KEY)")
    s.add_argument("--type", type=str.upper, metavar="OPERATION",
                   help="only lines of this operation: CAPTURE, CLOSE, RECALL, ANSWER, ERASE, PURGE, DENY, START, FAIL or REKEY")
    s.add_argument("--last", type=positive_int, metavar="N", help="only the last N lines")
    s.set_defaults(func=cmd_audit_show)
