"""experiments/bench/contract_simulation.py at a tiny size: its simulated changes are null or gain what they say, and
it prints the false-promotion and power lines and writes its report."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "bench" / "contract_simulation.py"
RATE = r"(\d\.\d{4}) \[(\d\.\d{4}), (\d\.\d{4})\] \((\d+)/(\d+)\)"


def _module():
    spec = importlib.util.spec_from_file_location("contract_simulation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_null_change_gains_nothing_and_an_effect_gains_its_size():
    sim = _module()
    rng = np.random.default_rng(0)
    deltas = {0.0: [], 0.05: []}
    for _ in range(400):
        base = sim.parent(rng, 582)
        for effect, out in deltas.items():
            y, e = sim.change(rng, base, effect).apply(base)
            out.append((y.mean() - base[0].mean(), e.mean() - base[1].mean()))
    null, gain = np.array(deltas[0.0]).mean(axis=0), np.array(deltas[0.05]).mean(axis=0)
    assert abs(null[0]) < 0.002 and abs(null[1]) < 0.002, null
    assert abs(gain[0] - 0.05) < 0.003 and gain[1] > 0.02, gain
    assert sorted(set(sim.categories(228))) == sorted(sim.SHARES) and len(sim.categories(228)) == 228


def test_the_script_prints_false_promotion_and_power_lines_and_writes_its_report(tmp_path):
    report = tmp_path / "report.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--comparisons", "30", "--nights", "2", "--night-sizes", "228",
                           "--power-runs", "4", "--resamples", "200", "--check", "2", "--workers", "1",
                           "--report", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # progress only on a terminal
    out = done.stdout
    comparisons = re.findall(r"false-promotion per comparison, n=(\d+), ([^:]+): " + RATE, out)
    assert {(n, name) for n, name, *_ in comparisons} == {
        (n, name) for n in ("228", "582") for name in (
            "no secondary", "secondary, unsplit (before)", "secondary, split 0.04/0.01 (shipped)",
            "secondary, split, per-night budget 0.0125")}
    for *_, share, low, high, k, runs in comparisons:
        assert runs == "30" and float(low) <= float(share) <= float(high) and float(share) == round(int(k) / 30, 4)
    nights = re.findall(r"false-promotion per night, n=228, [^:]+: " + RATE, out)
    assert len(nights) == 4 and all(runs == "2" for *_, runs in nights)
    assert len(re.findall(r"power \+[25] pp, n=(?:228|582), [^:]+: alone " + RATE + "; in a round " + RATE, out)) == 16
    assert re.search(r"agree on \d+ of \d+", out)
    text = report.read_text()
    assert "contract_simulation.py --comparisons 30" in text and "Wiens" in text and out.strip() in text


def test_a_night_of_gaining_candidates_merges_accepts_and_carries_runners_up():
    sim = _module()
    rules = sim.variants(ROOT / "experiments" / "locomo_answer.yaml", 200, 4)
    night = sim.night_task((582, 0, 200, rules, 4, 4, 100, 0.06))
    for applied, accepted, compared, follow_ups in night.values():
        assert applied == 4 and accepted > applied and 0 < follow_ups < compared <= 4 * 4, night
    null = sim.night_task((228, 0, 200, rules, 2, 4, 100, 0.0))
    assert all(follow_ups == 0 for *_, follow_ups in null.values()), null
