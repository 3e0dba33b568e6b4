"""Faults in the generator where it runs: in the worker (`campaign.proposal`).

A worker that loads a backend of this module (`worker_faults:Ort`, `worker_faults:SigmoidPays`)
breaks its own generator as the environment variable FAULT_ENV says, so that a test can make
generation fail in our own code inside a worker process, where a monkeypatch of the test's
process does not reach:

  "every3"     every third fresh graph raises RuntimeError("injected fault")
  "always"     every fresh graph raises RuntimeError("the generator is broken")
  "seed:<n>"   generating with seed n raises ZeroDivisionError("injected"), fresh or grown
  "kill:<n>"   generating with seed n kills the worker (SIGKILL)
  "slow_search:<s>" every value search sleeps s seconds first (PyTorch stuck in one long call)
"""

from __future__ import annotations

import os
import signal
import time

from fake_coverage import SigmoidPays as _SigmoidPays

from nnsmith_cov.backends.ort import OrtBackend

FAULT_ENV = "NNSMITH_COV_TEST_GEN_FAULT"


def _install(spec: str) -> None:
    import nnsmith_cov.baselines as baselines
    from nnsmith_cov.gen import generator

    if spec in ("every3", "always"):
        real_with = baselines.generate_with
        calls = [0]

        def faulty_with(*args, **kwargs):
            calls[0] += 1
            if spec == "always":
                raise RuntimeError("the generator is broken")
            if calls[0] % 3 == 0:
                raise RuntimeError("injected fault")
            return real_with(*args, **kwargs)

        baselines.generate_with = faulty_with
    elif spec.startswith("slow_search:"):
        from nnsmith_cov.search import gradient

        real_search, pause = gradient.search_values, float(spec.split(":", 1)[1])

        def stuck(*args, **kwargs):
            time.sleep(pause)
            return real_search(*args, **kwargs)

        gradient.search_values = stuck
    elif spec.startswith(("seed:", "kill:")):
        bad, real = int(spec.split(":", 1)[1]), generator._generate

        def flaky(cfg, seed, *args, **kwargs):
            if seed == bad and spec.startswith("kill:"):
                os.kill(os.getpid(), signal.SIGKILL)
            if seed == bad:
                raise ZeroDivisionError("injected")
            return real(cfg, seed, *args, **kwargs)

        generator._generate = flaky


if os.environ.get(FAULT_ENV):
    _install(os.environ[FAULT_ENV])


class Ort(OrtBackend):
    """ONNX Runtime, in a worker whose generator fails as FAULT_ENV says."""


class SigmoidPays(_SigmoidPays):
    """fake_coverage's SigmoidPays, in a worker whose generator fails as FAULT_ENV says."""
