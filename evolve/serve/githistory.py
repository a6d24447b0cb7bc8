"""Rewriting a user's Git history (the file store's ``records/``) so that no commit keeps what an erasure removed:
every commit of the branch is rebuilt with the files a filter wants passed through a rewrite (kept, changed or
dropped), keeping its message, author, committer and dates; the branch moves to the rebuilt last commit. Then
:func:`prune` expires the reflog and collects the objects no commit reaches any more, so the old blobs are gone from
the repository, not only from its log."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

from evolve.files import StoreError

#: ``(path, bytes)`` -> the file's new bytes, or ``None`` to drop it.
Rewrite = Callable[[str, bytes], "bytes | None"]


def _git(folder: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    done = subprocess.run(["git", "-C", str(folder), *args], input=stdin, capture_output=True,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise StoreError(folder, f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _tree(folder: Path, commit: str, wanted: Callable[[str], bool], rewrite: Rewrite, index: Path) -> tuple[str, bool]:
    """The tree of ``commit`` rewritten, and whether it changed."""
    entries, changed = [], False
    for entry in filter(None, _git(folder, "ls-tree", "-r", "-z", commit).split(b"\0")):
        meta, path = entry.split(b"\t", 1)
        mode, _, sha = meta.split()
        if wanted(path.decode()):
            blob = _git(folder, "cat-file", "blob", sha.decode())
            new = rewrite(path.decode(), blob)
            if new is None:
                changed = True
                continue
            if new != blob:
                sha = _git(folder, "hash-object", "-w", "--stdin", stdin=new).strip()
                changed = True
        entries.append(mode + b" " + sha + b"\t" + path)
    env = {"GIT_INDEX_FILE": str(index)}
    _git(folder, "read-tree", "--empty", env=env)
    _git(folder, "update-index", "-z", "--index-info", stdin=b"\0".join(entries) + b"\0", env=env)
    return _git(folder, "write-tree", env=env).decode().strip(), changed


def rewrite_history(folder: Path, wanted: Callable[[str], bool], rewrite: Rewrite) -> int:
    """Rebuild every commit of ``folder``'s current branch with ``rewrite`` applied to the files ``wanted`` (by path);
    the number of commits whose tree changed (0: the branch is left as it was)."""
    if not _git(folder, "for-each-ref", "--count=1", "refs/heads").strip():
        return 0  # no commit yet
    branch = _git(folder, "symbolic-ref", "HEAD").decode().strip()
    commits = _git(folder, "rev-list", "--reverse", "HEAD").decode().split()
    index = folder / ".git" / "memevolve-rewrite-index"
    rebuilt: dict[str, str] = {}
    changed = 0
    try:
        for commit in commits:
            tree, touched = _tree(folder, commit, wanted, rewrite, index)
            changed += touched
            info = _git(folder, "log", "-1", "--format=%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B", commit)
            parents, *who, message = info.decode().split("\0", 7)
            env = dict(zip(("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
                            "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE"), who))
            linked = [arg for parent in parents.split() for arg in ("-p", rebuilt[parent])]
            rebuilt[commit] = _git(folder, "commit-tree", tree, *linked, env=env,
                                   stdin=message.rstrip("\n").encode() + b"\n").decode().strip()
    finally:
        index.unlink(missing_ok=True)
    if changed:
        _git(folder, "update-ref", branch, rebuilt[commits[-1]])
    return changed


def prune(folder: Path) -> None:
    """Drop every object no branch reaches (the reflog expired first): what a rewrite left behind."""
    _git(folder, "reflog", "expire", "--expire=now", "--all")
    _git(folder, "gc", "-q", "--prune=now")
