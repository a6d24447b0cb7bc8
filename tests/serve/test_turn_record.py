"""One turn, one meaning: a turn a client sends with its photo's caption is folded as the LoCoMo adapter folds it,
so the service packs what the offline harness packs for image turns."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.benchmarks import load_benchmark
from evolve.serve.memory import turn_record

DEV4 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo_dev4.json"


def test_a_caption_s_leading_a_photo_of_is_dropped_as_the_adapter_drops_it():
    raw = {"id": "D1:1", "speaker": "Ann", "text": "Look at this!", "session": "D1",
           "image_caption": "a photo of a red bike leaning on a wall"}
    assert turn_record(raw, "turns[0]").text == "Look at this! [shares a photo of a red bike leaning on a wall]"
    assert turn_record({**raw, "image_caption": "  "}, "turns[0]").text == "Look at this!"


@pytest.mark.skipif(not DEV4.is_file(), reason="the LoCoMo dev file is not beside the checkout")
def test_every_dev4_turn_sent_as_raw_locomo_reads_as_the_adapter_reads_it():
    """Each turn as a client sends raw LoCoMo (``blip_caption`` as ``image_caption``) against the adapter's turn."""
    adapter = {(c.id, t.id): t.text for c in load_benchmark(f"locomo:{DEV4}").conversations.values()
               for t in c.turns()}
    images = 0
    for sample in json.loads(DEV4.read_text()):
        for key, turns in sample["conversation"].items():
            if not key.startswith("session_") or not isinstance(turns, list):
                continue
            for t in turns:
                raw = {"id": t["dia_id"], "speaker": t["speaker"], "text": t["text"], "session": key,
                       "image_caption": t.get("blip_caption")}
                assert turn_record(raw, t["dia_id"]).text == adapter[(sample["sample_id"], t["dia_id"])]
                images += bool(t.get("blip_caption"))
    assert images > 400  # dev4: 438 of 2,080 turns carry a photo
