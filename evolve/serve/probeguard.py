"""Label-free pairs for the canary guard: probe questions from each canary user's own captured turns.

Live users ask questions nobody has answers for, so recalls alone give the guard nothing to judge. Here, off the
request path, each user the canary serves that the service holds in memory yields probe questions from its own
memory (:func:`~evolve.benchmarks.probes.conversation_probes`: deterministic, no LLM, each with its answer), each
asked at the end of a session at which its answer holds as the reference lifecycle reads the user's turns
(:class:`~evolve.runtime.reference.ReferenceLifecycle`; the latest, unless a later statement made it stale), with the
probes of the changes it finds (a slot's new value, its value before, a retraction). Both the serving and the canary
strategy pack each probe on the user's memory, and the pair (does the serving context carry the answer, does the
canary's) goes to the canary's guard, counted under the probe's LoCoMo category. Work is bounded: at most
``per_user`` new probes per user and pass, and a user's probes are made again only once its turns changed. The
judge holds a user's probes (its words) only while the service holds the user, and remembers those it judged by a
digest: an erased user is forgotten at the next pass, and when an erased turn changes a user's probes, only the
digests of probes still asked are kept.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from evolve.benchmarks.probe_mix import locomo_category
from evolve.benchmarks.probes import Probe, conversation_probes
from evolve.observe.answer import carried
from evolve.runtime.reference import ReferenceLifecycle
from evolve.serve.memory import MemoryService
from evolve.serve.strategy import CanaryRun, StrategySlot
from evolve.serve.tenants import Quarantined, UnknownUser

#: New probes judged per user in one pass.
PER_USER = 25


def _key(probe: Probe) -> bytes:
    """What the judge remembers of a probe it judged: a digest of its question and answer, not their words."""
    return hashlib.blake2b(f"{probe.question}\0{probe.answer}".encode(), digest_size=16).digest()


@dataclass
class _Probed:
    """A user's probes under one canary run: made from ``turns`` turns (-1: released, made again when the user is
    held again), and the digests of the probes judged so far."""

    turns: int
    probes: list[Probe]
    judged: set[bytes] = field(default_factory=set)


class ProbeJudge:
    """Feeds the running canary's guard from its users' probes (:meth:`run_pass`, called by a service worker)."""

    def __init__(self, memory: MemoryService, slot: StrategySlot, per_user: int = PER_USER):
        self.memory, self.slot, self.per_user = memory, slot, per_user
        self.reference = ReferenceLifecycle()
        self._probed: dict[tuple[int, str], _Probed] = {}  # (canary start entry, user) -> its probes

    def run_pass(self) -> int:
        """Judge new probes of every user the running canary serves that the service holds in memory (loaded by its
        own requests); the pairs judged. A pass never loads a user: it neither holds the memory of users nobody is
        asking for, nor, under ``max_users``, evicts those who are."""
        run = self.slot.canary
        if run is None:
            return 0
        held = self.memory.loaded()
        resident = set(held)
        self._probed = {k: v if k[1] in resident else _Probed(-1, [], v.judged) for k, v in self._probed.items()
                        if k[0] == run.start_index and self.memory.backend.exists(k[1])}
        done = 0
        for user in held:
            if self.slot.canary is not run:  # stopped (by this guard, or the journal) or changed meanwhile
                break
            if self.slot.canary_for(user) is run:
                try:
                    done += self._judge(user, run)
                except (UnknownUser, Quarantined):  # erased or unreadable meanwhile
                    continue
        return done

    def _judge(self, user: str, run: CanaryRun) -> int:
        probed = self._probes(user, run)
        todo = [p for p in probed.probes if _key(p) not in probed.judged][: self.per_user]
        if not todo:
            return 0
        serving = self.slot.current
        stores = self.memory.store(user, serving), self.memory.store(user, run.loaded)
        for n, probe in enumerate(todo, 1):
            contexts = [loaded.runtime.ask(store, probe.question, probe.asked_at, answer=False).packed
                        for loaded, store in zip((serving, run.loaded), stores)]
            good = [carried(probe.answer, [item.text for item in packed]) for packed in contexts]
            probed.judged.add(_key(probe))
            category = locomo_category(f"probe_{probe.kind}")
            stop = run.guard.add(*good, source=category, category=category)
            if stop is not None:
                self.slot.guard_stop(run, stop)
                return n
        return len(todo)

    def _probes(self, user: str, run: CanaryRun) -> _Probed:
        """The user's probes, made again when its turns changed since (it captured more, or one was erased; of the
        questions judged, those still asked are kept, so none quotes an erased turn); the conversation is read only
        then."""
        key = (run.start_index, user)
        probed = self._probed.get(key)
        if probed is None or probed.turns != self.memory.turn_count(user):
            conversation = self.memory.conversation(user)
            probes = conversation_probes(conversation, timeline=self.reference)
            judged = probed.judged & {_key(p) for p in probes} if probed is not None else set()
            probed = self._probed[key] = _Probed(len(conversation.turns()), probes, judged)
        return probed
