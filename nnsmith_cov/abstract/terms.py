"""Integer comparisons and products on the generator's hot paths, built through Z3's C API.

Each function makes exactly the term z3's operator would (`d >= 1` is `Z3_mk_ge(d, 1)`,
`1 * d` is `Z3_mk_mul(1, d)`, Python ints on both sides stay Python values), so solving,
models and graphs do not change; what goes is the operators' per-call coercion and sort
checks in Python, which bins, element caps and broadcasting call hundreds of times per graph.
Anything but Python ints and integer-sorted terms goes through z3's operators.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence

import z3

Dim = z3.ArithRef | int


def _int_term(x: object) -> bool:
    if type(x) is not z3.ArithRef:  # numerals (IntNumRef) and other subclasses: z3's own path
        return False
    ctx = x.ctx.ref()
    return z3.Z3_get_sort_kind(ctx, z3.Z3_get_sort(ctx, x.as_ast())) == z3.Z3_INT_SORT


def _numeral(k: int, ctx: z3.Context) -> z3.Ast:
    return z3.Z3_mk_numeral(ctx.ref(), str(k), z3.Z3_mk_int_sort(ctx.ref()))


def _pair(a: Dim, b: Dim) -> tuple[z3.Context, z3.Ast, z3.Ast] | None:
    """Both operands as ASTs of one context, in order; None where z3's operators must decide."""
    if _int_term(a):
        if type(b) is int:
            return a.ctx, a.as_ast(), _numeral(b, a.ctx)
        if _int_term(b) and b.ctx == a.ctx:
            return a.ctx, a.as_ast(), b.as_ast()
    elif type(a) is int and _int_term(b):
        return b.ctx, _numeral(a, b.ctx), b.as_ast()
    return None


def _compare(mk: Callable, fallback: Callable[[Dim, Dim], object]) -> Callable[[Dim, Dim], z3.BoolRef | bool]:
    # z3 reflects `1 >= d` into `d <= 1`: keep the term on the left as its operators do
    flipped = {z3.Z3_mk_ge: z3.Z3_mk_le, z3.Z3_mk_le: z3.Z3_mk_ge, z3.Z3_mk_eq: z3.Z3_mk_eq}[mk]

    def compare(a: Dim, b: Dim) -> z3.BoolRef | bool:
        pair = _pair(a, b)
        if pair is None:
            return fallback(a, b)
        ctx, x, y = pair
        if type(a) is int:
            return z3.BoolRef(flipped(ctx.ref(), y, x), ctx)
        return z3.BoolRef(mk(ctx.ref(), x, y), ctx)

    return compare


ge = _compare(z3.Z3_mk_ge, operator.ge)
le = _compare(z3.Z3_mk_le, operator.le)
eq = _compare(z3.Z3_mk_eq, operator.eq)


def mul(a: Dim, b: Dim) -> Dim:
    """a * b, the operand order kept (`1 * d` stays `1*d`, as z3's `__rmul__` makes it)."""
    pair = _pair(a, b)
    if pair is None:
        return a * b
    ctx, x, y = pair
    args = (z3.Ast * 2)(x, y)
    return z3.ArithRef(z3.Z3_mk_mul(ctx.ref(), 2, args), ctx)


def product(dims: Sequence[Dim]) -> Dim:
    """1 * d0 * d1 * ..., left to right (Python ints multiplied as ints)."""
    return functools.reduce(mul, dims, 1)


def _connective(mk: Callable, fallback: Callable[..., z3.BoolRef]) -> Callable[..., z3.BoolRef]:
    def connect(*args: z3.BoolRef) -> z3.BoolRef:
        if not args or any(type(a) is not z3.BoolRef for a in args) or any(a.ctx != args[0].ctx for a in args):
            return fallback(*args)
        ctx = args[0].ctx
        return z3.BoolRef(mk(ctx.ref(), len(args), (z3.Ast * len(args))(*(a.as_ast() for a in args))), ctx)

    return connect


conj = _connective(z3.Z3_mk_and, z3.And)
disj = _connective(z3.Z3_mk_or, z3.Or)
