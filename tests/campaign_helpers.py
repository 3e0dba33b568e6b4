"""What the tests that drive a short campaign in-process share."""

from __future__ import annotations

from nnsmith_cov.abstract.dtype import DType


def f32_only(op: type) -> type:
    """`op` restricted to its all-float32 signatures: cheap to search and accepted by every backend."""
    sigs = [s for s in op.sigs if all(d is DType.float32 for d in (*s[0], *s[1]))]
    return type(op.__name__, (op,), {"sigs": sigs})


def run_to_budget(fuzzer, worker) -> None:
    """Start the campaign, step it until its budget is spent, write its stats, close it and its worker."""
    try:
        fuzzer.start()
        while not fuzzer.done():
            fuzzer.step()
        fuzzer.write_stats()
    finally:
        fuzzer.close()
        worker.close()
