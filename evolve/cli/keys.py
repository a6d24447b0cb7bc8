"""``memevolve keys``: the API keys of ``memevolve serve --auth FILE`` (add prints the secret once; revoke; list)."""
from __future__ import annotations

import argparse
from pathlib import Path


def _auth_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--auth", required=True, metavar="FILE", help="the keys file (created by the first add)")


def cmd_keys_add(args: argparse.Namespace) -> int:
    from evolve.serve.keys import add_key

    key, secret = add_key(Path(args.auth), args.user, args.scope, args.note, args.purpose)
    bound = f"; purposes {', '.join(key.purposes)}" if key.purposes else ""
    print(f"key {key.id} for {', '.join(key.users)}; scopes {', '.join(key.scopes)}{bound}")
    print(f"secret (shown once, stored only as its sha256): {secret}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from evolve.serve.keys import revoke_key

    key = revoke_key(Path(args.auth), args.key_id)
    print(f"key {key.id} revoked at {key.revoked} (refused from the service's next request)")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from evolve.serve.keys import read_keys

    for key in read_keys(Path(args.auth)).keys:
        state = f"revoked {key.revoked}" if key.revoked else "live"
        bound = f"  purposes {','.join(key.purposes)}" if key.purposes else ""
        print(f"{key.id}  {state:<40}  users {','.join(key.users)}  scopes {','.join(key.scopes)}{bound}"
              f"{'  # ' + key.note if key.note else ''}")
    return 0


#: The scopes of :mod:`evolve.serve.keys` (not imported here: building the parser stays light).
SCOPES = ("capture", "recall", "answer", "erase", "admin")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="API keys of the memory service (memevolve serve --auth FILE)")
    ksub = p.add_subparsers(dest="keys_command", required=True)
    a = ksub.add_parser("add", help="add a key bound to users and scopes; prints its secret once")
    _auth_arg(a)
    a.add_argument("--user", action="append", required=True, metavar="ID|PREFIX*|*",
                   help="a user the key may act for: an id, a prefix followed by '*', or '*' for every user "
                        "(repeatable)")
    a.add_argument("--scope", action="append", required=True, choices=SCOPES,
                   help="what the key may do (repeatable); admin: /v1/strategy and /metrics")
    a.add_argument("--note", default="", help="who or what holds the key (at most 200 characters)")
    a.add_argument("--purpose", action="append", metavar="PURPOSE",
                   help="a purpose the key may capture and recall memory for (repeatable); without it the key "
                        "serves any purpose, the request naming the memory's own")
    a.set_defaults(func=cmd_keys_add)
    r = ksub.add_parser("revoke", help="revoke a key (kept in the file, marked revoked)")
    _auth_arg(r)
    r.add_argument("key_id", help="the key's id (the 12 hex digits after 'mev_' in its secret)")
    r.set_defaults(func=cmd_keys_revoke)
    v = ksub.add_parser("list", help="list the keys (ids, bindings, scopes; never a secret)")
    _auth_arg(v)
    v.set_defaults(func=cmd_keys_list)
