"""Adapters read other systems' real output as contract records, stream a file with bounded memory, and refuse bad
lines naming file and line."""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import bm25s
import pytest

from evolve.benchmarks import load_benchmark
from evolve.observe.adapters import read_traces, records
from evolve.observe.contract import ContractError
from evolve.observe.diagnosis import dcr_by_tau

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapters"
MEM0_LOG = FIXTURES / "mem0_locomo.jsonl"  # recorded by experiments/bench/record_mem0_log.py (Mem0 OSS, offline)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_mem0_search_and_get_all_log():
    raw = _lines(MEM0_LOG)
    read = list(records(MEM0_LOG, "mem0"))
    assert [r["id"] for _, r in read] == [line["id"] for line in raw]
    for (where, record), line in zip(read, raw):
        found = line["search"]["results"]
        assert [(i["id"], i["rank"], i["score"]) for i in record["retrieved"]] == [
            (r["id"], n, r["score"]) for n, r in enumerate(found, 1)]
        assert [p["source_ids"] for p in record["packed"]] == [r["metadata"]["source_ids"] for r in found]
        assert record["stored"] == [r["id"] for r in line["get_all"]["results"]]
    traces = read_traces(MEM0_LOG, "mem0")
    assert [t.stages for t in traces] == [["ingestion", "retrieval", "assembly"]] * len(raw)
    assert dcr_by_tau(traces, {t.question_id for t in traces}) == {"1": 1.0, "3": 1.0, "5": 0.0, "6": 0.0}
    # the gold turn is among Mem0's top 5 for some questions and not for others: both outcomes occur
    packed = [t.all_evidence_packed for t in traces if t.evidence_known]
    assert True in packed and False in packed


def test_a_log_of_a_real_bm25_retriever(tmp_path):
    bench = load_benchmark("locomo:" + str(Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo"
                                          / "locomo_dev4.json")) if (Path(__file__).resolve().parents[3] / "shared"
                                                                       ).is_dir() else None
    if bench is None:
        pytest.skip("LoCoMo data not on this machine")
    conv = next(iter(bench.conversations.values()))
    turns = conv.turns()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([t.text for t in turns], show_progress=False), show_progress=False)
    questions = [q for q in bench.questions if q.conversation_id == conv.id and q.evidence][:8]
    ids, scores = retriever.retrieve(bm25s.tokenize([q.question for q in questions], show_progress=False), k=5,
                                     show_progress=False)
    log = tmp_path / "bm25.jsonl"
    log.write_text("".join(json.dumps({
        "id": q.id, "category": q.category, "question": q.question,
        "gold": {"answer": q.answer, "evidence": list(q.evidence)},
        "documents": [{"id": turns[int(i)].id, "text": turns[int(i)].text, "score": float(s)}
                      for i, s in zip(row_ids, row_scores)], "context_ids": [turns[int(row_ids[0])].id]}) + "\n"
        for q, row_ids, row_scores in zip(questions, ids, scores)))
    traces = read_traces(log, "retriever")
    assert [t.question_id for t in traces] == [q.id for q in questions]
    assert all(t.stages == ["retrieval", "assembly"] for t in traces)
    assert all(len(t.packed_evidence) <= 1 for t in traces)  # one document packed, its own source
    first = next(records(log, "retriever"))[1]
    assert [d["rank"] for d in first["retrieved"]] == [1, 2, 3, 4, 5]
    assert first["packed"] == [{k: first["retrieved"][0][k] for k in ("id", "text", "source_ids")}]


@pytest.mark.parametrize("lines,message", [
    ([{"id": "a", "category": "c"}, {"id": "a", "category": "c"}], r"f.jsonl:2: duplicate id 'a' \(first at .*f.jsonl:1\)"),
    ([{"id": "a", "category": "c"}, {"category": "c"}], r"f.jsonl:2: \(record\): 'id' is a required property"),
    ([{"trace_version": "1", "id": "a", "category": "c"}, {"trace_version": "2", "id": "b", "category": "c"}],
     r"f.jsonl:2: trace_version '2' differs from '1' on line 1: mixed contract versions"),
    (["not json"], r"f.jsonl:1: not JSON"),
    ([[1, 2]], r"f.jsonl:1: expected a JSON object, got list"),
])
def test_bad_lines_are_refused_naming_file_and_line(tmp_path, lines, message):
    path = tmp_path / "f.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    with pytest.raises(ContractError, match=message):
        read_traces(path)


def test_an_adapter_that_cannot_read_a_line_names_it(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"id": "a", "category": "c", "search": {"results": [{"id": "x"}]}}) + "\n")
    with pytest.raises(ContractError, match=r"m.jsonl:1: the mem0 adapter cannot read this line: KeyError\('memory'\)"):
        read_traces(path, "mem0")


def test_a_100_mb_file_is_streamed_with_bounded_memory(tmp_path):
    path, n, text = tmp_path / "big.jsonl", 0, "word " * 4000
    with path.open("w") as fh:
        while fh.tell() < 100 * 2**20:
            fh.write(json.dumps({"trace_version": "1", "id": f"q{n}", "category": "temporal",
                                 "gold": {"answer": f"answer {n}", "evidence": [f"D1:{n}"]},
                                 "retrieved": [{"id": f"m{n}-{k}", "rank": k + 1, "text": f"{n} {k} {text}"}
                                               for k in range(5)],
                                 "packed": [{"text": f"answer {n + k * (n % 2)}", "source_ids": [f"D1:{n}"]}
                                            for k in (1, 2)], "answer": "x", "judge": {"correct": n % 2 == 0}})
                     + "\n")
            n += 1
    tracemalloc.start()
    try:
        traces = read_traces(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(traces) == n and traces[-1].stages == ["retrieval", "assembly", "generation", "results"]
    assert traces[0].answer_in_evidence is True and traces[1].answer_in_evidence is False
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.1f} MiB reading a {path.stat().st_size / 2**20:.0f} MiB file"
