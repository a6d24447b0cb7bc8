"""The durable append (``evolve.files.append_lines``): a write cut short by a full disk is truncated back, a torn
tail is dropped before appending when asked, and a FIFO is refused without blocking."""
from __future__ import annotations

import errno
import os
import threading

import pytest

from evolve import files
from evolve.files import StoreError, append_lines, iter_jsonl, repair_torn_tail


def test_a_write_cut_short_by_a_full_disk_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n')
    real_write, calls = os.write, []

    def disk_fills(fd: int, data) -> int:  # half the line lands, then the disk is full
        if os.readlink(f"/proc/self/fd/{fd}") != str(path):
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "write", disk_fills)
    with pytest.raises(StoreError, match="disk full") as refused:
        append_lines(path, ['{"b": "' + "x" * 500 + '"}'])
    assert refused.value.out_of_space and len(calls) == 2
    assert path.read_bytes() == b'{"a": 1}\n'


def test_a_repairing_append_drops_a_torn_tail_first(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": ')
    append_lines(path, ['{"c": 3}'], repair=True)
    assert [r for _, r in iter_jsonl(path)] == [{"a": 1}, {"c": 3}]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    refusals: list[str] = []

    def attempt() -> None:
        for step in (lambda: repair_torn_tail(fifo), lambda: append_lines(fifo, ["{}"])):
            try:
                step()
            except StoreError as exc:
                refusals.append(str(exc))

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(10)
    blocked = worker.is_alive()
    if blocked:  # release a reader or writer stuck in open()
        for flags in (os.O_WRONLY, os.O_RDONLY):
            try:
                os.close(os.open(fifo, flags | os.O_NONBLOCK))
            except OSError:
                pass
    assert not blocked, "opening the FIFO blocked"
    assert len(refusals) == 2 and all("is a FIFO (named pipe), not a regular file" in r for r in refusals)
