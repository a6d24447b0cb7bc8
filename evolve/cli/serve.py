"""``memevolve serve``: run the verified serving strategy as a per-user memory service."""
from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from evolve.cli.argtypes import positive_int, probability
from evolve.cli.canary import approval_args, cap_arg
from evolve.errors import ConfigError

if TYPE_CHECKING:
    from evolve.llm import RolesConfig


def served_roles(path: str) -> "RolesConfig":
    """The ``roles:`` mapping of a run config (or of any YAML file holding one), merged over the
    ``MEMEVOLVE_<ROLE>_*`` environment as a run merges it; :class:`ConfigError` saying what is wrong and where."""
    import yaml

    from evolve.llm import RolesConfig

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("roles"), dict):
        raise ConfigError(f"{path}: no 'roles:' mapping (give a run config, e.g. experiments/llm.yaml)")
    return RolesConfig.from_sources(data["roles"], source=path)


#: Bounds of the service's periods (seconds): the serving-file check (a shorter one spins a core for nothing) and
#: the idle time that closes a session.
RELOAD_SECONDS = (0.05, 3_600.0)
IDLE_SECONDS = (1.0, 30 * 86_400.0)


def seconds(low: float, high: float):
    """An argparse type: a number of seconds in ``[low, high]`` (``nan`` and infinities refused)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not in [{low:g}, {high:g}] seconds")
        return value

    return parse


def days(text: str) -> float:
    """An argparse type: a positive number of days (fractions allowed), at most 100 years."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not 0 < value <= 36_500:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 36500] days")
    return value


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"{value} is not a port in 0..65535 (0: any free port)")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    reload_now = threading.Event()
    if threading.current_thread() is threading.main_thread():  # before the model loads: a SIGHUP then is a reload
        signal.signal(signal.SIGHUP, lambda *_: reload_now.set())
    try:
        from evolve.serve.server import ServeConfig, parse_canary, run
    except ImportError as exc:
        print(f"error: memevolve serve needs the serve extra (pip install 'memevolve[serve]'): {exc}")
        return 2
    from evolve.cli.canary import journal_start
    from evolve.serve.answers import AnswersError
    from evolve.serve.backend import StoreUnavailable
    from evolve.serve.guard import GuardPlan
    from evolve.serve.strategy import CanaryRefused, ServingRefused

    try:
        canary = parse_canary(args.canary) if args.canary else None
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    if (args.approver or args.reason or args.override_cap) and canary is None:
        print("error: --approver, --reason and --override-cap go with --canary (the journaled start of a canary)")
        return 2
    if canary is not None:
        if not args.approver:
            print("error: --canary needs --approver NAME: a canary start is journaled with who approved it")
            return 2
        code = journal_start(args.stores, args.serving, *canary, args.approver, args.reason, args.override_cap,
                             args.allow_untracked)
        if code:
            return code
    try:
        roles = served_roles(args.roles) if args.roles else None
    except (ConfigError, OSError) as exc:
        print(f"error: {exc}")
        return 2
    if not (args.data or args.store):
        print("error: pass --data DIR (the embedded file store) or --store postgresql://... (the shared store)")
        return 2
    config = ServeConfig(Path(args.data or "."), Path(args.serving), Path(args.stores) if args.stores else None,
                         args.host, args.port, args.shadow, args.allow_untracked, args.idle,
                         args.reload_interval, args.store, roles, args.max_users, GuardPlan(alpha=args.guard_alpha),
                         Path(args.answers) if args.answers else None, Path(args.auth) if args.auth else None,
                         args.allow_unauthenticated, args.retention_days,
                         Path(args.audit_witness) if args.audit_witness else None,
                         guard_probes=not args.no_guard_probes)
    try:
        run(config, reload_now)
    except (CanaryRefused, AnswersError) as exc:
        print(f"refused: {exc}")
        return 2
    except ServingRefused as exc:
        print(f"refused: {exc}")
        return 1
    except StoreUnavailable as exc:
        print(f"error: {exc}")
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the verified serving strategy as a per-user memory service (HTTP)")
    p.add_argument("--serving", default="strategies/serving.yaml",
                   help="serving file; loaded only if it checks out against the journal (default: %(default)s)")
    p.add_argument("--stores", default="stores", help="stores whose journal tracks the serving file "
                                                      "(default: %(default)s)")
    p.add_argument("--data", help="directory holding every user's memory (created if missing)")
    p.add_argument("--store", metavar="POSTGRES_URL",
                   help="keep every user's memory in PostgreSQL instead, shared by every replica "
                        "started with the same URL, e.g. postgresql://user@host/db")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=port_number, default=8420,
                   help="port, 0 for any free one (the one bound is printed) (default: %(default)s)")
    p.add_argument("--shadow", metavar="CANDIDATE_ID",
                   help="also compute this candidate's context for every recall, off the response path, and log it")
    p.add_argument("--canary", metavar="CANDIDATE_ID:FRACTION",
                   help="start a canary (journaled, needs --approver): serve this share of users (a stable hash of the "
                        "user id) with an accepted candidate; without it, the canary the journal says runs is served "
                        "(memevolve canary start|set|stop)")
    approval_args(p, required=False)
    cap_arg(p)
    p.add_argument("--answers", metavar="ANSWERS_YAML",
                   help="the operator's answers (as replay reads them): the canary guard judges the recalls they "
                        "cover by whether each context carries the answer")
    p.add_argument("--no-guard-probes", action="store_true",
                   help="the canary guard judges only recalls --answers covers, not probe questions made from the "
                        "canary users' own turns (label-free, in the background; on by default)")
    p.add_argument("--guard-alpha", type=probability, default=0.05, metavar="ALPHA",
                   help="family-wise level of the canary guard's harm test over its looks (default: %(default)s)")
    p.add_argument("--roles", metavar="CONFIG",
                   help="put the runtime's model roles (extractor, expander, answerer) on the endpoints of this run "
                        "config's roles: mapping (default: the embedded deterministic roles)")
    p.add_argument("--allow-untracked", action="store_true",
                   help="also serve a file no journal tracks (drifted or unverified files are refused regardless)")
    p.add_argument("--idle", type=seconds(*IDLE_SECONDS), default=600.0, metavar="SECONDS",
                   help="close (and organise) a user's open session after this long without a capture, 1 s to 30 "
                        "days (default: %(default)s)")
    p.add_argument("--max-users", type=positive_int, metavar="N",
                   help="keep at most N users' memory loaded; the least recently used idle ones are unloaded and "
                        "loaded again from the store when they return (default: no bound)")
    p.add_argument("--reload-interval", type=seconds(*RELOAD_SECONDS), default=1.0, metavar="SECONDS",
                   help="how often the serving file is checked for a promote or rollback, 0.05 s to 1 h; SIGHUP "
                        "checks at once (default: %(default)s)")
    p.add_argument("--auth", metavar="FILE",
                   help="require an API key from this keys file (memevolve keys add) on every memory and admin "
                        "route; without it the service refuses to bind beyond loopback")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="serve beyond loopback without --auth anyway (logged, and noted in the audit)")
    p.add_argument("--retention-days", type=days, metavar="DAYS",
                   help="purge every turn this long after its capture (a capture's retain_until may purge sooner), "
                        "audited, with what was derived from it (default: kept until erased)")
    p.add_argument("--audit-witness", metavar="FILE",
                   help="append the audit's head to FILE (kept outside the data directory) once a minute when it "
                        "moved; `memevolve audit verify --witness FILE` checks it")
    p.set_defaults(func=cmd_serve)
