"""abstract/terms.py: the C-API term builders make exactly the terms z3's operators make."""

from __future__ import annotations

import z3

from nnsmith_cov.abstract import terms


def same(a: object, b: object) -> bool:
    """The same Python value, or the same Z3 term (hash-consed: one AST id)."""
    if isinstance(a, z3.ExprRef) or isinstance(b, z3.ExprRef):
        return type(a) is type(b) and a.eq(b)
    return type(a) is type(b) and a == b


def test_comparisons_match_the_operators_with_either_side_a_term_or_an_int():
    ctx = z3.Context()
    x, y = z3.Int("x", ctx), z3.Int("y", ctx)
    for a, b in ((x, 3), (3, x), (x, y), (x, -2), (4, 5), (5, 4), (x * y, 7), (7, x * y)):
        assert same(terms.ge(a, b), a >= b), (a, b)
        assert same(terms.le(a, b), a <= b), (a, b)
        assert same(terms.eq(a, b), a == b), (a, b)
    # reflected like z3's operators: 1 >= x is x <= 1, not 1 >= x
    assert str(terms.ge(1, x)) == "x <= 1" and str(terms.eq(1, x)) == "x == 1"


def test_products_keep_the_operand_order_and_python_ints_stay_ints():
    ctx = z3.Context()
    x, y = z3.Int("x", ctx), z3.Int("y", ctx)
    for dims in ([], [2, 3], [x], [2, x, 3, y], [x, y, 1]):
        expected = 1
        for d in dims:
            expected = expected * d
        assert same(terms.product(dims), expected), dims
    assert terms.product([2, 3]) == 6 and str(terms.product([x, 2])) == "1*x*2"


def test_connectives_match_and_or_and_other_sorts_fall_back_to_z3():
    ctx = z3.Context()
    x = z3.Int("x", ctx)
    a, b = x >= 1, x <= 4
    assert same(terms.conj(a, b), z3.And(a, b)) and same(terms.disj(a, b), z3.Or(a, b))
    assert same(terms.disj(a), z3.Or(a)) and same(terms.conj(a, True), z3.And(a, True))
    r = z3.Real("r", ctx)  # a real: z3 casts the int to a real numeral, which the fast path does not make
    assert same(terms.ge(r, 1), r >= 1) and same(terms.mul(2, r), 2 * r)
    n = z3.IntVal(5, ctx)  # a numeral term, not a symbol
    assert same(terms.le(n, x), n <= x)
    other = z3.Int("x", z3.Context())  # two contexts: z3's own error, not a silent mix
    try:
        terms.eq(x, other)
    except z3.Z3Exception:
        pass
    else:
        raise AssertionError("terms of two contexts were compared")
