"""The disk cache: compiled bytes in a sqlite database that processes share.

Entries are keyed by (compiler cache key, sha256 of the source) and carry the schema version, their
length and a sha256 of the bytes. A reader checks all three and discards an entry that fails any of
them, so a truncated, scribbled or foreign entry is rebuilt, never loaded. A database file that sqlite
cannot read is moved aside and recreated. Where the directory cannot be written, the cache warns once
and keeps working from memory.

Concurrency: each thread has its own connection; WAL journaling lets readers run beside one writer,
and the busy timeout makes writers from several processes take turns. Every insert is one transaction.
"""

from __future__ import annotations

import hashlib
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
BUSY_TIMEOUT_SECONDS = 30.0
T = TypeVar("T")


class CacheWarning(UserWarning):
    """The disk cache could not be used; svod carries on without it."""


@dataclass
class DiskStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    discarded: int = 0
    """Entries or database files found corrupt and thrown away."""


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class DiskCache:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / DATABASE_NAME
        self.stats = DiskStats()
        self.enabled = True
        self._local = threading.local()
        self._lock = threading.Lock()

    # ---- public ------------------------------------------------------------------------------------------

    def get(self, compiler_key: str, source: str) -> bytes | None:
        """The bytes stored for this source and compiler, if present and intact."""
        row = self._guarded(lambda db: db.execute(
            "SELECT schema, size, checksum, data FROM entries WHERE compiler_key = ? AND source_hash = ?",
            (compiler_key, source_hash(source))).fetchone(), None)
        if row is None:
            self.stats.misses += 1
            return None
        schema, size, checksum, data = row
        data = bytes(data) if isinstance(data, (bytes, memoryview)) else b""
        if schema != SCHEMA_VERSION or size != len(data) or checksum != hashlib.sha256(data).hexdigest():
            self.discard(compiler_key, source)
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return data

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

    # ---- connections -------------------------------------------------------------------------------------

    def _guarded(self, action: Callable[[sqlite3.Connection], T], default: T) -> T:
        """Run ``action`` on this thread's connection. A corrupt database is replaced and the action tried
        once more; anything else that stops the cache turns it off with one warning."""
        if not self.enabled:
            return default
        for attempt in range(2):
            try:
                return action(self._connection())
            except sqlite3.DatabaseError as err:
                if attempt == 0 and _is_corruption(err):
                    self._replace_database()
                    continue
                self._disable(f"{type(err).__name__}: {err}")
            except OSError as err:
                self._disable(str(err))
            return default
        return default

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                db.close()
                raise sqlite3.DatabaseError(f"not a database of this svod (schema {version})")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("CREATE TABLE IF NOT EXISTS entries (compiler_key TEXT NOT NULL, source_hash TEXT NOT NULL, "
                       "schema INTEGER NOT NULL, size INTEGER NOT NULL, checksum TEXT NOT NULL, data BLOB NOT NULL, "
                       "created REAL NOT NULL, PRIMARY KEY (compiler_key, source_hash))")
            self._local.db = db
        return db

    def _replace_database(self) -> None:
        self.stats.discarded += 1
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        with self._lock:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _disable(self, reason: str) -> None:
        with self._lock:
            if self.enabled:
                self.enabled = False
                warnings.warn(f"svod: disk cache at {self.path} disabled, compiling in memory only ({reason})",
                              CacheWarning, stacklevel=4)


def _is_corruption(err: sqlite3.DatabaseError) -> bool:
    text = str(err).lower()
    return "not a database" in text or "malformed" in text or "corrupt" in text
