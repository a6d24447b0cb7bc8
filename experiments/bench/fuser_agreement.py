"""The fusion judges against the generator's truth: the rule judge and the ``fuser`` role on a local model.

For each judge, fusion at its defaults over every user memory of a generated scene file, and the share of the event
pairs it packs together that belong together (precision) and of those, the share it packs (recall), as
``scenes_report.py`` counts them; for the LLM judge also its calls, the observations it had to keep standalone
(unusable replies) and the wall time. The model is one of the packaged local models (``evolve/llm/local.py``) served
by llama.cpp on 127.0.0.1, replies constrained to the judge's JSON schema. Run from the repository root:

    python experiments/bench/fuser_agreement.py [--bench scenegen:1:1] [--models smollm2 gemma3-270m] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from evolve import load_benchmark
from evolve.llm import LLMClient, ResponseCache, RoleConfig, UsageStats
from evolve.llm.fuser import LLMFusionJudge
from evolve.llm.local import LocalLLMServer
from evolve.runtime.fusion import RuleJudge

sys.path.insert(0, str(Path(__file__).parent))
from scenes_report import pack_agreement  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="scenegen:1:1", help="scenegen[:SEED[:HOMES]]")
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3-270m"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    bench = load_benchmark(args.bench)
    rows = [("rule", pack_agreement(args.bench, bench, RuleJudge()), "-", "-", "-", "-")]
    for model in args.models:
        with LocalLLMServer(model) as server, tempfile.TemporaryDirectory() as cache:
            stats = UsageStats()
            cfg = RoleConfig(backend="llm", base_url=server.base_url, model=server.model, structured="json_object",
                             max_tokens=32, seed=0)
            judge = LLMFusionJudge(LLMClient(cfg, ResponseCache(Path(cache)), stats, role="fuser"))
            started = time.perf_counter()
            agreement = pack_agreement(args.bench, bench, judge)
            seconds = time.perf_counter() - started
            decided = ", ".join(f"{k} {n}" for k, n in sorted(judge.decided.items())) or "-"
            rows.append((f"llm ({server.model})", agreement, str(stats.get("fuser", "requests")), decided,
                         str(judge.unusable), f"{seconds:.0f}"))
    lines = [f"`{args.bench}`: {sum(len(c.turns()) for c in bench.conversations.values())} events over "
             f"{len(bench.conversations)} user memories; fusion at its defaults.", "",
             "| judge | pairs packed | precision | recall | calls | decisions | kept standalone (unusable) | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for name, a, calls, decided, unusable, seconds in rows:
        lines.append(f"| {name} | {a['pairs']} | {a['precision']:.3f} | {a['recall']:.3f} | {calls} | {decided} | "
                     f"{unusable} | {seconds} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(f"# Fusion judges against the generator's truth\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
