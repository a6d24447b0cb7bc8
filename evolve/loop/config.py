"""Run configuration (``experiments/*.yaml``): what to evolve, on which harness, under which acceptance rules."""
from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from evolve.benchmarks.probe_mix import ProbeSettings
from evolve.benchmarks.types import file_spec
from evolve.data import BASELINE_PATH
from evolve.errors import ConfigError
from evolve.files import MAX_TEXT_BYTES, read_bounded
from evolve.strategy import strict_yaml
from evolve.strategy.strict_yaml import YAMLInputError
from evolve.loop.budget import BudgetConfig
from evolve.observe.objective import Objective
from evolve.verify.decision import AcceptanceRules, CostLimits


class _Strict(BaseModel):
    """No unknown fields, no coercion (``rounds: true`` is not 1, ``"3"`` is not 3), finite numbers only."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)





def _not_empty(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        raise ValueError("an empty path would mean the working directory; name a path")
    return value


#: A path given as a YAML string (not empty).
PathField = Annotated[Path, Field(strict=False), BeforeValidator(_not_empty)]


class PlannerConfig(_Strict):
    """How the planner ranks directions."""

    use_tree: bool = Field(True, description="rank directions with the UCB1 hypothesis tree as well as reputation")
    exploration: float = Field(1.0, ge=0, le=100, description="UCB1 exploration constant c0 (at most 100: beyond, "
                                                              "the observed effects no longer count)")
    max_directions: int = Field(6, ge=1, le=100, description="directions offered per round (at most 100, more than "
                                                             "the schema's evolvable paths)")
    paths: list[str] | None = Field(
        None, min_length=1, max_length=200,
        description="fnmatch patterns (at most 200) of the strategy paths every planner may move (e.g. "
                    "'retrieval.*'); each must match an evolvable path. Unset: every path the run can move")

    @field_validator("paths")
    @classmethod
    def _patterns(cls, paths: list[str] | None) -> list[str] | None:
        for pattern in paths or ():
            if not pattern.strip() or len(pattern) > 200:
                raise ValueError(f"{pattern[:80]!r}: a pattern is 1 to 200 characters, not blank")
        return paths


class ConfirmationConfig(_Strict):
    """The night's one decision that counts: its final strategy against its start, on questions its search never saw
    (a share of each category's scored questions, drawn once by ``seed``), by a one-sided exact McNemar test."""

    share: float = Field(0.4, ge=0.1, le=0.6, description="share of each category's scored questions set aside for "
                                                          "the confirmation (0.1 to 0.6: fewer leave the test without "
                                                          "power, more leave the search without questions)")
    alpha: float = Field(0.05, gt=0, le=0.2, description="level of the one-sided test of the final against the "
                                                         "night's start: the false-promotion rate per night")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the split")


class NightConfig(_Strict):
    """When one ``memevolve run`` (a night) ends, and the test its final strategy must pass."""

    patience: int | None = Field(None, ge=1, le=1000, description="end the night after this many rounds in a row "
                                                                  "applied no change (unset: run every round)")
    max_evaluations: int | None = Field(None, ge=1, le=10**6, description="end the night once its candidates' full "
                                                                         "evaluations reach this count (checked "
                                                                         "after each round)")
    max_minutes: float | None = Field(None, gt=0, le=10**5, description="end the night after the round that passes "
                                                                        "this wall time")
    confirmation: ConfirmationConfig | None = Field(None, description="test the night's final against its start on "
                                                                      "held-back questions; refused, the night's "
                                                                      "start is restored")


class ExecutorConfig(_Strict):
    """Where conversations are evaluated: this machine (``workers`` processes) or Ray actors."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = Field(None, description="ray: None starts a local Ray; 'auto', 'host:port' or "
                                                   "'ray://host:port' joins a cluster")
    num_workers: int = Field(2, ge=1, le=1024, description="ray: actors, each holding the embedding model and a warm "
                                                            "cache (at most 1024, a large cluster)")
    max_retries: int = Field(1, ge=0, le=10, description="ray: retries of a conversation whose actor died (at most "
                                                          "10: an actor that dies that often is not flaky but broken)")

    @model_validator(mode="after")
    def _address_needs_ray(self) -> "ExecutorConfig":
        if self.kind == "local" and self.address is not None:
            raise ValueError("address: only kind 'ray' joins a cluster; the local executor would ignore it")
        return self


class SplitConfig(_Strict):
    """A deterministic split of the benchmark's conversations into dev and holdout."""

    holdout_fraction: float = Field(gt=0, lt=1, description="share of conversations held out")
    seed: int = Field(0, description="seed of the split")


class HoldoutConfig(_Strict):
    """Questions the search never sees: a second benchmark, or a split of the run's benchmark by conversation."""

    benchmark: str | None = Field(None, description="a second benchmark spec (no conversation shared with the run's)")
    split: SplitConfig | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "HoldoutConfig":
        if (self.benchmark is None) == (self.split is None):
            raise ValueError("give exactly one of benchmark (a second benchmark) or split (holdout_fraction, seed)")
        return self

    def describe(self) -> str:
        """How the holdout is chosen, as recorded with the stores' harness identity."""
        return self.benchmark or f"split:{self.split.holdout_fraction:g}:{self.split.seed}"


class ExternalRuntimeConfig(_Strict):
    """A memory system this project did not write, evolved through an adapter (docs: how-to/external-system.md)."""

    model_config = ConfigDict(populate_by_name=True)

    adapter: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
                         description="'package.module:Factory': Factory(knobs, conversation) ingests the conversation "
                                     "and returns a session whose recall(question, knobs, asked_at) lists items "
                                     "with text and source_ids")
    knob_schema: PathField = Field(alias="schema", description="JSON Schema of the system's knobs; x-evolvable "
                                                                "marks what the loop may change")
    strategy: PathField = Field(description="the knob values the first round starts from (YAML)")
    bundles: PathField = Field(description="the planner's symptom -> knob-direction table for these knobs (the "
                                           "format of evolve/data/bundles.yaml)")
    call_timeout_s: float = Field(120.0, gt=0, le=3600, description="longest an adapter call (ingest, recall) may "
                                                                     "take before the run stops naming it")


class RunConfig(_Strict):
    """Everything a nightly run needs."""

    benchmark: str = Field("synthetic:0", description="benchmark spec: locomo:PATH[#CONV,...], longmemeval:PATH, "
                                                      "probes:PATH[#CONV,...], synthetic[:SEED[:PERSONAS]] or "
                                                      "lifecycle:SEED[:PERSONAS]")
    augment: Literal["probes"] | None = Field(None, description="add questions to the benchmark's own: probes "
                                                               "(generated from its conversations; never held out)")
    probes: ProbeSettings = Field(default_factory=ProbeSettings, description="how probe questions are chosen (for "
                                  "augment: probes, and on a benchmark with no labelled question, which is then "
                                  "evolved on probes alone): mix, per_turns, difficulty")
    strategy: PathField = Field(BASELINE_PATH, description="the strategy the first round starts from")
    stores: PathField = Field(Path("stores"), description="directory of the run's state (journal, strategies, "
                                                          "records, checkpoint, caches)")
    rounds: int = Field(4, ge=1, le=10_000, description="rounds in total (at most 10,000, years of nightly runs); "
                                                        "night: may end a run sooner")
    candidates_per_round: int = Field(4, ge=1, le=100, description="candidates screened per round: each that reaches "
                                                                   "the probe uses one, compared in full unless the "
                                                                   "probe or the critic stops it (at most 100: the "
                                                                   "multiplicity adjustment leaves more without power)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of every random choice (the range numpy and Optuna "
                                                           "accept)")
    limit: int | None = Field(None, ge=1, le=10_000_000, description="evaluate only the first N questions (at most "
                                                                     "10,000,000, beyond any benchmark)")
    probe_size: int = Field(80, ge=10, le=100_000, description="questions of the probe screen (at most 100,000)")
    judge_threshold: float = Field(0.5, gt=0, le=1, description="token-F1 at or above which an answer is correct")
    include_adversarial: bool = Field(False, description="also score LoCoMo's adversarial questions")
    on_role_error: Literal["stop", "mark"] = Field(
        "stop", description="a failing role (e.g. LLM endpoint) stops the run, or marks the question unscored")
    workers: int = Field(1, ge=1, le=256, description="evaluate conversations in this many processes (pays on idle "
                                                      "cores; at most 256, each holds the embedding model)")
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    max_reverts: int = Field(2, ge=1, le=100, description="replay-stability gate: reverts per symptom before refusal "
                                                          "(at most 100)")
    escalation_threshold: int = Field(3, ge=1, le=10_000, description="blocked rounds before a class of candidates "
                                                                      "is escalated (at most the most rounds, 10,000)")
    objective: Objective = Field("accuracy", description="what the loop optimises: accuracy | evidence | answer")
    acceptance: AcceptanceRules = Field(default_factory=AcceptanceRules)
    cost: CostLimits = Field(default_factory=CostLimits)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    holdout: HoldoutConfig | None = None
    planner: PlannerConfig = Field(default_factory=PlannerConfig)
    night: NightConfig = Field(default_factory=NightConfig)
    tracking_uri: str | None = Field(None, description="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                                       "sqlite:///experiments/mlflow.db)")
    experiment: str = Field("memevolve", description="MLflow experiment name")
    optuna_storage: str | None = Field(None, description="SQLAlchemy URL of the Optuna studies (default: the SQLite "
                                                         "file optuna.db in the stores)")
    roles: dict = Field(default_factory=dict, description="per-role backend settings (docs: how-to/llm-endpoints.md)")
    runtime: ExternalRuntimeConfig | None = Field(None, description="evolve an external memory system's knobs "
                                                                     "instead of the embedded runtime's strategy")

    @model_validator(mode="after")
    def _one_strategy(self) -> "RunConfig":
        if self.runtime is not None and "strategy" in self.model_fields_set:
            raise ValueError("strategy: with runtime, the starting knobs are runtime.strategy; leave strategy out")
        return self

    @field_validator("optuna_storage")
    @classmethod
    def _storage_url(cls, url: str | None) -> str | None:
        if url is not None:
            try:
                parsed = make_url(url)
            except ArgumentError:
                raise ValueError(f"{url!r} is not a SQLAlchemy database URL (e.g. sqlite:///path/optuna.db or "
                                 "postgresql://user@host/db)") from None
            if parsed.drivername.startswith("sqlite") and not parsed.database:
                raise ValueError(f"{url!r} names no database file; an in-memory SQLite study would not persist")
            try:
                parsed.get_dialect().import_dbapi()
            except NoSuchModuleError:
                raise ValueError(f"{parsed.drivername!r} is not a database SQLAlchemy knows") from None
            except ImportError as exc:
                raise ValueError(f"the {parsed.drivername} driver is not installed ({exc}); install it or use a "
                                 "sqlite:/// URL") from None
        return url

    def resolve(self, base: Path) -> "RunConfig":
        """Make relative paths absolute against ``base`` (:func:`load_config` passes the config file's directory)."""
        def fix(p: Path) -> Path:
            return p if p.is_absolute() else (base / p).resolve()

        def spec(bench: str) -> str:
            parts = file_spec(bench)
            if parts is None or not parts[1] or Path(parts[1]).is_absolute():
                return bench
            scheme, file, selection = parts  # PATH#CONV,...: a subset of the file's conversations
            return f"{scheme}:{(base / file).resolve()}" + (f"#{selection}" if "#" in bench else "")

        holdout = self.holdout
        if holdout is not None and holdout.benchmark is not None:
            holdout = holdout.model_copy(update={"benchmark": spec(holdout.benchmark)})
        runtime = self.runtime
        if runtime is not None:
            runtime = runtime.model_copy(update={"knob_schema": fix(runtime.knob_schema),
                                                 "strategy": fix(runtime.strategy), "bundles": fix(runtime.bundles)})
        return self.model_copy(update={"strategy": runtime.strategy if runtime else fix(self.strategy),
                                       "stores": fix(self.stores), "benchmark": spec(self.benchmark),
                                       "holdout": holdout, "runtime": runtime})


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model whose fields sit at ``loc`` (a validation error location) below ``model``."""
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return None
        annotation = field.annotation
        if get_origin(annotation) in (Union, types.UnionType):
            annotation = next((a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)),
                              None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _message(error: dict) -> str:
    """A validation error's message; an unknown key lists the valid keys at its level."""
    if error["type"] != "extra_forbidden":
        return error["msg"]
    model = _model_at(RunConfig, tuple(error["loc"][:-1]))
    if model is None:
        return error["msg"]
    return f"{error['msg']}; valid keys here: {', '.join(model.model_fields)}"


def _missing_paths(config: RunConfig) -> list[tuple[str, Path]]:
    """``(key, path)`` of every file the config names that does not exist (after resolution)."""
    missing = [] if config.strategy.is_file() else [("strategy", config.strategy)]
    if config.runtime is not None:
        missing = [(f"runtime.{key}", path) for key, path in (("schema", config.runtime.knob_schema),
                                                              ("strategy", config.runtime.strategy),
                                                              ("bundles", config.runtime.bundles))
                   if not path.is_file()]
    specs = [("benchmark", config.benchmark)]
    if config.holdout is not None and config.holdout.benchmark is not None:
        specs.append(("holdout.benchmark", config.holdout.benchmark))
    for key, spec in specs:
        parts = file_spec(spec)
        if parts is not None and parts[1] and not Path(parts[1]).exists():
            missing.append((key, Path(parts[1])))
    return missing


def load_config(path: str | Path, *, check_files: bool = True) -> RunConfig:
    """Read a run config strictly. Relative paths (``strategy``, ``stores``, benchmark files, the holdout
    benchmark) resolve against the directory the config is named in (a symlink's own), so a config runs the same
    from any working directory; with ``check_files`` a file it names that does not exist is refused naming the key."""
    path = Path(path)
    try:
        data, lines = strict_yaml.load(read_bounded(path, MAX_TEXT_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read run config: {exc}") from None
    except YAMLInputError as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        raise ConfigError(f"{where}: {exc.path or '<root>'}: {exc.problem}") from None
    if data is None:
        raise ConfigError(f"{path}: <root>: the run config is empty; an empty file would run the defaults, "
                          "so say what to run (at least benchmark and stores)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: <root>: a run config must be a mapping, got {type(data).__name__}")
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()  # a misspelt key first: the missing key it was meant to be is then explained too
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        line = lines.get(where)
        raise ConfigError(f"{path}{f':{line}' if line else ''}: {where}: {_message(first)}") from None
    base = path.absolute().parent  # the directory the config is named in: a symlink's own, not its target's
    config = config.resolve(base)
    for key, missing in _missing_paths(config) if check_files else ():
        line = lines.get(key)
        raise ConfigError(f"{path}{f':{line}' if line else ''}: {key}: {missing} does not exist (relative paths "
                          f"resolve from the config file's directory, {base})")
    return config
