"""A static proof that a graph has no NaN/Inf-free values at all (or only exact ones).

Some generated graphs cannot be repaired by any search: Log of a LogSoftmax
(never positive), a divisor out of Tril (whose upper triangle is zero), Asin of
a constant pad of 2, a max pool whose window lies wholly in the padding. This
package finds such graphs by abstract interpretation: each value gets a `Range`
(bounds on all its elements, values some element certainly takes, and bounds
that some element certainly reaches), propagated in order under the assumption
that every op before is valid; a vulnerable op whose input range lies wholly
outside its domain proves the graph infeasible. An op whose inputs are each one
known value everywhere (a Less(x, x), a softmax over one element, a zero
product) is computed instead, exactly.

The analysis is sound but incomplete: it answers "infeasible" only with a proof
(every transfer function over-approximates), and "unknown" otherwise. Ops it
does not model get the whole range of their dtype.

What each kind of fact claims, of every valid execution (no op before has a
NaN/Inf output, and casts from floats to integers stay in range):

- bounds, `integral`: every element lies in [lo, hi] (and is a whole number);
- `forced`: each of these values is taken by some element;
- `below` / `above`: some element is <= below, some is >= above (a Softmax
  slice's largest entry is at least 1/n; the bounds also tighten: of inputs
  within a spread d, every Softmax entry is at least 1 / (1 + (n - 1) e^d), so
  Softmax of Ceil(Acos(x)) is never 0). Non-monotone ops (Sin, Cos, Abs, Gelu,
  HardSwish) carry these facts through the image of the interval the element
  lies in: LogSoftmax's largest entry of each slice is in [-log n, 0] (less
  rounding), so Sin of it is <= 0;
- `values`: every element is one of these (a few values: booleans, Floor or
  Sign of a bounded value, ArgMax over few entries). Pointwise ops on inputs
  with known sets are run on every combination, with the op's own forward, so
  the result is exact (Pow(c, c) of a cast comparison is 1 everywhere);
  combinations giving NaN/Inf are no valid execution and drop out;
- `box`: per-element lower and upper bounds, started where some elements are
  the same in every execution (padding, a zeroed triangle) and computed by
  running ops monotone in each input on the lower and on the upper bounds
  (decreasing ones swapped, products at the corners, norms on the bounds of |x|,
  a product of non-negative factors on its factors' bounds, a non-monotone pointwise
  map exactly where an element is known): the output's bounds are
  the boxes' extremes, some element is at most the least upper bound (a row
  minimum that sees a padding of -2 is at most -2), and elements whose bounds
  meet hold that value in every execution.

Values whose elements are all equal (one element, and what pointwise and
layout ops make of such) have ArgMax and ArgMin 0 (the first of equal values),
and a Softmax (LogSoftmax) of 1/n (-log n) everywhere.

Between values, the analysis knows one order: the maximum of all of a value's
elements (a ReduceMax to one element, or what picks from it) is at least each
of them, the minimum at most. A comparison the order decides is a constant (Less
of the maximum and the value is False everywhere), and their difference keeps
its sign.

One answer is not a proof of infeasibility: `exact_only` reports a graph that
is valid only where a float input or weight holds one exact value (Acos of
Exp(Sqrt(x)) needs Exp's result to be 1, so x = 0: below 4e-15 in float32),
found through one-to-one ops only, so no interval of values is valid. Values
that exact are a set no search aims for; the generator drops such graphs with
the proven ones, and the reason says "valid only where ... is exactly ...".

A vulnerable op's domain also refines its inputs for the ops that read them
later: every valid execution has them in the domain, and so the values they
are made of by ops that keep every element exactly (Reshape and its kin,
Concat's parts, non-cropping pads, Neg, exact casts, Relu for a positive
domain). A refinement that leaves no value, or contradicts a value certainly
taken, is a proof too.

Where each part lives: `facts` (the `Range`), `elementwise` (unary maps, casts),
`layout` (ops that move elements), `values` (value sets, folding), `refine`
(domains), `boxes` (per-element bounds), `transfer` (per-op transfer, violations),
`exact` (exact-value-only graphs), `order` (the element order) and `analysis`
(the driver: `analyze`, `prove_infeasible`).
"""

from nnsmith_cov.gen.feasibility.analysis import analyze, prove_infeasible
from nnsmith_cov.gen.feasibility.facts import Range

__all__ = ["Range", "analyze", "prove_infeasible"]
