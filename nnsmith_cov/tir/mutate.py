"""IR mutations in Tzer's spirit on loop-form PrimFuncs: each returns a well-formed PrimFunc
(TVM's own verifier and a TVMScript round trip accept it) or raises Rejected.

Mutations keep every buffer access in bounds (loop extents only shrink, shifted indices wrap
modulo the dimension), so a mutant that crashes at run time points at the compiler, not at an
out-of-bounds write of the mutant's own making.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnsmith_cov.tir.tree import LOAD, Site, replace, sites


class Rejected(Exception):
    """The mutation does not apply here or made an ill-formed function: a clean no."""


_ARITH = ("Add", "Sub", "Mul", "Min", "Max")
_CASTS = {"float": ("float16", "float64", "int32"), "int": ("int8", "int64", "float32")}


def _dtype(e: Any) -> str:
    return str(e.ty)  # TVM 0.27 expressions carry their dtype as `ty`


def _pick(rng: np.random.Generator, cands: list[Site]) -> Site:
    if not cands:
        raise Rejected("no site for this mutation")
    return cands[int(rng.integers(len(cands)))]


def _values(body: Any) -> list[Site]:
    return [s for s in sites(body) if s.role == "value"]


def swap_operator(body: Any, rng: np.random.Generator) -> Any:
    """Expression replacement: an arithmetic operator becomes another of the same arity."""
    from tvm import tirx

    site = _pick(rng, [s for s in _values(body) if type(s.node).__name__ in _ARITH])
    others = [n for n in _ARITH if n != type(site.node).__name__]
    op = getattr(tirx, others[int(rng.integers(len(others)))])
    return replace(body, site.node, op(site.node.a, site.node.b))


def change_constant(body: Any, rng: np.random.Generator) -> Any:
    """Expression replacement: a constant operand becomes an edge value of its dtype."""
    from tvm import tirx

    site = _pick(rng, [s for s in _values(body) if isinstance(s.node, tirx.FloatImm | tirx.IntImm)])
    dt = _dtype(site.node)
    if dt.startswith("float"):
        pool = [0.0, 1.0, -1.0, 0.5, 1e-7, 65504.0, -3.5]
        new = tirx.FloatImm(dt, pool[int(rng.integers(len(pool)))])
    elif dt.startswith("int"):
        pool = [0, 1, -1, 2, 127, -128, 1 << 20]
        new = tirx.IntImm(dt, pool[int(rng.integers(len(pool)))])
    else:
        raise Rejected(f"no edge values for {dt}")
    return replace(body, site.node, new)


def cast_round_trip(body: Any, rng: np.random.Generator) -> Any:
    """Dtype change: a value computed through another dtype and cast back."""
    from tvm import tirx

    site = _pick(rng, [s for s in _values(body) if _dtype(s.node) in ("float32", "int32", "float16")])
    kind = "float" if _dtype(site.node).startswith("float") else "int"
    mid = [d for d in _CASTS[kind] if d != _dtype(site.node)]
    via = mid[int(rng.integers(len(mid)))]
    return replace(body, site.node, tirx.Cast(_dtype(site.node), tirx.Cast(via, site.node)))


def wrap_select(body: Any, rng: np.random.Generator) -> Any:
    """Expression insertion: a value becomes a Select on an enclosing loop variable."""
    from tvm import tirx

    site = _pick(rng, [s for s in _values(body) if s.loops and not isinstance(s.node, tirx.Var)])
    var = site.loops[int(rng.integers(len(site.loops)))]
    cond = tirx.EQ(tirx.FloorMod(var, tirx.IntImm(_dtype(var), 2)), tirx.IntImm(_dtype(var), 0))
    other = tirx.Mul(site.node, site.node) if _dtype(site.node) != "bool" else tirx.Not(site.node)
    return replace(body, site.node, tirx.Select(cond, site.node, other))


def shift_index(body: Any, rng: np.random.Generator) -> Any:
    """Index change: one index of a load moves by a constant, wrapped into the dimension."""
    from tvm import tirx

    loads = [s for s in sites(body) if isinstance(s.node, LOAD) and s.node.indices]
    site = _pick(rng, loads)
    load = site.node
    axis = int(rng.integers(len(load.indices)))
    dim = load.source.shape[axis]
    if not isinstance(dim, tirx.IntImm) or int(dim) < 2:
        raise Rejected("no room to shift this index")
    idx = load.indices[axis]
    step = tirx.IntImm(_dtype(idx), int(rng.integers(1, int(dim))))
    moved = tirx.FloorMod(tirx.Add(idx, step), tirx.IntImm(_dtype(idx), int(dim)))
    indices = [moved if k == axis else i for k, i in enumerate(load.indices)]
    return replace(body, load, tirx.BufferLoad(load.source, indices))


def swap_buffer(body: Any, rng: np.random.Generator, params: list[Any]) -> Any:
    """Buffer change: a load reads another parameter of the same shape and dtype."""
    from tvm import tirx

    loads = [s for s in sites(body) if isinstance(s.node, LOAD)]
    cands = []
    for s in loads:
        others = [p for p in params if not p.same_as(s.node.source) and _shape_key(p) == _shape_key(s.node.source)]
        if others:
            cands.append((s, others))
    if not cands:
        raise Rejected("no parameter of the same shape to read instead")
    site, others = cands[int(rng.integers(len(cands)))]
    new = others[int(rng.integers(len(others)))]
    return replace(body, site.node, tirx.BufferLoad(new, list(site.node.indices)))


def _shape_key(buf: Any) -> tuple[Any, ...] | None:
    try:
        return (tuple(int(d) for d in buf.shape), str(buf.dtype))
    except (TypeError, AttributeError):
        return None


def shrink_loop(body: Any, rng: np.random.Generator) -> Any:
    """Loop extent change: a constant extent becomes smaller (accesses stay in bounds)."""
    from tvm import tirx

    loops = [s for s in sites(body) if isinstance(s.node, tirx.For) and isinstance(s.node.extent, tirx.IntImm)]
    site = _pick(rng, [s for s in loops if int(s.node.extent) > 1])
    f = site.node
    extent = tirx.IntImm(_dtype(f.extent), int(rng.integers(1, int(f.extent))))
    return replace(body, f, tirx.For(f.loop_var, f.min, extent, f.kind, f.body, f.thread_binding, f.annotations,
                                     f.step))  # fmt: skip


def change_loop_kind(body: Any, rng: np.random.Generator) -> Any:
    """Loop annotation change: serial <-> unrolled, and vectorized for a short innermost loop."""
    from tvm import tirx

    loops = [s for s in sites(body) if isinstance(s.node, tirx.For) and isinstance(s.node.extent, tirx.IntImm)]
    site = _pick(rng, loops)
    f = site.node
    kinds = [tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED]
    inner = not any(isinstance(s.node, tirx.For) for s in sites(f.body))
    if inner and int(f.extent) <= 16:
        kinds.append(tirx.ForKind.VECTORIZED)
    kinds = [k for k in kinds if k != f.kind]
    kind = kinds[int(rng.integers(len(kinds)))]
    return replace(body, f, tirx.For(f.loop_var, f.min, f.extent, kind, f.body, f.thread_binding, f.annotations,
                                     f.step))  # fmt: skip


def _stmt_in_seq(body: Any, rng: np.random.Generator) -> Site:
    from tvm import tirx

    skip = (tirx.AllocBuffer, tirx.DeclBuffer)
    return _pick(rng, [s for s in sites(body) if s.parent is not None and not isinstance(s.node, skip)])


def delete_stmt(body: Any, rng: np.random.Generator) -> Any:
    """Statement deletion: one statement of a sequence goes."""
    from tvm import tirx

    site = _stmt_in_seq(body, rng)
    rest = [s for s in site.parent.seq if not s.same_as(site.node)]
    if not rest:
        raise Rejected("the sequence would be empty")
    new = tirx.SeqStmt(rest) if len(rest) > 1 else rest[0]
    return replace(body, site.parent, new)


def duplicate_store(body: Any, rng: np.random.Generator) -> Any:
    """Statement insertion: a store of a sequence runs twice (no new variables are bound)."""
    from tvm import tirx

    stores = [s for s in sites(body) if s.parent is not None and isinstance(s.node, tirx.BufferStore)]
    site = _pick(rng, stores)
    seq = []
    for s in site.parent.seq:
        seq.append(s)
        if s.same_as(site.node):
            seq.append(s)
    return replace(body, site.parent, tirx.SeqStmt(seq))


def guard_stmt(body: Any, rng: np.random.Generator) -> Any:
    """Statement replacement: a store runs only where an enclosing loop variable is even."""
    from tvm import tirx

    site = _pick(rng, [s for s in sites(body) if isinstance(s.node, tirx.BufferStore) and s.loops])
    var = site.loops[int(rng.integers(len(site.loops)))]
    cond = tirx.EQ(tirx.FloorMod(var, tirx.IntImm(_dtype(var), 2)), tirx.IntImm(_dtype(var), 0))
    return replace(body, site.node, tirx.IfThenElse(cond, site.node, None))


Mutator = Callable[[Any, np.random.Generator], Any]
MUTATORS: dict[str, Mutator] = {
    "swap_operator": swap_operator,
    "change_constant": change_constant,
    "cast_round_trip": cast_round_trip,
    "wrap_select": wrap_select,
    "shift_index": shift_index,
    "shrink_loop": shrink_loop,
    "change_loop_kind": change_loop_kind,
    "delete_stmt": delete_stmt,
    "duplicate_store": duplicate_store,
    "guard_stmt": guard_stmt,
}
NAMES = (*MUTATORS, "swap_buffer")  # swap_buffer also takes the function's parameters


def mutate(func: Any, name: str, seed: int) -> Any:
    """`func` mutated by the mutator `name`, its choices drawn from `seed`; raises Rejected."""
    from tvm import tirx

    if name not in NAMES:
        raise Rejected(f"unknown mutation {name!r}")
    rng = np.random.default_rng(seed)
    try:
        if name == "swap_buffer":
            body = swap_buffer(func.body, rng, list(func.params))
        else:
            body = MUTATORS[name](func.body, rng)
        new = func.with_body(body)
        if not tirx.analysis.verify_well_formed(new, assert_mode=False):
            raise Rejected("not well-formed")
    except Rejected:
        raise
    except Exception as e:  # noqa: BLE001 - TVM refused to build a node: the mutation does not apply
        raise Rejected(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    return new
