"""One operator made concrete on concrete inputs: the baselines' way to use an op spec.

The baselines do not solve shapes across a graph: every value they have made is
already concrete. What remains open when an operator is added is that
operator's own attributes (and the shapes of its fresh weights), so the spec's
`requires` is checked on one small Z3 problem per operator with the inputs
fixed, or, where the caller can glue a mismatch (GraphFuzzer's slicing and
padding), with each input dim merely preferred. Attribute values are pulled
toward seeded random targets so that Z3's first model does not decide them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import z3

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import AttrKind, OpSpec
from nnsmith_cov.abstract.symbols import context, int_sym
from nnsmith_cov.abstract.tensor import AbsTensor, TensorType

# Random targets per attribute kind (FREE attributes are ranged by their spec alone).
_TARGETS = {AttrKind.SIZE: (1, 4), AttrKind.PAD: (0, 3), AttrKind.SIGNED: (-3, 3)}
FRESH_DIM = (1, 8)  # target range of the dims of a fresh weight or input
# Z3 work units per check: deterministic, unlike a timeout. Problems here are small; one
# that needs more is given up (about 0.15 s on a busy core) rather than waited for.
CHECK_RLIMIT = 100_000
_MAX_UNKNOWN = 2  # preference checks Z3 may give up on before the rest are skipped


@dataclass
class Instance:
    """A concrete operator: what a GraphIR instruction needs, plus its input types."""

    op: str
    attrs: dict
    in_types: list[TensorType]
    out_types: list[TensorType]


# extra(op, inputs, outputs) -> more constraints (e.g. GraphFuzzer's stride 1)
Extra = Callable[[OpSpec, list[AbsTensor], list[AbsTensor]], list]


def instantiate(
    cls: type[OpSpec],
    uid: int,
    draw: ChoiceSource,
    dtypes: Sequence[DType],
    ranks: Sequence[int],
    given: Sequence[TensorType | None],
    *,
    soft: bool,
    preserve: bool = False,
    extra: Extra | None = None,
    max_elems: int = 1 << 16,
    excluded: frozenset[tuple[DType, int]] = frozenset(),
) -> Instance | None:
    """`cls` on inputs of `dtypes`/`ranks`; `given[i]` is the type input i should have
    (None: free, a fresh weight or input). With `soft`, given dims are preferences;
    with `preserve`, output 0 must have input 0's type. None when no instance exists.

    The given types are tried as they are first: with concrete inputs the constraints
    are mostly linear and quick, where symbolic inputs make products Z3 often gives up on.
    """
    kw = dict(preserve=preserve, extra=extra, max_elems=max_elems, excluded=excluded)
    found = _attempt(cls, uid, draw, dtypes, ranks, given, soft=frozenset(), **kw)
    if found is not None or not soft:
        return found
    # Then the other inputs fitted to the first (fewer unknowns), then all of them.
    picked = [i for i, g in enumerate(given) if g is not None]
    for loose in (frozenset(picked[1:]), frozenset(picked)):
        if loose and (found := _attempt(cls, uid, draw, dtypes, ranks, given, soft=loose, **kw)) is not None:
            return found
    return None


def _attempt(
    cls: type[OpSpec],
    uid: int,
    draw: ChoiceSource,
    dtypes: Sequence[DType],
    ranks: Sequence[int],
    given: Sequence[TensorType | None],
    *,
    soft: frozenset[int],
    preserve: bool,
    extra: Extra | None,
    max_elems: int,
    excluded: frozenset[tuple[DType, int]],
) -> Instance | None:
    op = cls(uid)
    op.setup(draw, list(zip(dtypes, ranks)))
    ins: list[AbsTensor] = []
    prefer: list[z3.BoolRef] = []
    fresh: list[z3.BoolRef] = []
    for i, (dt, rank, g) in enumerate(zip(dtypes, ranks, given)):
        if g is not None and i not in soft:
            ins.append(AbsTensor(list(g.shape), dt))
            continue
        dims = [int_sym(f"{op!r}.in{i}.{d}") for d in range(rank)]
        ins.append(AbsTensor(dims, dt))
        if g is not None:
            prefer += [s == v for s, v in zip(dims, g.shape)]
        else:
            fresh += [s == draw.integer("inst.dim", *FRESH_DIM) for s in dims]
    outs = op.type_transfer(ins)
    if any((t.dtype, t.rank) in excluded for t in ins + outs):
        return None
    if preserve and (outs[0].dtype != ins[0].dtype or outs[0].rank != ins[0].rank):
        return None
    cons = op.attr_domains() + list(op.requires(ins))
    for t in ins + outs + op.inner_tensors(ins):
        cons += [d >= 1 for d in t.shape]
        if t.rank:
            cons.append(t.nelement() <= max_elems)
    if preserve:
        cons += [a == b for a, b in zip(outs[0].shape, ins[0].shape)]
    if extra is not None:
        cons += extra(op, ins, outs)
    if any(c is False for c in cons):
        return None
    cons = [c for c in cons if c is not True]
    solver = z3.Solver(ctx=context())
    solver.set("random_seed", draw.derive_seed("inst.z3"))
    solver.set("rlimit", CHECK_RLIMIT)
    solver.add(*cons)
    if solver.check() != z3.sat:
        return None
    # Preferences are kept greedily: the given dims all together when they fit (no glue
    # needed), else one by one; then the attribute and fresh-dim targets, one by one.
    targets = [
        sym == draw.integer(f"inst.{kind.value}", *_TARGETS[kind])
        for name, sym in op.sym.items()
        if (kind := op.kinds[name]) in _TARGETS
    ]
    order = draw.permutation("inst.order", len(targets) + len(fresh))
    groups = [prefer] if prefer else []
    if prefer and solver.check(*prefer) != z3.sat:
        groups = [[p] for p in prefer]
    groups += [[(targets + fresh)[i]] for i in order]
    gave_up = 0
    for group in groups:
        result = solver.check(*group)
        if result == z3.sat:
            solver.add(*group)
        elif result == z3.unknown:
            gave_up += 1
            if gave_up == _MAX_UNKNOWN:
                break  # hard for Z3 (products of symbolic dims): keep what is settled
    if solver.check() != z3.sat:  # pragma: no cover - every kept group was checked
        return None
    model = solver.model()
    if op.wide_attrs(model):  # an attribute nothing bounds took a value PyTorch cannot take
        solver.add(*op.attr_limits())
        if solver.check() != z3.sat:
            return None
        model = solver.model()
    return Instance(
        cls.name(),
        op.concrete_attrs(model),
        [t.concrete(model) for t in ins],
        [t.concrete(model) for t in outs],
    )


def data_inputs(cls: type[OpSpec]) -> list[int]:
    """The inputs fed from the graph (the others are the op's own weights)."""
    return [i for i in range(cls.arity()) if i not in cls.param_inputs]


def accepts(cls: type[OpSpec], dtype: DType) -> bool:
    """Some signature of `cls` takes `dtype` on every input and gives it back."""
    return any(all(d == dtype for d in s[0]) and s[1][0] == dtype for s in cls.sigs)


def find_op(ops: Sequence[type[OpSpec]], name: str) -> type[OpSpec] | None:
    """The allowed spec of that name (possibly narrowed by op support), or None."""
    return next((o for o in ops if o.name() == name), None)
