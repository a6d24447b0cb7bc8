"""The documentation site: its generated reference matches the code, and it builds without a warning."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from evolve.cli import docs_reference

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
REGENERATE = "python -m evolve.cli.docs_reference"


def test_generated_reference_is_current(tmp_path):
    docs_reference.write(tmp_path)
    stale = [name for name in sorted(p.name for p in tmp_path.iterdir())
             if not (REFERENCE / name).is_file()
             or (REFERENCE / name).read_text(encoding="utf-8") != (tmp_path / name).read_text(encoding="utf-8")]
    assert not stale, f"stale generated reference: run `{REGENERATE}` (differs: {', '.join(stale)})"


def test_generation_is_deterministic():
    assert docs_reference.render() == docs_reference.render()


def test_reference_covers_every_key_command_and_field():
    """Each evolvable strategy path, each command and each trace field has a row (a guard on the generator)."""
    from evolve.cli.main import build_parser
    from evolve.observe.trace import Summary, Trace
    from evolve.strategy.schema import evolvable_dimensions

    pages = docs_reference.render()
    assert all(f"| `{path}` |" in pages["strategy.md"] for path in evolvable_dimensions())
    commands = [name for name, _, _ in docs_reference._commands(build_parser())]
    assert {"memevolve run", "memevolve eval", "memevolve journal verify"} <= set(commands)
    assert all(f"## `{name}`" in pages["cli.md"] for name in commands)
    assert all(f"| `{f.name}` |" in pages["records.md"] for cls in (Trace, Summary) for f in fields(cls))
    assert "| `acceptance.alpha` |" in pages["config.md"] and "| `holdout.split.seed` |" in pages["config.md"]


def test_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not warnings, done.stderr
    assert (tmp_path / "site" / "reference" / "strategy" / "index.html").is_file()
