"""Reference cases of the decision contract: constructed paired reports with the figures of D²ACCI's LoCoMo table and
the failures the contract exists to catch, and their verdicts under the configs the project ships. The docs' contract
table is generated from them (:mod:`evolve.cli.docs_reference`), and the contract tests replay them, so the table
cannot drift from the code.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evolve.loop.config import load_config
from evolve.verify.decision import AcceptanceRules, Decision, decide
from evolve.verify.statistics import paired_comparison

#: ``(category, parent correct, candidate correct, questions)``.
Row = tuple[str, bool, bool, int]


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    rows: tuple[Row, ...]


CASES = (
    Case("supplement", "D²ACCI's Supplement row: +2.71 pp over 996 questions (45 improved, 18 regressed: McNemar "
                       "p = 0.0009), multi-hop -2.6 pp (2 improved, 7 regressed: not significant alone)",
         (("multi_hop", False, True, 2), ("multi_hop", True, False, 7), ("multi_hop", True, True, 100),
          ("multi_hop", False, False, 83), ("single_hop", False, True, 30), ("single_hop", True, False, 6),
          ("single_hop", True, True, 300), ("single_hop", False, False, 164), ("temporal", False, True, 13),
          ("temporal", True, False, 5), ("temporal", True, True, 200), ("temporal", False, False, 86))),
    Case("clean", "+3 pp with no category losing",
         (("multi_hop", False, True, 10), ("multi_hop", True, True, 90), ("single_hop", False, True, 20),
          ("single_hop", True, True, 280), ("temporal", False, True, 5), ("temporal", True, True, 95))),
    Case("harm", "-4 pp, significant",
         (("multi_hop", True, False, 8), ("multi_hop", True, True, 92), ("single_hop", True, False, 12),
          ("single_hop", True, True, 288))),
    Case("noise", "+1 pp, 9 improved against 5 regressed",
         (("single_hop", False, True, 9), ("single_hop", True, False, 5), ("single_hop", True, True, 386))),
    Case("single_hop_falls", "+6.4 pp overall while single-hop, LoCoMo's largest category, falls 10 pp (5 improved, "
                             "35 regressed of 300: significant on its own)",
         (("single_hop", False, True, 5), ("single_hop", True, False, 35), ("single_hop", True, True, 150),
          ("single_hop", False, False, 110), ("multi_hop", False, True, 40), ("multi_hop", True, True, 60),
          ("multi_hop", False, False, 100), ("temporal", False, True, 35), ("temporal", True, True, 65),
          ("temporal", False, False, 100))),
)

#: The shipped run configs whose rules the table shows.
SHIPPED = ("nightly.yaml", "locomo.yaml", "locomo_answer.yaml", "locomo_answer_generalise.yaml",
           "locomo_evidence.yaml", "locomo_holdout.yaml", "lifecycle.yaml")
EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def outcomes(rows: tuple[Row, ...] | list[Row]) -> tuple[dict, dict]:
    """Parent and candidate outcome maps from ``rows``."""
    base, cand = {}, {}
    for category, b, c, count in rows:
        for _ in range(count):
            qid = f"q{len(base):04d}"
            base[qid] = {"correct": b, "category": category}
            cand[qid] = {"correct": c, "category": category}
    return base, cand


def report(rows: tuple[Row, ...] | list[Row], dcr: float = 0.95) -> dict:
    """The stored report of a comparison over ``rows`` (500 seeded bootstrap resamples)."""
    return {"paired": paired_comparison(*outcomes(rows), n_resamples=500).to_dict(), "dcr": dcr}


def shipped_rules(name: str) -> AcceptanceRules:
    """The acceptance rules of shipped config ``experiments/NAME``."""
    return load_config(EXPERIMENTS / name, check_files=False).acceptance


def verdicts() -> dict[str, dict[str, Decision]]:
    """Case name -> config name -> the decision under that config's rules."""
    rules = {name: shipped_rules(name) for name in SHIPPED}
    return {case.name: {name: decide(report(case.rows), r) for name, r in rules.items()} for case in CASES}
