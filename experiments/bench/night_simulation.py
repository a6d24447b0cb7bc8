"""Error rate and power of a whole night: the strategy a night ends with against the one it started from.

The world and the per-candidate path are those of ``contract_simulation.py`` (LoCoMo-like outcomes, changes that redraw
1-10 % of the questions, the shipped probe screen, comparison, decision and round-wise Holm; rules from a shipped run
config). A night runs rounds as :class:`~evolve.loop.engine.Engine` does, either a fixed number or until ``patience``
rounds in a row apply nothing (at most ``--max-rounds``). With a confirmation, the search sees only the questions
:func:`~evolve.loop.setup.confirmation_split` leaves it, and the night's final is decided against its start on the
others by :func:`~evolve.verify.confirmation.confirm` (one-sided exact McNemar, and the contract's category floor on
those questions); refused, the start is kept.

* **False promotion per night**: every change is null; a night promotes falsely when it ends on another strategy.
* **Power**: the first fresh change of round 1 gains +d on the objective, every other change is null; a night has
  power when it ends on a strategy holding that change (confirmed, where a confirmation is set).
* **What reaches users**: ``promote`` and ``canary`` take a night's confirmed final, or an accept decided at or below
  the promotion level 0.05 (:mod:`evolve.ops.promotable`); so under a confirmation the false promotion per night is
  the rate at which a strategy no better than the start reaches serving. Before, any recorded accept could be
  promoted: the null report also gives the share of nights in which some null candidate was accepted.

Run from the repository root:

    python experiments/bench/night_simulation.py [--nights N] [--power-runs N] [--workers W]
        [--report experiments/bench/night_simulation.md]
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from contract_simulation import CONTRACT, categories, parent, rate, run_tasks, search_night
from evolve.files import atomic_write_text
from evolve.loop.setup import confirmation_split
from evolve.verify.confirmation import confirm
from evolve.verify.decision import AcceptanceRules
from evolve.verify.probe import stratified_probe

N = 582  # scored LoCoMo dev4 questions under the answer objective
#: The liberal search a confirmation allows (the per-comparison contract is CONTRACT); the config gives every other rule.
LIBERAL = {"alpha": 0.2, "secondary_alpha": 0.04}
EFFECTS = (0.03, 0.05)


def designs(config: Path, resamples: int, max_rounds: int) -> dict[str, dict]:
    """The night designs compared: the config's rules over a fixed 4 rounds (before), the same rules until patience
    without and with a confirmation, a search at a liberal alpha under confirmations of 0.3, the config's share and
    0.5 of the questions, and that search with Holm's adjustment over each round's candidates."""
    raw = yaml.safe_load(config.read_text())
    rules = {**raw["acceptance"], "bootstrap_resamples": resamples}
    shipped = AcceptanceRules(**{**rules, **CONTRACT})  # each comparison at the contract's alpha, as before
    liberal = AcceptanceRules(**{**rules, **LIBERAL})
    holm = AcceptanceRules(**{**rules, **LIBERAL, "multiple_testing": "holm"})
    night = raw.get("night") or {}
    patience = night.get("patience", 3)
    share = (night.get("confirmation") or {}).get("share", 0.4)
    level = (night.get("confirmation") or {}).get("alpha", 0.05)
    return {
        "4 rounds, no confirmation (before)": dict(rules=shipped, rounds=4, patience=None, share=None),
        f"until patience {patience} (at most {max_rounds} rounds), no confirmation":
            dict(rules=shipped, rounds=max_rounds, patience=patience, share=None),
        f"until patience {patience}, confirmation {share:g} at {level:g}, search at alpha {shipped.alpha:g}":
            dict(rules=shipped, rounds=max_rounds, patience=patience, share=share, level=level),
        **{f"until patience {patience}, confirmation {s:g} at {level:g}, search at alpha 0.2":
           dict(rules=liberal, rounds=max_rounds, patience=patience, share=s, level=level)
           for s in sorted({0.3, share, 0.5})},
        f"until patience {patience}, confirmation {share:g} at {level:g}, search at alpha 0.2 with Holm per round":
            dict(rules=holm, rounds=max_rounds, patience=patience, share=share, level=level),
    }


def night_task(args: tuple) -> dict[str, tuple[bool, bool, int, int, bool]]:
    """One night under each design (the same draws for all): ``(ended elsewhere, the +d change kept, rounds,
    candidates compared, some candidate accepted)``; ``effect`` is the gain of the first fresh change of round 1 (0: a
    null world)."""
    seed, effect, resamples, per_round, probe_size, designs_ = args
    cats_all = tuple(categories(N))
    ids = {f"q{i:04d}": c for i, c in enumerate(cats_all)}
    out = {}
    for name, d in designs_.items():
        held = ({int(q[1:]) for q in confirmation_split(ids, d["share"], seed)} if d["share"] else set())
        sel = np.array([i for i in range(N) if i not in held])
        cats = tuple(cats_all[i] for i in sel)
        probe = np.array([int(q[1:]) for q in stratified_probe({f"q{i:04d}": c for i, c in enumerate(cats)},
                                                               min(probe_size, len(sel)), seed)])
        start = parent(np.random.default_rng([seed, 0]), N)
        night = search_night(start, seed, cats, probe, d["rules"], resamples, d["rounds"], per_round,
                             lambda rng, state, k: effect if k == (1, 0) else 0.0, sel=sel, patience=d["patience"])
        moved = night.applied > 0 and not np.array_equal(night.state[0], start[0])
        if moved and held:
            conf = np.array(sorted(held))
            outcomes = [{f"q{i}": {"correct": bool(v[0][i]), "category": cats_all[i]} for i in conf}
                        for v in (start, night.state)]
            moved = confirm(*outcomes, alpha=d["level"], start_hash="s", final_hash="f", words=(0.0, 0.0),
                            floors=d["rules"]).verdict == "CONFIRMED"
        out[name] = (moved, moved and "r1f0" in night.kept, night.rounds, night.compared, night.accepted > 0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=Path("experiments/locomo_answer.yaml"))
    ap.add_argument("--nights", type=int, default=400, help="null nights per design")
    ap.add_argument("--power-runs", type=int, default=200, help="nights per effect and design")
    ap.add_argument("--effects", type=float, nargs="+", default=list(EFFECTS), metavar="GAIN",
                    help="gains of round 1's first change to measure power at (default: "
                         f"{' '.join(map(str, EFFECTS))})")
    ap.add_argument("--max-rounds", type=int, default=20)
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of each comparison")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--only", metavar="TEXT", help="only the designs whose name holds TEXT (e.g. 'search at alpha "
                                                   "0.2' with the config's share)")
    args = ap.parse_args(argv)
    raw = yaml.safe_load(args.config.read_text())
    named = {name: d for name, d in designs(args.config, args.resamples, args.max_rounds).items()
             if args.only is None or args.only in name}
    if not named:
        raise SystemExit(f"--only {args.only!r}: no design's name holds it")
    lines: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    started = time.perf_counter()
    say(f"rules: {args.config} acceptance (alpha {CONTRACT['alpha']} or as named, {raw['acceptance']['multiple_testing']} "
        f"per round); {N} questions; {raw['candidates_per_round']} candidates per round, probe {raw['probe_size']}; "
        f"bootstrap {args.resamples} resamples")
    for effect, runs in ((0.0, args.nights),) + tuple((e, args.power_runs) for e in args.effects):
        say()
        say("## False promotion per night (every change null)" if not effect else
            f"## Power per night (round 1's first change gains +{effect * 100:g} pp, every other change null)")
        nights = run_tasks(night_task, [(s, effect, args.resamples, raw["candidates_per_round"], raw["probe_size"],
                                         named) for s in range(runs)], args.workers, f"+{effect:g}")
        for name in named:
            got = [night[name] for night in nights]
            k = sum(g[1 if effect else 0] for g in got)
            say(f"{name}: {rate(k, runs)}; {np.mean([g[2] for g in got]):.1f} rounds and "
                f"{np.mean([g[3] for g in got]):.1f} candidates compared per night")
            if not effect:  # what reached users when promote took any recorded accept
                say(f"  some null candidate accepted (promotable when any recorded ACCEPT was): "
                    f"{rate(sum(g[4] for g in got), runs)}")
    say()
    say(f"elapsed {time.perf_counter() - started:.0f}s")
    if args.report is not None:
        command = "python experiments/bench/night_simulation.py " + shlex.join(argv if argv is not None
                                                                              else sys.argv[1:])
        model = " ".join((__doc__ or "").split("\n\n")[1].split("\n"))
        atomic_write_text(args.report, f"# A night: simulated false promotion and power\n\nGenerated by "
                                       f"`experiments/bench/night_simulation.py` (run from the repository root):\n\n"
                                       f"```\n{command.strip()}\n```\n\n{model}\n\n```\n" + "\n".join(lines)
                                       + "\n```\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
