"""``memevolve gate BASE CANDIDATE``: the decision contract on two trace files, the verdict journaled in a gate store
(exit 0 decided and journaled, 2 bad input with nothing journaled)."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from evolve.cli.defaults import config_path
from evolve.cli.workflow import operator_arg
from evolve.errors import UserError
from evolve.safe_text import MAX_OPERATOR_CHARS, escaped

#: The gate store when no run config names stores.
DEFAULT_STORES = Path("stores") / "gate"


def prediction(text: str):
    """An argparse type: ``ROOT_CAUSE[/CATEGORY][:down|up]`` (every category and down when left out)."""
    from evolve.verify.hypothesis import Prediction
    try:
        return Prediction.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; expected ROOT_CAUSE[/CATEGORY][:down|up]") from None


def family_p(text: str) -> tuple[str, float]:
    """An argparse type: ``ID=P``, a p-value in [0, 1]."""
    name, _, value = text.partition("=")
    try:
        p = float(value)
    except ValueError:
        p = -1.0
    if not name or not 0 <= p <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ID=P with P in [0, 1]")
    return name, p


def cmd_gate(args: argparse.Namespace) -> int:
    from evolve.loop.config import RunConfig, load_config
    from evolve.ops.escalations import escalations
    from evolve.ops.gate import GateInput, evaluate, family, journal
    from evolve.ops.history import History
    from evolve.state.layout import StoreLayout

    if args.no_hypothesis and (args.hypothesis is not None or args.predict is not None):
        raise UserError("--no-hypothesis: leave out --hypothesis and --predict, or give both without it")
    if not args.no_hypothesis and (args.hypothesis is None or args.predict is None):
        raise UserError("a gate run needs --hypothesis TEXT and --predict ROOT_CAUSE[/CATEGORY][:down|up] (what the "
                        "change is for, and which failure category it makes rarer), or --no-hypothesis to gate "
                        "without one (recorded with the verdict)")
    path = config_path(args.rules)
    config = load_config(path, check_files=False) if path is not None else RunConfig()
    loop = StoreLayout(config.stores) if path is not None else None
    stores = Path(args.stores) if args.stores else (loop.gate if loop is not None else DEFAULT_STORES)
    known = None
    if args.answers is not None:
        if loop is None or not loop.root.is_dir():
            raise UserError("--answers needs --rules naming the run config whose stores raised the escalation")
        known = {e.key for e in escalations(History(loop.root)) if e.entry is not None}
    if args.family is not None and (args.family_p or args.family_secondary_p):
        raise UserError(f"--family {args.family}: its members are the family's runs in the gate store; leave out "
                        "--family-p and --family-secondary-p")
    if args.predicted_by == "planner" and args.predict is None:
        raise UserError("--predicted-by planner: goes with --predict (the prediction a night's planner made)")
    predict = (dataclasses.replace(args.predict, author=args.predicted_by) if args.predict is not None
               else None)
    gate = GateInput(Path(args.base), Path(args.candidate), config, args.adapter, args.hypothesis, predict,
                     args.answers, family("--family-p", args.family_p),
                     family("--family-secondary-p", args.family_secondary_p), args.family)
    result = evaluate(gate)
    entry = journal(result, stores, known)
    r, c, p = result.record, result.comparison, result.comparison.paired
    print(f"{r.candidate_id}: {r.verdict} (rule {r.decision.rule}): {r.reason}")
    print(f"paired on {p.n} samples ({config.objective}): base {p.acc_baseline:.3f} -> candidate "
          f"{p.acc_candidate:.3f}  delta {p.delta:+.4f}  McNemar p={p.mcnemar_p:.4g}  CI [{p.ci_low:+.4f}, "
          f"{p.ci_high:+.4f}]")
    print(f"DCR@{config.acceptance.dcr_tau} {c.dcr:.3f} over the failure/discordance set ({result.n_failures} "
          f"samples); context words "
          f"{c.cost.words_parent:.1f} -> {c.cost.words_candidate:.1f}")
    if c.hypothesis is not None:
        print(f"hypothesis: {escaped(args.hypothesis)}: {c.hypothesis.describe()}")
    if args.no_hypothesis:
        print("hypothesis: none (--no-hypothesis, recorded with the verdict)")
    if args.family is not None:
        adjusted = r.multiple_testing
        print(f"family {escaped(args.family)}: " + (f"{len(adjusted.family)} members, {adjusted.method}-adjusted p="
                                                    f"{adjusted.p_adjusted:.4g}" if adjusted else "its first member"))
        for change in result.redecided:
            print(f"  re-decided {change['candidate_id']}: {change['previous']['verdict']} -> "
                  f"{change['decision']['verdict']} (rule {change['decision']['rule']}, adjusted p="
                  f"{change['multiple_testing']['p_adjusted']:.4g})")
    print(f"journal entry {entry['index']} {entry['type']} in {stores}; memevolve show {r.candidate_id} --stores "
          f"{stores}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gate`` to ``sub``."""
    from evolve.observe.adapters import ADAPTERS

    p = sub.add_parser("gate", help="decide between two trace files of any memory system under the decision "
                                    "contract and journal the verdict (docs: how-to/gate.md)")
    p.add_argument("base", help="trace file of the reference (JSONL, one sample a line)")
    p.add_argument("candidate", help="trace file of the change, with the same sample ids")
    p.add_argument("--rules", metavar="RUN_CONFIG", help="run config whose objective, seed, acceptance: and cost: "
                                                        "decide (default $MEMEVOLVE_CONFIG, else "
                                                        "experiments/nightly.yaml if it exists, else the defaults)")
    p.add_argument("--adapter", choices=sorted(ADAPTERS), default="jsonl",
                   help="how the files' lines are read (default: %(default)s, the trace contract)")
    p.add_argument("--hypothesis", metavar="TEXT", type=operator_arg(),
                   help=f"what the change is meant to do (recorded; needed with --predict unless --no-hypothesis); "
                        f"at most {MAX_OPERATOR_CHARS} characters, shown with control characters escaped")
    p.add_argument("--predict", type=prediction, metavar="ROOT_CAUSE[/CATEGORY][:down|up]",
                   help="the failure category the change moves (default every category, down): tested paired "
                        "(exact McNemar at alpha); a would-be accept whose prediction does not hold is rule "
                        "hypothesis_mismatch")
    p.add_argument("--predicted-by", choices=("engineer", "planner"), default="engineer",
                   help="whose prediction --predict is: an engineer's (default; a mismatch flags the change) or, to "
                        "decide a night's candidate again, its planner's (a mismatch is named, never flags)")
    p.add_argument("--no-hypothesis", action="store_true",
                   help="gate without a hypothesis (recorded with the verdict)")
    p.add_argument("--stores", help=f"gate store (default: the run config's stores/gate, else {DEFAULT_STORES})")
    p.add_argument("--answers", metavar="ESCALATION", help="the loop escalation (direction key) this change answers")
    p.add_argument("--family", metavar="NAME", type=operator_arg(),
                   help="a named family in the gate store (e.g. a release's batch of changes): this verdict and the "
                        "family's earlier ones are adjusted together as acceptance.multiple_testing says (bh at "
                        "fdr_q, or holm); an earlier verdict that changes is journaled as REDECIDE")
    p.add_argument("--family-p", type=family_p, action="append", default=[], metavar="ID=P",
                   help="another test of the same round's gain family (adjusted together as acceptance."
                        "multiple_testing says); repeat per test")
    p.add_argument("--family-secondary-p", type=family_p, action="append", default=[], metavar="ID=P",
                   help="likewise for the secondary outcome's family")
    p.set_defaults(func=cmd_gate)
