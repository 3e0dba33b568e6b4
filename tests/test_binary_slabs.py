"""The binary agent places Stalker's slabs: every slab of a context lies within one 1.75 GiB window.

Why (binary_agent's "Slabs"): Stalker keeps each slab within 2 GiB of its context only, so two
slabs could lie up to 4 GiB apart, and a jump backpatched between them overwrote the code after it
(workers following TVM died while starting). The agent's mmap hook is checked here on requests shaped
like Stalker's: an executable mapping asked near an occupied address (a code slab near its context),
then a data mapping asked near that one (a data slab near its code slab).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from agent_child import agent_in

pytest.importorskip("frida", reason="the frida package is not installed")

CONTEXT = 0x300000000000  # far below where the kernel puts mappings asked for without an address
WINDOW = 1792 << 20  # the agent's window: 1.75 GiB
REACH = 1920 << 20  # how far from its context a window may reach

_CHILD = r"""
import ctypes, sys
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
ANON, NOREPLACE, RW, RWX = 0x22, 0x100000, 3, 7
print("ready", flush=True)  # attaching to an interpreter still starting up can crash frida's loader
sys.stdin.readline()
context = libc.mmap(@CONTEXT@, 4096, RWX, ANON | NOREPLACE, -1, 0)  # stands for a Stalker context
code = libc.mmap(context, 4 << 20, RWX, ANON, -1, 0)  # asked near it: the address is taken
data = libc.mmap(code, 1 << 20, RW, ANON, -1, 0)  # asked near the code slab
other = libc.mmap(None, 4096, RW, ANON, -1, 0)  # asked near nothing: left to the kernel
free = libc.mmap(@CONTEXT@ + (64 << 30), 4096, RWX, ANON, -1, 0)  # near a free address: no window
print(context, code, data, other, free, flush=True)
""".replace("@CONTEXT@", str(CONTEXT))


def test_slabs_asked_near_a_context_stay_in_its_window() -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        session, script, params = agent_in(child.pid)
        script.exports_sync.init(params)  # the hook is in place from here, on every thread
        child.stdin.write("go\n")
        child.stdin.flush()
        context, code, data, other, free = (int(x) for x in child.stdout.readline().split())
        stats = script.exports_sync.stats()
    finally:
        child.kill()
        child.wait()
    assert context == CONTEXT
    # Natively the kernel puts `code` where it puts everything (near the top, terabytes away).
    assert 0 < abs(code - context) < REACH and 0 < abs(data - context) < REACH and data != code
    assert abs(code - data) < WINDOW
    assert abs(other - context) > 2 * REACH  # the hook leaves other requests alone
    assert free == CONTEXT + (64 << 30)  # (Stalker asks near free addresses when it searches itself)
    assert stats["slabs_near"] >= 2 and stats["slabs_far"] == 0
