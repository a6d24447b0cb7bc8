"""Crash-safe file primitives: atomic replace, durable appends, torn-tail repair.

Every write of persistent state goes through here so that a crash (or ``kill -9``) at any
instant leaves either the old or the new content of a file, never a mix.
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import signal
import stat
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from evolve.errors import EvolveError, UserError


log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
_MISSING: Any = object()
_CAUSES = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a parent path is not a directory",
    errno.EISDIR: "path is a directory",
    errno.EFBIG: "file too large (file size limit exceeded)",
}


#: Test-only: the name of a step (see :func:`crash_point`) at which the process sends itself a signal (SIGKILL
#: unless :data:`CRASH_SIGNAL_ENV` names another, e.g. ``SIGINT``). Inert unless :data:`TEST_HOOKS_ENV` is ``1``,
#: which only the test suite sets (tests/conftest.py): in normal use the variables do nothing.
CRASH_ENV, CRASH_SIGNAL_ENV = "MEMEVOLVE_CRASH_AT", "MEMEVOLVE_CRASH_SIGNAL"
TEST_HOOKS_ENV = "MEMEVOLVE_TEST_HOOKS"


def crash_point(step: str) -> None:
    """Test-only: signal this process when the test hooks are enabled and :data:`CRASH_ENV` names ``step``; how
    tests crash (or interrupt) a write between two steps."""
    if os.environ.get(TEST_HOOKS_ENV) == "1" and os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.Signals[os.environ.get(CRASH_SIGNAL_ENV, "SIGKILL")])


#: Largest run config or strategy file read (bytes): hand-written YAML, a few kB in practice.
MAX_TEXT_BYTES = 16 * 2**20
#: Largest stores document (state.json, escalations.json, ...) or checkpoint file read (bytes).
MAX_DOC_BYTES = 256 * 2**20
#: Largest benchmark file read (bytes): LongMemEval-S is about 270 MB.
MAX_BENCHMARK_BYTES = 2**30
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileRefused(EvolveError, OSError):
    """A file the project would read is not a regular file, or is larger than its bound; ``str()`` says which."""

    def __str__(self) -> str:
        return str(self.strerror)


def _open_regular_fd(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """A descriptor of ``path`` opened with ``flags`` once it is known to be a regular file (a FIFO is opened
    without blocking and refused, so nothing hangs); :class:`FileRefused` otherwise."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader, or a socket
            _refuse_irregular(os.stat(path).st_mode)
        raise
    try:
        _refuse_irregular(os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _refuse_irregular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        name = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise FileRefused(errno.EINVAL, f"is {name}, not a regular file")


def open_regular(path: str | Path):
    """``path`` opened for binary reading once it is known to be a regular file (a FIFO is opened without blocking
    and refused, so nothing hangs); :class:`FileRefused` otherwise, ``FileNotFoundError`` if it does not exist."""
    return os.fdopen(_open_regular_fd(path, os.O_RDONLY), "rb")


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them: :class:`FileRefused` if it is not a regular
    file (FIFO, device, directory) or is larger, checked before anything is read."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(limit + 1) if size <= limit else b""
        if size > limit or len(data) > limit:
            raise FileRefused(errno.EFBIG, f"is {max(size, len(data)):,} bytes, larger than the {limit:,} bytes "
                                           "read from such a file")
        return data


class StoreError(UserError, RuntimeError):
    """A persistent store could not be read or written; names the file and the cause."""

    def __init__(self, path: str | Path, cause: str, errno: int | None = None):
        self.path, self.cause, self.errno = str(path), cause, errno
        super().__init__(f"{path}: {cause}")

    @property
    def out_of_space(self) -> bool:
        """Whether the write failed for want of space (disk full or quota exceeded)."""
        return self.errno in (errno.ENOSPC, errno.EDQUOT)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def os_error(path: str | Path, exc: OSError, action: str) -> StoreError:
    """A :class:`StoreError` that says in words why ``action`` on ``path`` failed (``errno`` kept)."""
    if isinstance(exc, FileRefused):
        return StoreError(path, f"cannot {action}: {exc}", exc.errno)
    cause = _CAUSES.get(exc.errno or 0, exc.strerror or str(exc))
    return StoreError(path, f"cannot {action}: {cause} (errno {exc.errno}: {exc.strerror})", exc.errno)


def now_iso() -> str:
    """Current time, ISO 8601 UTC with microseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def fsync_dir(directory: Path) -> None:
    """Make a rename or file creation inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StoreError(directory, "cannot create directory: a file is in the way (not a directory)") from None
    except OSError as exc:
        raise os_error(directory, exc, "create directory") from None
    return directory


def require_output_dir(directory: Path) -> Path:
    """Check, before any work, that ``directory`` is or can become a writable directory; :class:`StoreError` if not."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise StoreError(directory, "cannot write output here: exists and is not a directory")
    existing = next(p for p in (directory, *directory.parents) if p.exists())
    if not existing.is_dir():
        raise StoreError(directory, f"cannot write output here: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StoreError(directory, f"cannot write output here: permission denied on {existing}")
    return directory


def require_writable_dir(directory: Path) -> None:
    """:class:`StoreError` unless a file can be created in ``directory`` (probed with a temp file, removed at once);
    mode bits alone do not say (root, immutable directories, read-only file systems)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".probe.", suffix=TEMP_SUFFIX)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise os_error(directory, exc, "create files in") from None


# ---------------------------------------------------------------- atomic replace


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: temp file in the same directory, fsync, rename, fsync dir.
    An existing file keeps its permission bits; a new one gets the usual ``0o666 & ~umask``.

    On any failure the previous file is left untouched and :class:`StoreError` says why.
    """
    path = Path(path)
    ensure_dir(path.parent)
    tmp: str | None = None
    try:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
        fsync_dir(path.parent)
    except OSError as exc:
        raise os_error(path, exc, "write") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def dumps_json(data: Any, source: str | Path) -> str:
    """Stable, human-readable JSON; :class:`StoreError` if ``data`` is not JSON-serialisable."""
    try:
        return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise StoreError(source, f"cannot serialise to JSON: {exc}") from None


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, dumps_json(data, path))


def read_json(path: str | Path, default: Any = _MISSING) -> Any:
    """Parse a JSON file; ``default`` if it does not exist (error if no default); error naming the file if corrupt."""
    path = Path(path)
    try:
        text = read_bounded(path, MAX_DOC_BYTES).decode("utf-8")
    except FileNotFoundError:
        if default is _MISSING:
            raise StoreError(path, "file does not exist") from None
        return default
    except UnicodeDecodeError as exc:
        raise StoreError(path, f"corrupt JSON: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise os_error(path, exc, "read") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreError(path, f"corrupt JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


# ---------------------------------------------------------------- append-only JSONL


def append_lines(path: Path, lines: list[str], sync: bool = True, repair: bool = False) -> None:
    """Append complete lines (each without its newline); ``sync``: durably (fsynced), else they survive the
    process's crash but not the machine's. A failed write or fsync (a full disk) truncates the file back to its
    length before, so a refused append leaves it as it was. ``repair``: first drop an unterminated last line a crash
    left mid-append (never acknowledged), so the new lines never join it. :class:`StoreError` saying why."""
    if not lines:
        return
    data = memoryview("".join(line + "\n" for line in lines).encode("utf-8"))
    if repair:
        repair_torn_tail(path)
    created = not path.exists()
    try:
        fd = _open_regular_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError as exc:
        raise os_error(path, exc, "append to") from None
    size = os.fstat(fd).st_size
    try:
        while data:
            data = data[os.write(fd, data):]
        if sync:
            os.fsync(fd)
    except OSError as exc:
        _truncate_back(path, fd, size, sync)
        raise os_error(path, exc, "append to") from None
    finally:
        os.close(fd)
    if created and sync:
        try:
            fsync_dir(path.parent)
        except OSError as exc:
            raise os_error(path.parent, exc, "sync directory") from None


def _truncate_back(path: Path, fd: int, size: int, sync: bool) -> None:
    """Undo a partial append: ``fd`` back to ``size`` bytes (if even that fails, the torn tail it leaves is dropped
    by the next repairing append or read, and the lines were never acknowledged)."""
    try:
        os.ftruncate(fd, size)
        if sync:
            os.fsync(fd)
    except OSError as exc:
        log.error("%s: could not truncate a failed append back to %d bytes: %s", path, size, exc)


def is_torn(path: Path) -> bool:
    """Whether ``path`` ends in an unterminated line (read-only: a file that cannot be written is no obstacle)."""
    try:
        with open_regular(path) as fh:
            if fh.seek(0, os.SEEK_END) == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise os_error(path, exc, "read") from None


def require_appendable(path: Path) -> None:
    """:class:`StoreError` now, before any work, if the existing file ``path`` cannot be opened for appending
    (read-only mode, immutable, read-only file system); a missing file is created later and is no obstacle."""
    if not path.is_file():
        return
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise os_error(path, exc, "open for appending") from None


#: How a torn last line is reported within :func:`reading_only` (``None`` outside it).
_TORN_TAIL: ContextVar[Callable[[Path, int, bytes], None] | None] = ContextVar("torn_tail", default=None)


@contextmanager
def reading_only(report: Callable[[Path, int, bytes], None]) -> Iterator[None]:
    """Within it, the JSONL logs another process appends to (a service's capture and recall logs) are only read:
    :func:`iter_jsonl` passes a torn last line (an append a crash cut short) to ``report(path, line_no, data)`` and
    stops before it, and :func:`repair_torn_tail` leaves it in place. Outside, the first raises and the second
    truncates, as a log's own writer must before it appends."""
    token = _TORN_TAIL.set(report)
    try:
        yield
    finally:
        _TORN_TAIL.reset(token)


def repair_torn_tail(path: Path) -> bytes:
    """Truncate an unterminated last line left by a crash mid-append; return the bytes removed (logged). Within
    :func:`reading_only` nothing is truncated (the line is reported when read)."""
    if _TORN_TAIL.get() is not None or not is_torn(path):
        return b""
    try:
        with open(path, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return b""
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return b""
            keep = size
            chunk = 4096
            while keep > 0:  # scan backwards for the last newline
                start = max(0, keep - chunk)
                fh.seek(start)
                block = fh.read(keep - start)
                pos = block.rfind(b"\n")
                if pos >= 0:
                    keep = start + pos + 1
                    break
                keep = start
            fh.seek(keep)
            torn = fh.read()
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise os_error(path, exc, "repair torn last line of") from None
    log.warning("%s: dropped a torn last line from an interrupted append (%d bytes): %r",
                path, len(torn), torn[:200])
    return torn


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line_no, record)`` for each line; :class:`StoreError` naming file and line if one is not a JSON object, or
    for a torn last line (within :func:`reading_only`: reported and skipped)."""
    try:
        fh = open_regular(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise os_error(path, exc, "read") from None
    with fh:
        for line_no, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n"):
                report = _TORN_TAIL.get()
                if report is None:
                    raise StoreError(path, f"line {line_no}: torn last line (interrupted append not yet repaired)")
                report(path, line_no, raw)
                return
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise StoreError(path, f"line {line_no}: corrupt JSON: {exc}") from None
            if not isinstance(record, dict):
                raise StoreError(path, f"line {line_no}: expected a JSON object, got {type(record).__name__}")
            yield line_no, record


def remove_stale_temps(directory: Path, recursive: bool = False) -> list[Path]:
    """Delete temp files left by writes interrupted before their rename; return them."""
    if not directory.is_dir():
        return []
    pattern = f".*{TEMP_SUFFIX}"
    found = sorted(directory.rglob(pattern) if recursive else directory.glob(pattern))
    for tmp in found:
        try:
            tmp.unlink()
        except OSError as exc:
            raise os_error(tmp, exc, "remove stale temp file") from None
    return found


def files_named(paths: Iterable[str | Path], pattern: str, missing: Callable[[Path], Exception]) -> list[Path]:
    """The files ``paths`` name: a file as is, a directory as every file below it matching ``pattern`` (sorted);
    a path that is neither raises ``missing(path)``."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out += sorted(path.rglob(pattern))
        elif path.is_file():
            out.append(path)
        else:
            raise missing(path)
    return out
