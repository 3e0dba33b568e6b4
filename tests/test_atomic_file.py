"""`write_atomic`: a file is replaced whole, never left half-written or beside a stray copy."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nnsmith_cov.atomic_file import write_atomic


def test_writes_bytes_and_text_and_replaces_what_was_there(tmp_path: Path):
    path = tmp_path / "stats.json"
    write_atomic(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    write_atomic(str(path), "é\n")  # a str path, as a worker's held file is named
    assert path.read_bytes() == "é\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]


def test_the_new_file_has_the_mode_a_plain_write_gives(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.write_text("x")
    write_atomic(tmp_path / "atomic", "x")
    assert (tmp_path / "atomic").stat().st_mode == plain.stat().st_mode


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_behind(tmp_path: Path):
    path = tmp_path / "cache.bin"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomic(path, 42)  # type: ignore[arg-type]
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["cache.bin"]
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "x", b"")
    assert [p.name for p in tmp_path.iterdir()] == ["cache.bin"]


def test_writers_at_once_each_leave_a_whole_file(tmp_path: Path):
    path = tmp_path / "layout.cache"
    bodies = [bytes([k]) * 200_000 for k in range(4)]
    errors: list[BaseException] = []

    def write(body: bytes) -> None:
        try:
            for _ in range(25):
                write_atomic(path, body)
                assert path.read_bytes() in bodies  # never a mix, never a partial copy
        except BaseException as e:  # collected: an assert in a thread would pass silently
            errors.append(e)

    threads = [threading.Thread(target=write, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and path.read_bytes() in bodies
    assert [p.name for p in tmp_path.iterdir()] == ["layout.cache"]
