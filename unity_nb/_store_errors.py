"""What a store's errors mean: the file's (SQLite's, the disk's, a damaged file's) or not, and the error a person
gets for a file that cannot be used (see :mod:`unity_nb.store`)."""

from __future__ import annotations

import sqlite3

from ._errors import UserError

__all__ = ("BUSY", "DAMAGED", "FULL", "code", "literal", "lost_tables", "set_back", "the_files", "unusable")

DAMAGED = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
FULL = frozenset({sqlite3.SQLITE_FULL})
BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def the_files(err: BaseException) -> bool:
    """Whether ``err`` is the file's doing (SQLite's, the disk's, a damaged store's): it passes, or is the person's
    to mend; the events wait for it. A value SQLite cannot take (binding, a constraint) is the event's doing."""
    if isinstance(err, sqlite3.ProgrammingError | sqlite3.InterfaceError | sqlite3.IntegrityError | sqlite3.DataError):
        return False
    return isinstance(err, sqlite3.Error | UserError | OSError)


def code(err: BaseException) -> int | None:
    """SQLite's primary result code of ``err``, if it has one."""
    got = getattr(err, "sqlite_errorcode", None)
    return got & 0xFF if isinstance(got, int) else None


def literal(text: str) -> str:
    """``text`` inside a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def unusable(path: str, err: BaseException) -> UserError:
    """The error for a store file that cannot be used: which file, and what to do."""
    if code(err) in BUSY:
        return UserError(
            f"the store file {path!r} is locked by another process ({err}), past the wait for it: another kernel "
            "is writing it (or upgrading it to this version's format). Try again once that kernel is idle or "
            "shut down, or set UNITY_NB_STORE to another file; the file itself is fine"
        )
    if code(err) in DAMAGED:
        return UserError(
            f"the store file {path!r} is damaged ({err}): move it aside (rename it, for example to "
            f"{path + '.damaged'!r}; a new store is then made in its place) or set UNITY_NB_STORE to another file"
        )
    return UserError(
        f"the store file {path!r} cannot be used ({err}): set UNITY_NB_STORE to a file in a folder you can write, "
        "or move the file aside if it is damaged"
    )


def lost_tables(path: str, tables: list[str]) -> UserError:
    """The error for a store file that has lost tables it records in (dropped by hand, say)."""
    names = ", ".join(repr(t) for t in tables)
    which = f"tables {names} are" if len(tables) > 1 else f"table {names} is"
    return UserError(
        f"the store file {path!r} is damaged: its {which} missing (dropped by hand?), and nothing is recorded or read "
        f"without it: move the file aside (rename it, for example to {path + '.damaged'!r}; a new store is then made "
        "in its place) or set UNITY_NB_STORE to another file"
    )


def set_back(path: str, version: int, err: BaseException) -> UserError:
    """The error for a store file whose schema version says less than its tables (set back by hand, say)."""
    return UserError(
        f"the store file {path!r} says its schema is version {version}, but it holds a later version's tables "
        f"({err}): its version was set back by hand, or it is damaged: move the file aside (rename it, for example to "
        f"{path + '.damaged'!r}; a new store is then made in its place) or set UNITY_NB_STORE to another file"
    )
