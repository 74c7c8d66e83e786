"""The disk cache: compiled bytes in a sqlite database that processes share.

Entries are keyed by (compiler cache key, sha256 of the source) and carry the schema version, their
length and a sha256 of the bytes. A reader checks all three and discards an entry that fails any of
them, so a truncated, scribbled or foreign entry is rebuilt, never loaded (and loaders check the format
of what they load as well: see ``svod.backends.elf``).

A damaged cache never does more than cost a recompile:

- the database is busy (another process holds the lock past the timeout): this lookup or store is
  skipped, quietly;
- the directory cannot be used (not writable, not a directory, disk full): the cache turns itself off,
  with one ``CacheWarning``, and svod keeps compiling in memory;
- anything else that goes wrong opening, reading or writing the file (sqlite errors, undecodable text,
  a damaged header): the file is set aside under a new name (``kernels.sqlite.damaged-<time>-<pid>-<n>``,
  never deleted) and a new one is built, with one ``CacheWarning``; if the new one fails too, the cache turns
  itself off;
- a database that belongs to something else (another schema or ``user_version``) is left alone, and svod
  uses a file of its own beside it (``kernels-svod.sqlite``).

Concurrency: each thread has its own connection; WAL journaling lets readers run beside one writer,
and the busy timeout makes writers from several processes take turns. Every insert is one transaction.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

SCHEMA_VERSION = 1
DATABASE_NAME = "kernels.sqlite"
OWN_DATABASE_NAME = "kernels-svod.sqlite"
"""Where svod keeps its entries when ``DATABASE_NAME`` belongs to something else."""
BUSY_TIMEOUT_SECONDS = 30.0
COLUMNS = ("compiler_key", "source_hash", "schema", "size", "checksum", "data", "created")
T = TypeVar("T")


class CacheWarning(UserWarning):
    """The disk cache could not be used as it was; svod carries on (with a new file, or without one)."""


class _ForeignDatabaseError(Exception):
    """The database file belongs to something else."""


@dataclass
class DiskStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    discarded: int = 0
    """Entries found corrupt and thrown away, and database files set aside."""


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class DiskCache:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DATABASE_NAME
        self.stats = DiskStats()
        self.enabled = True
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0
        """Bumped when the file is replaced or switched, so every thread reconnects."""
        self._set_aside_once = False

    # ---- public ------------------------------------------------------------------------------------------

    def get(self, compiler_key: str, source: str) -> bytes | None:
        """The bytes stored for this source and compiler, if present and intact."""
        def read(db: sqlite3.Connection) -> bytes | None:
            row = db.execute("SELECT schema, size, checksum, data FROM entries WHERE compiler_key = ? AND "
                             "source_hash = ?", (compiler_key, source_hash(source))).fetchone()
            if row is None:
                return None
            schema, size, checksum, data = row
            data = bytes(data) if isinstance(data, (bytes, memoryview)) else b""
            if schema != SCHEMA_VERSION or size != len(data) or checksum != hashlib.sha256(data).hexdigest():
                self.discard(compiler_key, source)
                return None
            return data

        found = self._guarded(read, None)
        if found is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return found

    def put(self, compiler_key: str, source: str, data: bytes) -> None:
        def insert(db: sqlite3.Connection) -> bool:
            with db:
                db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (compiler_key, source_hash(source), SCHEMA_VERSION, len(data),
                            hashlib.sha256(data).hexdigest(), data, time.time()))
            return True

        if self._guarded(insert, False):
            self.stats.writes += 1

    def discard(self, compiler_key: str, source: str) -> None:
        """Remove one entry (it failed its checks, or its code would not load)."""
        def delete(db: sqlite3.Connection) -> None:
            with db:
                db.execute("DELETE FROM entries WHERE compiler_key = ? AND source_hash = ?",
                           (compiler_key, source_hash(source)))

        self.stats.discarded += 1
        self._guarded(delete, None)

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def __len__(self) -> int:
        count = self._guarded(lambda db: db.execute("SELECT COUNT(*) FROM entries").fetchone(), None)
        return 0 if count is None else int(count[0])

    # ---- failures ----------------------------------------------------------------------------------------

    def _guarded(self, action: Callable[[sqlite3.Connection], T], default: T) -> T:
        """Run ``action`` on this thread's connection; whatever goes wrong costs at most this lookup."""
        for _ in range(3):
            if not self.enabled:
                return default
            try:
                return action(self._connection())
            except _ForeignDatabaseError:
                self._use_own_file()
            except sqlite3.OperationalError as err:
                if _is_busy(err):
                    return default
                self._set_aside(err)
            except OSError as err:
                self._disable(f"{type(err).__name__}: {err}")
            except Exception as err:  # any other failure of the file: set it aside, build a new one
                self._set_aside(err)
        return default

    def _set_aside(self, err: BaseException) -> None:
        """Rename the damaged file (and its journal) out of the way, once; a second failure turns the cache
        off."""
        with self._lock:
            if self._set_aside_once:
                self._disable_locked(f"{type(err).__name__}: {err}")
                return
            self._set_aside_once = True
            self.stats.discarded += 1
            self.close()
            stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.perf_counter_ns()}"
            moved = self.path.with_name(f"{self.path.name}.damaged-{stamp}")  # unique: nothing is overwritten
            try:
                for suffix in ("", "-wal", "-shm"):
                    old = Path(f"{self.path}{suffix}")
                    if old.exists():
                        old.rename(Path(f"{moved}{suffix}"))
            except OSError as rename_error:
                self._disable_locked(f"{type(err).__name__}: {err}; cannot set it aside: {rename_error}")
                return
            self._generation += 1
            warnings.warn(f"svod: disk cache at {self.path} was damaged ({type(err).__name__}: {err}); set aside "
                          f"as {moved.name} and rebuilt", CacheWarning, stacklevel=4)

    def _use_own_file(self) -> None:
        with self._lock:
            if self.path.name == OWN_DATABASE_NAME:
                self._disable_locked(f"{self.path} belongs to another program")
                return
            self.close()
            self.path = self.directory / OWN_DATABASE_NAME
            self._generation += 1

    def _disable(self, reason: str) -> None:
        with self._lock:
            self._disable_locked(reason)

    def _disable_locked(self, reason: str) -> None:
        if self.enabled:
            self.enabled = False
            warnings.warn(f"svod: disk cache at {self.path} disabled, compiling in memory only ({reason})",
                          CacheWarning, stacklevel=5)

    # ---- connections -------------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None and getattr(self._local, "generation", None) == self._generation:
            return db
        if db is not None:
            db.close()
        self._local.db = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        try:
            _check_ours(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("CREATE TABLE IF NOT EXISTS entries (compiler_key TEXT NOT NULL, source_hash TEXT NOT NULL, "
                       "schema INTEGER NOT NULL, size INTEGER NOT NULL, checksum TEXT NOT NULL, data BLOB NOT NULL, "
                       "created REAL NOT NULL, PRIMARY KEY (compiler_key, source_hash))")
        except BaseException:
            db.close()
            raise
        self._local.db, self._local.generation = db, self._generation
        return db


def _check_ours(db: sqlite3.Connection) -> None:
    """Raise ``_ForeignDatabaseError`` unless the database is empty or svod's own."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version not in (0, SCHEMA_VERSION) or tables - {"entries"}:
        raise _ForeignDatabaseError(f"user_version {version}, tables {sorted(tables)}")
    if "entries" in tables:
        columns = tuple(row[1] for row in db.execute("PRAGMA table_info(entries)"))
        if columns != COLUMNS:
            raise _ForeignDatabaseError(f"an entries table with columns {columns}")


def _is_busy(err: sqlite3.OperationalError) -> bool:
    text = str(err).lower()
    return "locked" in text or "busy" in text
