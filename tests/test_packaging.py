"""The built wheel works on its own: installed into a fresh virtual environment (dependencies borrowed from the
running interpreter, the repository's editable install not), ``memevolve eval``, ``run`` and ``diff`` run from an
unrelated directory, read the data files shipped in the wheel and write only where they are told to."""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from evolve.runtime.cache import SHARED_EMBEDDINGS_ENV

REPO = Path(__file__).resolve().parents[1]
#: Top-level entries of the repository that are not part of the source tree a wheel is built from.
NOT_SOURCE = {".git", ".venv", "build", "dist", "stores", "runs", "tests", "experiments", ".pytest_cache"}
#: Paths that must not appear inside the installed package or the environment (work products of the CLI).
WORK_DIRS = ("stores", "experiments", "runs", "mlruns", "mlartifacts")


def _copy_source(dest: Path) -> Path:
    """A clean copy of the source tree, so the build neither writes ``build/`` or ``*.egg-info`` into the repository
    nor packs stale files left in a previous ``build/lib``."""
    def ignore(directory: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        if Path(directory) == REPO:
            skip |= NOT_SOURCE & set(names)
        return skip

    return Path(shutil.copytree(REPO, dest, ignore=ignore, symlinks=True))


def _tree(root: Path) -> dict[str, tuple[int, int] | None]:
    """Every path under ``root`` (minus bytecode caches) with (size, mtime_ns); ``None`` for directories."""
    out: dict[str, tuple[int, int] | None] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        out[rel] = None if path.is_dir() else (st.st_size, st.st_mtime_ns)
    return out


def _repo_state() -> dict:
    top = {p.name for p in REPO.iterdir()} - {".pytest_cache", "__pycache__"}
    return {"top": top, "stores": _tree(REPO / "stores"), "experiments": _tree(REPO / "experiments")}


def _run(argv: list[object], cwd: Path, env: dict[str, str], timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _check(result: subprocess.CompletedProcess, code: int = 0) -> str:
    assert result.returncode == code, (f"exit {result.returncode} (expected {code}) for {result.args}\n"
                                       f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
    return result.stdout


def test_wheel_installs_and_runs_outside_the_repository(tmp_path):
    # ---- build the wheel from a clean copy of the repository's source tree
    source = _copy_source(tmp_path / "src")
    dist = tmp_path / "dist"
    _check(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                 "-q", "-w", dist, source], cwd=tmp_path, env=os.environ.copy()))
    wheels = list(dist.glob("memevolve-*.whl"))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]

    # The wheel carries every data file of the package (package-data), and nothing of tests or work products.
    names = set(zipfile.ZipFile(wheel).namelist())
    data_files = {p.relative_to(REPO).as_posix() for p in (REPO / "evolve").rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    assert {"evolve/data/baseline.yaml", "evolve/data/strategy.schema.json", "evolve/data/bundles.yaml"} <= data_files
    assert data_files <= names, f"missing from the wheel: {sorted(data_files - names)}"
    assert "evolve/cli/__init__.py" in names and "evolve/loop/engine.py" in names
    assert not [n for n in names if n.split("/")[0] in ("tests", *WORK_DIRS)]

    # ---- a fresh environment with the wheel installed and the running interpreter's dependencies visible
    venv = tmp_path / "venv"
    _check(_run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path, env=os.environ.copy()))
    python = venv / "bin" / "python"
    purelib = Path(_check(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               cwd=tmp_path, env=os.environ.copy())).strip())
    assert purelib.is_relative_to(venv)
    # Plain directory lines: each directory joins sys.path, but the .pth files inside it (among them the
    # editable finder of a development install) are not processed, so ``evolve`` resolves to the wheel only.
    parents = [p for p in site.getsitepackages() if Path(p).is_dir() and not Path(p).is_relative_to(venv)]
    assert parents
    (purelib / "_memevolve_test_dependencies.pth").write_text("".join(f"{p}\n" for p in parents))

    # Not the session's shared embedding cache either: the installed package must load the embedding model itself.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "MLFLOW_TRACKING_URI",
                        SHARED_EMBEDDINGS_ENV)}
    env.update(HF_HUB_OFFLINE="1", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    work = tmp_path / "work"
    work.mkdir()
    # Before the wheel is installed the dependencies import but ``evolve`` does not: the dev install stays out.
    _check(_run([python, "-c", "import yaml, pydantic, numpy"], cwd=work, env=env))
    missing = _run([python, "-c", "import evolve"], cwd=work, env=env)
    assert missing.returncode == 1 and "No module named 'evolve'" in missing.stderr, missing.stderr
    _check(_run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel],
                cwd=work, env=env))

    probe = _check(_run([python, "-c", """if True:
        import json, sys
        import evolve, evolve.data
        print(json.dumps({"evolve": evolve.__file__, "baseline": str(evolve.data.BASELINE_PATH),
                          "editable": sorted(m for m in sys.modules if "editable" in m)}))
        """], cwd=work, env=env))
    where = json.loads(probe.strip().splitlines()[-1])
    assert Path(where["evolve"]).is_relative_to(purelib), where
    assert not Path(where["evolve"]).resolve().is_relative_to(REPO), where
    assert where["editable"] == [], where
    baseline = Path(where["baseline"])
    assert baseline.is_relative_to(purelib) and baseline.is_file(), where

    memevolve = venv / "bin" / "memevolve"
    assert memevolve.is_file()
    repo_before, venv_before = _repo_state(), _tree(venv)

    # ---- eval: the packaged baseline on a small synthetic benchmark
    _check(_run([memevolve, "eval", "--bench", "synthetic:0:2", "--limit", 20, "--out", work / "eval"], work, env))
    summary = json.loads((work / "eval" / "summary.json").read_text())
    assert summary["n_questions"] == 20 and 0.0 <= summary["accuracy"] <= 1.0
    assert summary["n_scored"] > 0 and (work / "eval" / "traces.jsonl").stat().st_size > 0

    # ---- run: one round; no strategy key, so the config's default (the packaged baseline) is used, and the
    # relative stores path resolves against the working directory, not against the install location.
    config = work / "run.yaml"
    config.write_text(yaml.safe_dump(dict(benchmark="synthetic:0:2", stores="stores", limit=30, probe_size=10,
                                          rounds=1, candidates_per_round=1, seed=0)))
    out = _check(_run([memevolve, "run", "--config", config, "--no-tracking", "--json"], work, env))
    result = json.loads(out)
    stores = work / "stores"
    assert (stores / "state.json").is_file(), \
        f"no stores under the working directory; new in the environment: {sorted(set(_tree(venv)) - set(venv_before))}"
    state = json.loads((stores / "state.json").read_text())
    assert state["last_committed_round"] == 1 and result["rounds"] == 1
    assert result["baseline"]["hash"] == summary["strategy_hash"]  # both ran the packaged baseline
    assert Path(result["current"]["path"]).is_relative_to(stores)
    assert (stores / "candidate_outcomes.jsonl").read_text().strip()
    assert not (work / "experiments").exists()  # --no-tracking: no MLflow store anywhere

    # ---- diff: the installed baseline against itself
    diff = _check(_run([memevolve, "diff", baseline, baseline], work, env))
    assert "no differences" in diff

    # Nothing was written into the repository or into the environment (package data included).
    assert _repo_state() == repo_before
    assert _tree(venv) == venv_before
    for name in WORK_DIRS:
        assert not (purelib / name).exists() and not (purelib / "evolve" / name).exists()


def test_ci_runs_the_readme_test_command_verbatim():
    """.ci/run's last line is the README's test command, character for character."""
    readme = (REPO / "README.md").read_text().splitlines()
    command = next(line for line in readme if line.rstrip().endswith("python -m pytest -q"))
    assert (REPO / ".ci" / "run").read_text().rstrip().splitlines()[-1] == command
