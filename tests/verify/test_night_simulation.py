"""experiments/bench/night_simulation.py at a tiny size: whole nights through the shipped path, the confirmation
split of the shipped code, and the false-promotion and power lines of every design."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "bench" / "night_simulation.py"
RATE = r"(\d\.\d{4}) \[(\d\.\d{4}), (\d\.\d{4})\] \((\d+)/(\d+)\)"


def test_the_script_prints_every_design_s_rates_and_writes_its_report(tmp_path):
    report = tmp_path / "night.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--nights", "3", "--power-runs", "2", "--max-rounds", "4",
                           "--resamples", "200", "--workers", "1", "--report", str(report)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # progress only on a terminal
    lines = re.findall(r"^([^:\n]+): " + RATE + r"; (\d+\.\d) rounds and (\d+\.\d) candidates", done.stdout, re.M)
    designs = [name for name, *_ in lines]
    assert len(lines) == 3 * 7 and len(set(designs)) == 7  # null, +3 pp and +5 pp, seven designs each
    assert sum("no confirmation" not in d for d in set(designs)) == 5 and "4 rounds, no confirmation (before)" in designs
    assert any(d.endswith("search at alpha 0.2 with Holm per round") for d in designs)
    for name, share, low, high, k, runs, rounds, compared in lines:
        assert float(low) <= float(share) <= float(high) and int(k) <= int(runs) in (2, 3)
        assert 1 <= float(rounds) <= 4 and float(compared) <= 4 * float(rounds)
        if name.startswith("4 rounds"):
            assert float(rounds) == 4  # a fixed night runs all its rounds
    text = report.read_text()
    assert "night_simulation.py --nights 3" in text and "one-sided exact McNemar" in text
    assert done.stdout.strip().splitlines()[-2] in text


def test_power_is_measured_at_the_gains_asked_for():
    done = subprocess.run([sys.executable, str(SCRIPT), "--nights", "1", "--power-runs", "1", "--max-rounds", "2",
                           "--resamples", "200", "--workers", "1", "--effects", "0.01",
                           "--only", "confirmation 0.4 at 0.05, search at alpha 0.2"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    heads = re.findall(r"^## (.+)$", done.stdout, re.M)
    assert heads == ["False promotion per night (every change null)",
                     "Power per night (round 1's first change gains +1 pp, every other change null)"]
