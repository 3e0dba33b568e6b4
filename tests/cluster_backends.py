"""A backend that kills the process hosting its worker, for the cluster tests.

`KillsHost` (backend `cluster_backends:KillsHost`) is ONNX Runtime that, when the file named
by $NNSMITH_COV_TEST_KILL_HOST exists, removes it and SIGKILLs its worker's parent: under
`--cluster ray` that is the Ray actor, so the actor dies mid-test exactly once per arming.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from nnsmith_cov.backends.base import Opt
from nnsmith_cov.backends.ort import OrtBackend

KILL_ENV = "NNSMITH_COV_TEST_KILL_HOST"


class KillsHost(OrtBackend):
    name = "kills-host"

    def compile(self, model: Any, opt: Opt) -> Any:
        armed = os.environ.get(KILL_ENV)
        if armed:
            try:
                os.unlink(armed)  # only one worker wins the removal: one kill per arming
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getppid(), signal.SIGKILL)
                time.sleep(5)  # the host is gone; this worker sees its pipe close and exits
        return super().compile(model, opt)
