"""The operator specification library: the op set is this explicit tuple."""

from __future__ import annotations

from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.ops import elementwise, index, nn, quantize, reduce, shape

ALL_OPS: tuple[type[OpSpec], ...] = (*elementwise.OPS, *nn.OPS, *shape.OPS, *reduce.OPS, *index.OPS, *quantize.OPS)

_BY_NAME = {op.name(): op for op in ALL_OPS}
assert len(_BY_NAME) == len(ALL_OPS), "operator names must be unique"


def op_by_name(name: str) -> type[OpSpec]:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}") from None


def is_op(name: str) -> bool:
    return name in _BY_NAME


def select_ops(names: list[str] | None) -> tuple[type[OpSpec], ...]:
    """Ops by name (case-insensitive); None means all. Unknown names raise ValueError."""
    if not names:
        return ALL_OPS
    lower = {n.lower(): op for n, op in _BY_NAME.items()}
    unknown = [n for n in names if n.lower() not in lower]
    if unknown:
        raise ValueError(f"unknown operator(s): {', '.join(unknown)}")
    return tuple(dict.fromkeys(lower[n.lower()] for n in names))
