"""A user's memory is built again in the background once their captures pause, so the next recall finds it built."""
from __future__ import annotations

from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.strategy import RuntimeParts, StrategySlot

TURNS = [{"id": f"t{i}", "speaker": "Ann", "text": f"Note {i}: the garden needs water on day {i}.", "session": "s1"}
         for i in range(3)]


def test_a_paused_users_memory_is_built_once_and_the_recall_reuses_it(serving, embedder, tmp_path):
    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    memory = MemoryService(FileBackend(tmp_path / "data"), lambda: slot.current)
    memory.capture("ann", TURNS[:2])
    assert memory.warm_captured(lambda user: slot.current, quiet=60, timeout=0.01) == 0  # captures not paused yet
    assert memory.warm_captured(lambda user: slot.current, quiet=0, timeout=0.01) == 1
    built = memory.store("ann", slot.current)
    assert memory.warm_captured(lambda user: slot.current, quiet=0, timeout=0.01) == 0  # nothing captured since
    assert memory.store("ann", slot.current) is built  # the recall reads the store built in the background
    memory.capture("ann", TURNS[2:])
    assert memory.warm_captured(lambda user: slot.current, quiet=0, timeout=0.01) == 1
    rebuilt = memory.store("ann", slot.current)
    assert rebuilt is not built and "t2" in rebuilt.turns  # the new turn is in the memory the recall reads
    memory.capture("bob", TURNS[:1])
    memory.erase("bob")
    assert memory.warm_captured(lambda user: slot.current, quiet=0, timeout=0.01) == 0  # erased before its build
    assert memory.warmed == 2
