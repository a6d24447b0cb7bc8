"""One root for the project's exceptions: every exception class the package defines derives from EvolveError, no
two share a name, and the CLI reports a user error in one line with exit code 2."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import evolve
from evolve.cli import main
from evolve.errors import ConfigError, EvolveError, UserError


def _exception_classes() -> list[type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(evolve.__path__, "evolve."):
        if info.name.endswith("__main__"):  # runs the CLI
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__.startswith("evolve."):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(found.values())


def test_every_project_exception_derives_from_the_root_and_names_are_unique():
    classes = _exception_classes()
    assert len(classes) >= 20
    assert [c.__qualname__ for c in classes if not issubclass(c, EvolveError)] == []
    names = [c.__qualname__ for c in classes]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_llm_and_the_run_config_share_one_config_error():
    from evolve.llm.config import EndpointUnreachable
    from evolve.llm.local import LocalLLMError
    from evolve.loop.config import ConfigError as RunConfigError

    assert RunConfigError is ConfigError and issubclass(ConfigError, UserError)
    assert issubclass(EndpointUnreachable, ConfigError) and issubclass(LocalLLMError, ConfigError)


def test_a_user_error_exits_2_in_one_line(capsys, tmp_path):
    assert main(["run", "--config", str(tmp_path / "missing.yaml"), "--no-tracking"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
