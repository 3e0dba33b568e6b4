"""The binary collector's agent loaded into a small child process, for tests that check what
the agent does to a process without a backend in it."""

from __future__ import annotations

from typing import Any

import pytest


def agent_in(pid: int, hi: int = 0) -> tuple[Any, Any, dict[str, Any]]:
    """Attach to `pid` and load the agent: (session, script, the `init` params with no module to
    count; `hi`: the end of the followed range). Skips where Frida cannot attach."""
    import frida

    from nnsmith_cov.coverage.binary_agent import agent_source
    from nnsmith_cov.coverage.binary_attach import frida_attach

    try:
        session = frida_attach(pid)
    except (frida.PermissionDeniedError, frida.ProcessNotFoundError) as e:
        pytest.skip(f"frida cannot attach here: {e}")
    script = session.create_script(agent_source())
    script.load()
    params = {"tid": pid, "base": "0", "lo": "0", "hi": str(hi), "map": "0", "n": 0}
    params |= {k: "0" for k in ("start", "length", "slot_base", "slot_mask")} | {"clear_avx512": 0}
    return session, script, params
