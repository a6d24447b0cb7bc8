"""One turn, one meaning: a turn a client sends as raw LoCoMo (``blip_caption`` as ``image_caption``, the session's
``session_N_date_time`` as its time, the session key as its session) is, once captured and read back from the
capture log, the very Turn the LoCoMo reader builds offline."""
from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Iterator

import pytest

from evolve.benchmarks import generate_synthetic, load_benchmark, write_locomo
from evolve.benchmarks.turns import session_id
from evolve.benchmarks.types import Turn
from evolve.runtime.live import CaptureError
from evolve.serve.capturelog import turn_record
from evolve.serve.records import TurnRecord, load_record

REPO = Path(__file__).resolve().parents[2]
DEV4 = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
_SESSION = re.compile(r"session_(\d+)")


def _sent(conversation: dict) -> Iterator[dict]:
    """Every turn of a raw LoCoMo conversation as a client sends it, in dialogue order."""
    keys = sorted((k for k in conversation if _SESSION.fullmatch(k)), key=lambda k: int(k.split("_")[1]))
    for key in keys:
        for t in conversation[key]:
            yield {"id": t["dia_id"], "speaker": t["speaker"], "text": t["text"], "session": key,
                   "time": conversation.get(f"{key}_date_time"), "image_caption": t.get("blip_caption")}


def _served(raw: dict) -> Turn:
    """The turn the service holds for a request's turn: as the capture log keeps it, read back."""
    stored = turn_record(raw, f"turn {raw['id']}").to_json()
    return load_record(TurnRecord, json.loads(stored), "capture log").turn()


def _same_turns(path: Path) -> dict[tuple[str, str], Turn]:
    """Assert the service's turn equals the adapter's for every turn of the file; the adapter's turns by
    (conversation, turn id)."""
    offline = {(c.id, t.id): t for c in load_benchmark(f"locomo:{path}").conversations.values() for t in c.turns()}
    sent = [(sample["sample_id"], raw) for sample in json.loads(path.read_text()) for raw in _sent(sample["conversation"])]
    assert len(sent) == len(offline)
    for cid, raw in sent:
        assert _served(raw) == offline[(cid, raw["id"])], (cid, raw)
    return offline


@pytest.mark.skipif(not DEV4.is_file(), reason="the LoCoMo dev file is not beside the checkout")
def test_every_dev4_turn_sent_as_raw_locomo_is_the_adapter_s_turn():
    turns = list(_same_turns(DEV4).values())
    assert len(turns) == 2080
    assert sum("[shares a photo of " in t.text for t in turns) == 438  # dev4: 438 turns carry a photo
    assert all(t.timestamp is not None and re.fullmatch(r"D\d+", t.session_id) for t in turns)


CAPTIONS = ["a photo of a red bike", "An image of two cats on a sofa", "  a picture of   a lake ", "photo of a dog",
            "   ", "a photography of a bridge"]


def _synthetic(path: Path) -> list[dict]:
    """A synthetic LoCoMo file with every kind of caption, an ISO zoned session time, a session without a time and
    a loosely spaced LoCoMo time; its samples."""
    write_locomo(generate_synthetic(seed=3, n_personas=2, n_sessions=5), path)
    samples = json.loads(path.read_text())
    conversation = samples[0]["conversation"]
    for turn, caption in zip(conversation["session_1"], CAPTIONS):
        turn["blip_caption"] = caption
    conversation["session_2_date_time"] = "2023-04-27T15:40:00+02:00"  # ISO, zoned
    del conversation["session_3_date_time"]  # no date: the turns carry none
    conversation["session_4_date_time"] = "9:30  pm on  21 May, 2023"  # LoCoMo style, loose spacing
    path.write_text(json.dumps(samples))
    return samples


def test_every_turn_of_a_synthetic_file_with_every_kind_of_caption_time_and_session_is_the_adapter_s_turn(tmp_path):
    path = tmp_path / "synthetic.json"
    samples = _synthetic(path)
    conversation = samples[0]["conversation"]
    turns = {turn_id: t for (cid, turn_id), t in _same_turns(path).items() if cid == samples[0]["sample_id"]}
    first = [turns[t["dia_id"]] for t in conversation["session_1"]][:len(CAPTIONS)]
    assert [t.text.partition(" [")[2] for t in first] == [
        "shares a photo of a red bike]", "shares a photo of two cats on a sofa]", "shares a photo of a lake]",
        "shares a photo of photo of a dog]", "", "shares a photo of a bridge]"]
    by_session = {t.session_id: t for t in turns.values()}
    assert by_session["D2"].timestamp == datetime(2023, 4, 27, 13, 40)  # naive UTC
    assert by_session["D3"].timestamp is None
    assert by_session["D4"].timestamp == datetime(2023, 5, 21, 21, 30)


def test_a_locomo_session_key_names_the_session_its_turn_ids_name():
    assert [session_id(s) for s in ("session_3", "session_0", "D3", "session_03", "s1", "session_3b")] == [
        "D3", "D0", "D3", "session_03", "s1", "session_3b"]
    raw = {"id": "D3:1", "speaker": "Ann", "text": "Hi", "session": "session_3"}
    assert turn_record(raw, "turns[0]").session == "D3"


def test_an_unparseable_time_is_refused_naming_the_turn():
    raw = {"id": "D1:1", "speaker": "Ann", "text": "Hi", "session": "D1", "time": "last Tuesday"}
    with pytest.raises(CaptureError, match=r"turns\[2\]\.time: unparseable time 'last Tuesday'"):
        turn_record(raw, "turns[2]")

