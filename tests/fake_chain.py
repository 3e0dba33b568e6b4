"""A backend and a collector whose coverage rewards a rare chain of operators, step by step.

`ChainPays` (backend `fake_chain:ChainPays`) is ONNX Runtime that notes each loaded model's
nodes; `ChainCollector` (collector `fake_chain:ChainCollector`) reports, like a compiler
pass's nested pattern checks, a branch per op type present and a branch per longer start of
GOAL found as a chain (each node reading the one before as its first input): Tanh-Sin,
Tanh-Sin-Neg and, the goal, Tanh-Sin-Neg-Abs. Uniform generation over CHAIN_OPS rarely
makes the whole chain; a fuzzer that keeps the shorter chains and mutates them should not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from nnsmith_cov.backends.ort import OrtBackend
from nnsmith_cov.coverage.covmap import Hits
from nnsmith_cov.coverage.universe import Universe

CHAIN_OPS = ("Tanh", "Sin", "Neg", "Abs", "Relu", "Cos")
GOAL = ("Tanh", "Sin", "Neg", "Abs")
GOAL_BRANCH = len(CHAIN_OPS) + len(GOAL) - 2  # the branch of the whole chain
SIZE = 64

# (op type, first input, outputs) of each node of the models loaded since `start`
NODES: list[tuple[str, str, tuple[str, ...]]] = []


class ChainPays(OrtBackend):
    name = "chain-pays"

    def load(self, onnx_bytes: bytes) -> Any:
        for n in onnx.load_from_string(onnx_bytes).graph.node:
            NODES.append((n.op_type, n.input[0] if n.input else "", tuple(n.output)))
        return super().load(onnx_bytes)


def chain_branches(nodes: list[tuple[str, str, tuple[str, ...]]]) -> list[int]:
    """The branches a model's nodes reach: one per CHAIN_OPS op present, one per GOAL start found."""
    producer = {out: (op, first) for op, first, outs in nodes for out in outs}
    found = {CHAIN_OPS.index(op) for op, _, _ in nodes if op in CHAIN_OPS}
    for op, first, _ in nodes:
        chain = [op]
        while len(chain) < len(GOAL) and first in producer:
            op_before, first = producer[first]
            chain.insert(0, op_before)
        for k in range(2, len(GOAL) + 1):
            if tuple(chain[-k:]) == GOAL[:k]:
                found.add(len(CHAIN_OPS) + k - 2)
    return sorted(found)


class ChainCollector:
    name = "fake-chain"

    def __init__(self, targets: list[str]) -> None:
        pass

    def universe(self) -> Universe:
        n = np.arange(SIZE, dtype=np.int32)
        return Universe("fake-chain", "edge", {"fake": "1"}, ["chain.txt"], np.zeros(SIZE, np.int32), n, n)

    def start(self) -> None:
        NODES.clear()

    def stop(self) -> Hits:
        index = chain_branches(NODES)
        return Hits.from_arrays(np.array(index, np.uint32), np.ones(len(index), np.uint32))
