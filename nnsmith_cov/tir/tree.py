"""Walking and rebuilding TIR trees: TVM 0.27 has no Python IR mutator, so the node kinds the
seeds hold are taken apart and rebuilt here, field by field. Nodes of any other kind are leaves
(kept as they are), so a mutation never touches what this module does not understand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx

LOAD = tvm.ir.TensorLoad  # what tirx.BufferLoad builds in TVM 0.27 (its buffer is `.source`)

BINARY = (
    tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max,
    tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And, tirx.Or,
)  # fmt: skip


@dataclass
class Site:
    """One node of the tree with where it sits: `value` (computes data), `index` (addresses
    a buffer, bounds a loop, decides a branch) or `stmt`; `loops` are the enclosing loop vars."""

    node: Any
    role: str
    loops: tuple[Any, ...]
    parent: Any = None  # the statement list holding a stmt site, for deletion and insertion


def sites(stmt: Any) -> list[Site]:
    """Every node of `stmt` in pre-order (a fixed order: mutations pick sites by position)."""
    out: list[Site] = []
    _walk(stmt, "stmt", (), None, out)
    return out


def _walk(node: Any, role: str, loops: tuple[Any, ...], parent: Any, out: list[Site]) -> None:
    out.append(Site(node, role, loops, parent))
    if isinstance(node, tirx.SeqStmt):
        for s in node.seq:
            _walk(s, "stmt", loops, node, out)
    elif isinstance(node, tirx.For):
        _walk(node.extent, "index", loops, None, out)
        _walk(node.body, "stmt", (*loops, node.loop_var), None, out)
    elif isinstance(node, tirx.BufferStore):
        for i in node.indices:
            _walk(i, "index", loops, None, out)
        _walk(node.value, "value", loops, None, out)
    elif isinstance(node, tirx.IfThenElse):
        _walk(node.condition, "index", loops, None, out)
        _walk(node.then_case, "stmt", loops, None, out)
        if node.else_case is not None:
            _walk(node.else_case, "stmt", loops, None, out)
    elif isinstance(node, tirx.AttrStmt):
        _walk(node.body, "stmt", loops, None, out)
    elif isinstance(node, BINARY):
        _walk(node.a, role, loops, None, out)
        _walk(node.b, role, loops, None, out)
    elif isinstance(node, tirx.Cast):
        _walk(node.value, role, loops, None, out)
    elif isinstance(node, tirx.Select):
        _walk(node.condition, "index", loops, None, out)
        _walk(node.true_value, role, loops, None, out)
        _walk(node.false_value, role, loops, None, out)
    elif isinstance(node, LOAD):
        for i in node.indices:
            _walk(i, "index", loops, None, out)


Edit = Callable[[Any], Any]  # a node -> its replacement, or None to keep it (and look inside)


def rebuild(node: Any, edit: Edit) -> Any:
    """`node` with `edit` applied top-down: a replaced node is not entered again."""
    new = edit(node)
    if new is not None:
        return new
    r = lambda n: rebuild(n, edit)
    if isinstance(node, tirx.SeqStmt):
        return tirx.SeqStmt([r(s) for s in node.seq])
    if isinstance(node, tirx.For):
        return tirx.For(node.loop_var, node.min, r(node.extent), node.kind, r(node.body), node.thread_binding,
                        node.annotations, node.step)  # fmt: skip
    if isinstance(node, tirx.BufferStore):
        return tirx.BufferStore(node.buffer, r(node.value), [r(i) for i in node.indices])
    if isinstance(node, tirx.IfThenElse):
        other = None if node.else_case is None else r(node.else_case)
        return tirx.IfThenElse(r(node.condition), r(node.then_case), other)
    if isinstance(node, tirx.AttrStmt):
        return tirx.AttrStmt(node.node, node.attr_key, node.value, r(node.body))
    if isinstance(node, BINARY):
        return type(node)(r(node.a), r(node.b))
    if isinstance(node, tirx.Cast):
        return tirx.Cast(str(node.ty), r(node.value))
    if isinstance(node, tirx.Select):
        return tirx.Select(r(node.condition), r(node.true_value), r(node.false_value))
    if isinstance(node, LOAD):
        return tirx.BufferLoad(node.source, [r(i) for i in node.indices])
    return node


def replace(root: Any, target: Any, new: Any) -> Any:
    """`root` with the node `target` (by identity) replaced by `new`."""
    return rebuild(root, lambda n: new if n.same_as(target) else None)
