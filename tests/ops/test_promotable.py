"""Only what the contract confirmed at a sound level reaches users: a night's confirmed final, or a candidate whose own
decision holds at the promotion level. An intermediate accept of a liberal search (alpha 0.2, p 0.15) and the final of
a night whose confirmation refused it are refused by ``promote`` and ``canary`` with the reason; ``show`` says which."""
from __future__ import annotations

from pathlib import Path

import pytest

from evolve.data import BASELINE_PATH
from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine
from evolve.loop.night import NightRecord
from evolve.ops import canary
from evolve.ops.history import History
from evolve.ops.promotable import promotability
from evolve.ops.targets import Refused
from evolve.state.stores import StoreSet
from evolve.verify.confirmation import Confirmation
from evolve.verify.decision import AcceptanceRules
from workflow_fixtures import BENCHMARK, cli, commit_accept_round


@pytest.fixture(scope="module")
def liberal(tmp_path_factory) -> Path:
    """Stores of a search at alpha 0.2 (one engine round on synthetic questions)."""
    base = tmp_path_factory.mktemp("liberal")
    config = RunConfig(benchmark=BENCHMARK, strategy=BASELINE_PATH, stores=base / "stores", rounds=1,
                       candidates_per_round=1, limit=120, probe_size=20, acceptance=AcceptanceRules(alpha=0.2))
    Engine(config, track=False, progress=False).run()
    return config.stores


def _night(root: Path, record: dict, verdict: str) -> None:
    """Journal the end of a night of rounds 1..record's round ending on ``record``'s strategy, ``verdict`` by its
    confirmation."""
    confirmation = Confirmation(verdict=verdict, reason=f"gain {'confirmed' if verdict == 'CONFIRMED' else 'not'}",
                                start="0" * 64, final=record["strategy_hash"], questions=40, score_start=0.4,
                                score_final=0.5, improved=6, regressed=1, p=0.03 if verdict == "CONFIRMED" else 0.2,
                                alpha=0.05, words_start=90.0, words_final=95.0)
    night = NightRecord(ended="patience", first_round=1, last_round=record["round"], rounds=record["round"],
                        evaluations=3, start="0" * 64, final=record["strategy_hash"], diff={},
                        confirmation=confirmation, restored="0" * 64 if verdict == "REFUSED" else None)
    with StoreSet(root) as stores:
        stores.append_journal("NIGHT", night.model_dump())


def _copy(liberal: Path, tmp_path: Path) -> Path:
    import shutil
    return Path(shutil.copytree(liberal, tmp_path / "stores"))


def test_an_intermediate_accept_of_a_liberal_search_is_refused_whatever_its_p(liberal, tmp_path, serving, capsys):
    root = _copy(liberal, tmp_path)
    weak = commit_accept_round(root, {"retrieval.top_k": 7}, p=0.15, applied=False)
    strong = commit_accept_round(root, {"assembly.token_budget": 192}, p=0.004, applied=False)
    view = History(root)
    for record in (weak, strong):
        verdict = promotability(view, view.record(record["candidate_id"]))
        assert not verdict.ok and "accepted at alpha 0.2, above the promotion level 0.05" in verdict.why
        assert "no night confirmed it" in verdict.why
    code, out = cli(capsys, "promote", weak["candidate_id"], "--to", serving, "--stores", root)
    assert code == 1 and "above the promotion level 0.05" in out and "nothing is promoted" in out, out
    with pytest.raises(Refused, match="above the promotion level 0.05"):
        canary.start(root, serving, strong["candidate_id"], 0.1, {"approver": "ops", "reason": "try"},
                     allow_untracked=True)
    code, out = cli(capsys, "show", weak["candidate_id"], "--stores", root)
    assert "promotable: no:" in out, out
    code, out = cli(capsys, "candidates", "--stores", root)
    header, *rows = out.splitlines()
    assert header.rstrip().endswith("promotable")
    shown = {line.split()[0]: line.split()[-1] for line in rows if line.startswith("r0")}
    assert shown[weak["candidate_id"]] == shown[strong["candidate_id"]] == "no", out
    assert "-" in shown.values()  # a candidate not accepted is not promotable for another reason, said by promote


def test_the_review_page_says_whether_the_strategy_may_reach_users():
    from evolve.ops.promotable import Promotability
    from evolve.ops.review_page import _promotable

    shown = _promotable(Promotability(False, "r003-c01 was accepted at alpha 0.2 <above>"))
    assert "promotable: no: r003-c01 was accepted at alpha 0.2 &lt;above&gt;" in shown and "data-ok='false'" in shown
    assert _promotable(None) == ""


def test_an_accept_decided_at_the_promotion_level_promotes(stores, serving, capsys):
    code, out = cli(capsys, "show", "r002-c00", "--stores", stores)
    assert "promotable: yes: decided at alpha 0.05, at or below the promotion level 0.05" in out, out
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores, "--dry-run")
    assert code == 0, out


def test_a_nights_confirmed_final_promotes_and_a_refused_one_never_does(liberal, tmp_path, serving, capsys):
    root = _copy(liberal, tmp_path)
    weak = commit_accept_round(root, {"retrieval.top_k": 7}, p=0.15, applied=True)
    _night(root, weak, "CONFIRMED")
    code, out = cli(capsys, "promote", weak["candidate_id"], "--to", serving, "--stores", root, "--dry-run")
    assert code == 0, out
    verdict = promotability(History(root), History(root).record(weak["candidate_id"]))
    assert verdict.ok and verdict.why.startswith("the confirmed final of the night of rounds 1-2")
    strong = commit_accept_round(root, {"assembly.token_budget": 192}, p=0.001, applied=True)
    _night(root, strong, "REFUSED")
    code, out = cli(capsys, "promote", strong["candidate_id"], "--to", serving, "--stores", root)
    assert code == 1 and "whose confirmation REFUSED it" in out and "the start was restored" in out, out
