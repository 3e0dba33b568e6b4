"""Every value of one PyTorch run of a graph, recorded in a child process.

The reducer gives a fresh input the value its tensor had in the whole graph; those values come
from running the graph once with the bundle's inputs and weights. PyTorch runs in a process of
its own (`python -m nnsmith_cov.reduce.trace DIR`), as everything that may crash does: the
reducer must outlive a reference that dies.

DIR/graph.json and DIR/inputs.npz in; DIR/values.npz (v<id> for every value) out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.model_dir import load_npz, npz_bytes


class TraceError(Exception):
    """The reference run did not give every value (one line: why)."""


def record_values(graph: GraphIR, values: dict[str, np.ndarray], timeout_s: float = 300.0) -> dict[int, np.ndarray]:
    """Every value of `graph` (by id) when run by PyTorch on `values` (i<v>, w<v>)."""
    with tempfile.TemporaryDirectory(prefix="nnsmith-trace-") as tmp:
        folder = Path(tmp)
        (folder / "graph.json").write_text(graph.dumps())
        (folder / "inputs.npz").write_bytes(npz_bytes(values))
        env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            done = subprocess.run(
                [sys.executable, "-m", "nnsmith_cov.reduce.trace", str(folder)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise TraceError(f"the reference run took over {timeout_s:g} s") from None
        if done.returncode != 0:
            lines = (done.stderr or "").strip().splitlines() or [f"exit status {done.returncode}"]
            raise TraceError(f"the reference run failed: {lines[-1]}")
        recorded = load_npz(folder / "values.npz")
    return {int(k[1:]): a for k, a in recorded.items()}


def _trace(folder: Path) -> None:
    import torch

    from nnsmith_cov.materialize.model_dir import leaf_values
    from nnsmith_cov.materialize.torch_module import GraphModule, input_tensors
    from nnsmith_cov.ops import is_op, op_by_name

    torch.set_num_threads(1)  # as the worker runs it
    graph = GraphIR.loads((folder / "graph.json").read_text(), known_op=is_op)
    leaves = leaf_values(graph, load_npz(folder / "inputs.npz"))
    module = GraphModule(graph, op_by_name, leaves)
    with torch.no_grad():
        env = module.run(*input_tensors(graph, leaves))
    arrays = {f"v{v}": np.asarray(t.detach().numpy()).copy() for v, t in env.items()}
    (folder / "values.npz").write_bytes(npz_bytes(arrays))


if __name__ == "__main__":
    try:
        _trace(Path(sys.argv[1]))
    except Exception as e:  # the parent reads the last line
        print(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}", file=sys.stderr)
        sys.exit(1)
