"""What a test case found: the symptom, where it happened and how to tell it from others."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnsmith_cov.gen.graph_ir import GraphIR

SYMPTOMS = ("crash", "hang", "inconsistency")

# What a finding most likely is, for triage: a defect of the compiler under test, a suspect
# reference (every backend agrees against PyTorch or its exporter), float rounding that the exact
# value excuses, a mismatch that lives next to a discontinuity (Round, comparisons, ArgMax ties),
# an operator the backend does not implement, or a fault of nnsmith-cov itself.
CLASSES = ("bug", "reference", "precision", "discontinuity", "unsupported", "ours")
# The stages where PyTorch, not a backend, failed (backend "torch"): no backend runs to reproduce them.
TORCH_STAGES = ("reference", "export")


@dataclass
class Finding:
    """One symptom of one test case on one backend (or PyTorch, for export/reference)."""

    symptom: str  # crash | hang | oom (an allocation failed, e.g. under the worker's memory limit) | inconsistency
    backend: str  # a backend spec, or "torch" for the reference run and the exporter
    stage: str  # reference | export | import | compile | execute
    opt: str  # "opt" | "O0" | "-" (PyTorch)
    signature: str  # normalized: equal signatures are one bug
    detail: str  # one line for the screen
    log: str = ""  # traceback, worker output, mismatch details
    # Where O0 puts the fault: "optimization" (O0 is right), "conversion" (O0 fails too)
    localized: str | None = None
    actual: dict[str, np.ndarray] = field(default_factory=dict)  # outputs, for inconsistencies
    category: str = "bug"  # one of CLASSES
    rule: str = ""  # which rule set `category`, e.g. "consensus: ort and tvm agree against torch"

    def kind(self) -> str:
        return f"{self.symptom}/{self.stage}"

    def header(self) -> dict[str, str | None]:
        """The identifying fields, as bundles and findings.jsonl record them."""
        return {
            "symptom": self.symptom,
            "backend": self.backend,
            "stage": self.stage,
            "opt": self.opt,
            "localized": self.localized,
            "signature": self.signature,
            "category": self.category,
            "rule": self.rule,
        }


def producer_ops(graph: GraphIR, value: int, depth: int = 2) -> list[str]:
    """Op types along the first-input chain that produced `value`: ["Conv2d", "Add"] for
    Conv2d(Add(...)); the pattern an inconsistency signature names."""
    producer = {v: inst for inst in graph.insts for v in inst.outputs}
    ops: list[str] = []
    while value in producer and len(ops) < depth:
        inst = producer[value]
        ops.append(inst.op)
        if not inst.inputs:
            break
        value = inst.inputs[0]
    return ops
