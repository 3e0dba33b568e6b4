"""The LMDB environment under a corpus: checked before it is mapped, opened with fixed flags, one writer."""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

import lmdb

from nnsmith_cov.corpus.records import DB_NAMES, CorpusError

WRITER_LOCK = "writer.lock"

_MAGIC = 0xBEEFC0DE
# LMDB 0.9 on a 64-bit host: a 16-byte page header, then the meta record: magic and
# version (u32 each), the map address and size (u64), two 48-byte database records (the
# first one's leading u32 is the page size), the last used page and the txn id (u64).
_META_PAGE = struct.Struct("=16xII8xQI44x48xQQ")


def check_data_file(path: Path, data: Path, full: bool) -> None:
    """Refuse a data file LMDB must not map: a short file makes reads through the map
    die of SIGBUS, which no exception handler catches."""

    def damaged(problem: str) -> CorpusError:
        return CorpusError(f"{path}: damaged data.mdb ({problem})")

    size = data.stat().st_size
    with data.open("rb") as f:
        meta0 = f.read(_META_PAGE.size)
        if len(meta0) < _META_PAGE.size:
            raise damaged(f"{size} bytes, too short for an LMDB file")
        magic, _, _, psize, last0, txn0 = _META_PAGE.unpack(meta0)
        if magic != _MAGIC:
            raise CorpusError(f"{path} is not a corpus (data.mdb is not an LMDB file)")
        if psize < 512 or psize > 1 << 16 or psize & (psize - 1):
            raise damaged(f"page size {psize}")
        f.seek(psize)
        meta1 = f.read(_META_PAGE.size)
        if len(meta1) < _META_PAGE.size:
            raise damaged(f"{size} bytes, cut inside its second header page")
        magic1, _, _, _, last1, txn1 = _META_PAGE.unpack(meta1)
        if magic1 != _MAGIC:
            raise damaged("second header page overwritten")
    last = last1 if txn1 > txn0 else last0  # LMDB reads the header with the newer transaction
    if size >= (last + 1) * psize and not full:
        return
    # Short files are almost always cut, but LMDB may leave a free page at the end
    # unwritten, so a short file gets the full walk before it is called damaged.
    try:
        from lmdb import verify as lmdb_verify  # py-lmdb >= 3.0
    except ImportError:
        if full:
            raise CorpusError(f"{path}: verifying a data file needs lmdb >= 3.0") from None
        raise damaged(f"{size} bytes, its last page {last} ends at {(last + 1) * psize}") from None
    try:
        problems = lmdb_verify.verify(str(data), subdir=False)
    except (lmdb_verify.VerifyError, OSError) as e:
        raise damaged(str(e)) from None
    if problems:
        more = f"; {len(problems) - 1} more problems" if len(problems) > 1 else ""
        raise damaged(f"{one_line(problems[0])}{more}")


def open_env(path: Path, readonly: bool, map_size: int) -> lmdb.Environment:
    """The environment in folder `path`, which must exist; LMDB errors become CorpusError."""
    # A reader registers in lock.mdb's reader table: that is what stops the writer from
    # reusing pages a snapshot still reads. Without write access to lock.mdb (a corpus
    # on read-only media) a reader must go without, which is safe only with no writer.
    lock = True
    if readonly:
        lock_file = path / "lock.mdb"
        lock = os.access(lock_file if lock_file.exists() else path, os.W_OK)
    try:
        return lmdb.open(
            str(path),
            map_size=map_size,
            subdir=True,
            readonly=readonly,
            create=False,
            lock=lock,
            max_dbs=len(DB_NAMES),
            sync=True,  # durability is the point: a committed test survives power loss
            metasync=True,
        )
    except lmdb.Error as e:
        raise CorpusError(f"{path}: cannot open as LMDB ({one_line(e)})") from None


def take_writer_lock(path: Path) -> int:
    """Hold `path`/writer.lock (an flock, released by the kernel however the holder dies); its fd."""
    try:
        fd = os.open(path / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise CorpusError(f"{path}: cannot open for writing ({one_line(e)})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise CorpusError(f"{path} is open for writing by pid {holder}: open it readonly") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release_lock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # drops the flock


def fsync_dir(path: Path) -> None:
    """Make renames and new files in folder `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def one_line(e: object) -> str:
    """The first line of an error's text (LMDB's may hold several)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
