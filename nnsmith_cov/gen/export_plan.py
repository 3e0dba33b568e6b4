"""Which model-input dims an export must keep static.

PyTorch's TorchScript exporter reads some operands' sizes while it writes the op: a
convolution's kernel size from its weight, an adaptive pool's fixed window from its input's
spatial dims. When such a size traces back to a model input exported with a symbolic dim,
the exporter has no number there and refuses ("kernel of unknown shape", "input size not
accessible"): a refusal of the fuzzer's own making, not a finding. Specs name those operands
in `export_static_dims`; the export plan leaves the input dims feeding them static.
"""

from __future__ import annotations

from collections.abc import Callable

from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.gen.graph_ir import GraphIR


def static_input_dims(graph: GraphIR, resolve: Callable[[str], type[OpSpec]]) -> set[tuple[int, int]]:
    """(input value, dim) pairs that must not be symbolic in `graph`'s export.

    An operand that is a model input keeps static only the dims its spec names. One computed
    by other ops keeps every dim of every model input it derives from static: how the
    exporter's shape inference carries a symbolic dim through an op (a Softmax below opset
    13 goes through a Reshape by a computed shape) is not worth modelling op by op."""
    producer = {v: inst for inst in graph.insts for v in inst.outputs}
    inputs = set(graph.inputs)
    fixed: set[tuple[int, int]] = set()
    upstream: set[int] = set()  # values all of whose ancestor inputs stay fully static
    for inst in graph.insts:
        for operand, first in resolve(inst.op).export_static_dims.items():
            if operand >= len(inst.inputs):
                continue
            v = inst.inputs[operand]
            if v in inputs:
                fixed.update((v, d) for d in range(first, len(graph.types[v].shape)))
            elif v in producer:
                upstream.add(v)
    seen: set[int] = set()
    while upstream:
        v = upstream.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in inputs:
            fixed.update((v, d) for d in range(len(graph.types[v].shape)))
        elif v in producer:
            upstream.update(producer[v].inputs)
    return fixed
