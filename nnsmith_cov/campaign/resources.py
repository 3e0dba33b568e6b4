"""What a campaign costs the machine: the run folder on disk, resident memory of its processes.

Read from the kernel (/proc, stat) rather than psutil, which is not a dependency.
"""

from __future__ import annotations

import os
from pathlib import Path


def rss_kb(pid: int) -> int:
    """A process's resident memory in KiB (0 when it cannot be read: gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def disk_kb(root: Path) -> int:
    """KiB allocated on disk to the files under `root` (st_blocks: a sparse or preallocated
    file counts what it really takes); files vanishing meanwhile are skipped."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        else:
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total >> 10
