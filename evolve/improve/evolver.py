"""Evolver: concrete values for planned directions, searched by persistent Optuna TPE studies.

One study per dimension group (``memevolve-<group>``, e.g. ``memevolve-retrieval``) lives in an
Optuna RDB storage, so the search state survives restarts; every proposal is one trial, told the
candidate's paired accuracy delta (or failed if it was refused or never evaluated).

Parameter encoding. A numeric ``increase``/``decrease`` samples one integer parameter named
after the direction's key (its move's text, e.g. ``retrieval.top_k::increase``): the move's
*magnitude in schema steps*, ``k in [1, floor(max_step / step)]``. Its distribution never changes, so TPE's history
stays comparable across trials whatever the current value; the move applied is the ``k``-th legal
value away from the current one (:func:`evolve.improve.planner.move_values`), and magnitudes beyond the
remaining headroom (schema bound or an invariant) collapse onto the farthest legal value. Boolean,
enum and ``set:`` directions are deterministic: their trial only records the move (user attrs).

``blind_trial`` samples every evolvable dimension over its full schema range (on the ``step``
grid) in one study ``memevolve-blind`` and repairs cross-field invariants, for comparing the
directed loop against blind TPE.

Telling after the commit. A round's results are told to Optuna only once the round is committed: the round's
bundle stores them as ``optuna_pending`` in ``state.json``, :meth:`Evolver.apply_pending` tells them right after the
commit, and again on the next start and at :meth:`Evolver.begin_round` (results already told are skipped), while
``begin_round`` fails the trials an interrupted round left running. Telling before the commit would let a crash leave
Optuna ahead of the stores, and the replayed round would then sample differently.

Stores that share one database (``optuna_storage``) pass a ``namespace``: their studies are then named
``<namespace>:memevolve-<group>``, so each stores directory searches in its own studies, and samplers are seeded from
the name without the namespace, so a stores directory gets the same proposals on a shared database as on its own.
"""
from __future__ import annotations

import functools
import math
import threading
import time
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
import sqlalchemy.exc
from optuna.trial import TrialState

from evolve.errors import EvolveError
from evolve.improve.planner import Direction, max_steps, move_values
from evolve.files import StoreError
from evolve.strategy.artifact import StrategyError, derive, validate_strategy
from evolve.strategy.schema import EvolvableDimension, evolvable_dimensions
from evolve.strategy.invariants import repair
from evolve.strategy.moves import Step
from evolve.strategy.prompts import label
from evolve.strategy.paths import value_at

BLIND_STUDY = "memevolve-blind"
#: Outcomes after which the next move along the same direction doubles its step.
GROW_AFTER = ("accepted", "inert")
BLIND_KEY = "blind"


class EvolverError(EvolveError, ValueError):
    """A direction cannot be turned into a legal proposal."""


@dataclass(frozen=True)
class Proposal:
    changes: dict[str, Any]
    key: str
    study: str
    trial_number: int


def study_name(group: str) -> str:
    return f"memevolve-{group}"


def _attr(value: Any) -> Any:
    """A value as a trial attribute: a prompt by its id and version."""
    return label(value) if isinstance(value, dict) else value


def _grid_high(dim: EvolvableDimension) -> int | float:
    """Largest value of the ``low + n * step`` grid inside the schema range."""
    low, high, step = (Decimal(str(v)) for v in (dim.low, dim.high, dim.step))
    top = low + ((high - low) // step) * step
    return int(top) if dim.kind == "integer" else float(top)


def _db_errors(method):
    """Turn an Optuna storage failure (disk full, unwritable, corrupt database) into a StoreError naming it."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:
            cause = exc.__cause__ or exc
            raise StoreError(self.storage_url.removeprefix("sqlite:///"),
                             f"Optuna study database: {str(cause).splitlines()[0]}") from None
    return wrapper


def check_storage(storage_url: str, timeout_s: float = 5.0) -> None:
    """Raise ``ValueError`` saying why unless a connection to the database of ``storage_url`` opens within
    ``timeout_s`` (a SQLite file is created on first use and needs none)."""
    if storage_url.startswith("sqlite"):
        return
    outcome: list[str | None] = [f"no connection within {timeout_s:g}s"]

    def connect() -> None:
        try:
            engine = sqlalchemy.create_engine(storage_url)
            with engine.connect():
                outcome[0] = None
            engine.dispose()
        except Exception as exc:  # DBAPI errors differ per driver
            outcome[0] = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]

    thread = threading.Thread(target=connect, daemon=True, name="optuna storage check")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive() or outcome[0] is not None:
        raise ValueError(f"cannot connect to {sqlalchemy.engine.make_url(storage_url).render_as_string()}: "
                         f"{outcome[0]}")


class Evolver:
    """Directed and blind proposals backed by persistent TPE studies in ``storage_url``."""

    @_db_errors
    def __init__(self, storage_url: str, seed: int, n_startup_trials: int = 5, namespace: str = ""):
        self.storage_url, self.namespace = storage_url, namespace
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if storage_url.startswith("sqlite:///"):
            Path(storage_url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        self.storage = self._storage(storage_url)
        self.seed, self.n_startup_trials = int(seed), int(n_startup_trials)
        self.dims = evolvable_dimensions()
        self._steps = {path: dim.step for path, dim in self.dims.items()}
        self._studies: dict[str, optuna.Study] = {}
        self._round: int | None = None

    @staticmethod
    def _storage(storage_url: str, attempts: int = 3) -> optuna.storages.RDBStorage:
        """The storage; a second process creating the same schema at the same moment ("table ... already exists")
        is waited for and retried."""
        attempt = 1
        while True:
            try:
                return optuna.storages.RDBStorage(storage_url)
            except sqlalchemy.exc.SQLAlchemyError:
                if attempt >= attempts:
                    raise
                time.sleep(0.2 * attempt)
                attempt += 1

    def name(self, base: str) -> str:
        """The study name of ``base`` (e.g. ``memevolve-retrieval``) in this evolver's namespace."""
        return f"{self.namespace}:{base}" if self.namespace else base

    def _sampler(self, name: str, salt: int | str) -> optuna.samplers.TPESampler:
        # Re-seeding by trial count (or round) keeps a reopened study from replaying the samples it already drew.
        seed = zlib.crc32(f"{self.seed}:{name.rpartition(':')[2]}:{salt}".encode())
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.n_startup_trials)

    @_db_errors
    def study(self, name: str) -> optuna.Study:
        """The named study, created on first use and reloaded with its trials afterwards."""
        if name not in self._studies:
            study = optuna.create_study(study_name=name, storage=self.storage, load_if_exists=True,
                                        sampler=self._sampler(name, 0), direction="maximize")
            n_trials = len(study.get_trials(deepcopy=False))
            if self._round is not None:
                study.sampler = self._sampler(name, f"round{self._round}")
            elif n_trials:
                study.sampler = self._sampler(name, n_trials)
            self._studies[name] = study
        return self._studies[name]

    # ------------------------------------------------------------ directed proposals

    @_db_errors
    def propose(self, strategy: dict, direction: Direction) -> Proposal:
        """A change that moves every part of ``direction.key`` the planned way; ask one trial for it.

        Numeric parts move by the same magnitude ``k`` (in their own schema steps), sampled by TPE. The first move
        along a direction is its smallest step; after a move that was accepted, or that changed nothing at the
        probe (inert), the next one is twice as large (capped at ``max_step``) instead of the same size again."""
        parts = []
        for step in direction.move.steps:
            dim = self.dims.get(step.path)
            if dim is None:
                raise EvolverError(f"{direction.key}: {step.path!r} is not an evolvable schema path")
            parts.append((dim, step))
        moved = strategy
        for dim, step in parts:  # refuse before a trial is asked when some part cannot move at all
            moved = derive(moved, {dim.path: self._legal(moved, dim, step, direction.key)[0]})
        numeric = [dim for dim, step in parts if step.direction in ("increase", "decrease")]
        study = self.study(self.name(study_name(parts[0][0].group)))
        if numeric:
            self._enqueue_step(study, direction.key, min(max_steps(dim) for dim in numeric))
        trial = study.ask()
        k = trial.suggest_int(direction.key, 1, min(max_steps(dim) for dim in numeric)) if numeric else 1
        changes: dict[str, Any] = {}
        moved = strategy
        for dim, step in parts:
            try:
                values = self._legal(moved, dim, step, direction.key)
            except EvolverError:
                study.tell(trial.number, state=TrialState.FAIL)
                raise
            changes[dim.path] = values[min(k, len(values)) - 1]
            moved = derive(moved, {dim.path: changes[dim.path]})
        first = parts[0][0].path
        for name, attr in (("key", direction.key), ("symptom", direction.symptom_key),
                           ("from", _attr(value_at(strategy, first))), ("to", _attr(changes[first]))):
            trial.set_user_attr(name, attr)
        return Proposal(changes, direction.key, study.study_name, trial.number)

    @staticmethod
    def _legal(strategy: dict, dim: EvolvableDimension, step: Step, key: str) -> list:
        """The values ``step`` can take ``dim`` to, nearest first; :class:`EvolverError` if there is none."""
        try:
            values = move_values(strategy, dim, step)
        except ValueError as exc:
            raise EvolverError(f"{key}: {exc}") from None
        if not values:
            raise EvolverError(f"{key}: no legal move of {dim.path} from the current value "
                               f"{value_at(strategy, dim.path)!r} (schema bound, already set, or blocked by an "
                               "invariant)")
        return values

    def _enqueue_step(self, study: optuna.Study, key: str, top: int) -> None:
        """Fix the next magnitude of ``key`` where the history decides it: 1 for the first move, twice the last
        one after an accepted or inert move (at most ``top``); otherwise TPE samples it."""
        history = [t for t in study.get_trials(deepcopy=False) if key in t.params
                   and not t.user_attrs.get("abandoned")]
        if not history:
            study.enqueue_trial({key: 1})
            return
        last = max(history, key=lambda t: t.number)
        if last.state == TrialState.COMPLETE and last.user_attrs.get("outcome") in GROW_AFTER:
            grown = min(2 * int(last.params[key]), top)
            if grown > last.params[key]:
                study.enqueue_trial({key: grown})

    # ------------------------------------------------------------ blind search

    @_db_errors
    def blind_trial(self, strategy: dict) -> Proposal:
        """Sample every evolvable dimension over its full schema range (prompts, which have none, excepted);
        invariants repaired."""
        study = self.study(self.name(BLIND_STUDY))
        trial = study.ask()
        sampled: dict[str, Any] = {}
        for path, dim in self.dims.items():
            if dim.kind == "prompt":
                continue
            if dim.kind == "boolean":
                sampled[path] = trial.suggest_categorical(path, [False, True])
            elif dim.kind == "enum":
                sampled[path] = trial.suggest_categorical(path, list(dim.choices))
            elif dim.kind == "integer":
                sampled[path] = trial.suggest_int(path, dim.low, _grid_high(dim), step=dim.step)
            else:
                sampled[path] = round(trial.suggest_float(path, dim.low, _grid_high(dim), step=dim.step), 10)
        changes = repair(strategy, sampled, self._steps)
        try:
            validate_strategy(derive(strategy, changes), source=f"{BLIND_STUDY} trial {trial.number}")
        except StrategyError:
            study.tell(trial.number, state=TrialState.FAIL)
            raise
        trial.set_user_attr("repaired", sorted(p for p in changes if changes[p] != sampled.get(p)))
        return Proposal(changes, BLIND_KEY, study.study_name, trial.number)

    # ------------------------------------------------------------ rounds

    @_db_errors
    def begin_round(self, round_no: int, pending: list[dict]) -> None:
        """Make round ``round_no`` replayable: apply results committed but not yet told, fail trials left
        RUNNING by an interrupted round, and reseed every sampler from (seed, study, round)."""
        self.apply_pending(pending)
        for summary in optuna.get_all_study_summaries(self.storage, include_best_trial=False):
            if summary.study_name.rpartition(":")[0] != self.namespace:
                continue  # another stores directory's study on a shared database
            study = self.study(summary.study_name)
            for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                study.ask()  # an enqueued trial never asked: take it so it can be closed below
            for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                # Marked so the replayed round treats the direction as never moved (see ``propose``).
                self.storage.set_trial_user_attr(trial._trial_id, "abandoned", True)
                study.tell(trial.number, state=TrialState.FAIL)
        self._round = round_no
        for name, study in self._studies.items():
            study.sampler = self._sampler(name, f"round{round_no}")

    @_db_errors
    def apply_pending(self, pending: list[dict]) -> None:
        """Tell committed results ``[{study, trial, value, outcome}]`` (value None = FAIL; outcome "accepted" or
        "inert" steers the next step size); trials already finished are skipped."""
        for item in pending:
            study = self.study(item["study"])
            states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
            if states.get(item["trial"]) != TrialState.RUNNING:
                continue
            if item.get("outcome"):
                trial = next(t for t in study.get_trials(deepcopy=False) if t.number == item["trial"])
                self.storage.set_trial_user_attr(trial._trial_id, "outcome", item["outcome"])
            if item["value"] is None:
                study.tell(item["trial"], state=TrialState.FAIL)
            else:
                study.tell(item["trial"], float(item["value"]))

    # ------------------------------------------------------------ results

    @_db_errors
    def tell(self, proposal: Proposal, value: float) -> None:
        """Report the candidate's paired accuracy delta (higher is better)."""
        if not math.isfinite(value):
            raise EvolverError(f"{proposal.study} trial {proposal.trial_number}: value must be finite, got {value!r}")
        self.study(proposal.study).tell(proposal.trial_number, float(value))

    @_db_errors
    def fail(self, proposal: Proposal) -> None:
        """Close a proposal that was refused or never evaluated, so no trial stays RUNNING."""
        self.study(proposal.study).tell(proposal.trial_number, state=TrialState.FAIL)
