"""Which error findings are not compiler bugs: a backend saying it has no implementation for
an operator and type ("unsupported"), and PyTorch's exporter refusing a graph our own specs
made ("ours"). Shared by the op-support probe and the oracle, so both draw the line alike."""

from __future__ import annotations

import re
from dataclasses import dataclass

# A backend (or PyTorch) saying it has no implementation for the op and type. Checked after
# _CRASH: "Check failed: unsupported dtype" is a failed internal check, a bug, not a refusal.
_REFUSAL = re.compile(
    r"NOT_IMPLEMENTED|OpNotImplemented|OpAttributeUnImplemented|NotImplemented|not implemented"
    r"|not supported|unsupported|UnsupportedOperatorError",
    re.IGNORECASE,
)
# Failed checks, deaths, hangs and Python errors inside a frontend ("unsupported operand
# type(s)" is a TypeError in the importer's own code): bugs, whatever words they use.
_CRASH = re.compile(
    r"InternalError|Check failed|^hung |^died"
    r"|^\w+: (TypeError|AttributeError|KeyError|IndexError|AssertionError|ZeroDivisionError|NameError"
    r"|UnboundLocalError|RecursionError):"
)
# The exporter refusing what a spec asked of it: an op it cannot write for the graph's dims
# or opset ("Unsupported: ONNX export of ..."), or ONNX's checker rejecting a dtype the spec
# admitted at that opset ("has unsupported type: tensor(int8)"), or a value the spec computes
# in the graph where the exporter needs a constant (its only "Failed to export a node '...'"
# ends "because it is not constant" on a later line than the finding keeps).
_EXPORT_REFUSAL = re.compile(
    r"Unsupported: ONNX export|UnsupportedOperatorError|has unsupported type|is not supported in opset"
    r"|Exporting the operator .* is not supported|Failed to export a node '"
)
# The ONNX operator a backend names in its refusal: ORT ("Could not find an implementation
# for Clip(11) node with name '/Clip'") and TVM ("not supported for frontend ONNX: Celu").
_ORT_OP = re.compile(r"implementation for (\w+)\(\d+\)")
_TVM_OPS = re.compile(r"not supported for frontend ONNX:\s*([\w ,]+)")


def classify(status: str) -> str:
    """The class of a failure's status text ("<stage>: <type>: <message>", "hung at <stage>"
    or "died: <signal> at <stage>"): "refused" or "crash"."""
    if _CRASH.search(status):
        return "crash"
    return "refused" if _REFUSAL.search(status) else "crash"


@dataclass(frozen=True)
class Verdict:
    category: str  # one of oracle.finding.CLASSES
    rule: str


def error_class(backend: str, stage: str, error_type: str, message: str) -> Verdict | None:
    """The class of a backend's or PyTorch's error when it is not a bug: None for a bug."""
    status = f"{stage}: {error_type}: {message}"
    if backend == "torch":
        # PyTorch fails before any backend sees the model: never a compiler bug. Refusing
        # what a spec asked for is our spec's fault; anything else is PyTorch's own.
        if stage == "export" and _EXPORT_REFUSAL.search(message) and not _CRASH.search(status):
            return Verdict("ours", "export-refusal: torch.onnx cannot export what the spec generated")
        if classify(status) == "refused":
            return Verdict(
                "ours", f"torch-refusal: PyTorch has no implementation ({stage}) for what the spec generated"
            )
        return Verdict("reference", f"torch-error: PyTorch failed at {stage}, before any backend saw the model")
    if classify(status) == "refused":
        return Verdict("unsupported", f"refusal: {backend} has no implementation ({stage})")
    return None


def refused_onnx_ops(message: str) -> list[str]:
    """The ONNX operator types a refusal names (empty when it names none)."""
    found = _ORT_OP.findall(message)
    for names in _TVM_OPS.findall(message):
        found += [n.strip() for n in names.split(",") if n.strip()]
    return list(dict.fromkeys(found))
