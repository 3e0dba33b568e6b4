"""Per-op facts live on the specs: every name-keyed table left in the analyses names real
ops, each fact is declared only on ops it can hold for, and the op library keeps its
order and its place below gen/ and search/."""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import torch

import nnsmith_cov
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import Attrs, Broadcast, Elementwise, OpSpec
from nnsmith_cov.abstract.op_facts import Domain, Elements, Monotone
from nnsmith_cov.gen.feasibility import elementwise as feas_elementwise
from nnsmith_cov.gen.feasibility import layout, refine, values
from nnsmith_cov.ops import ALL_OPS, MODULES, is_op, op_by_name
from nnsmith_cov.search import demand, gradient

PACKAGE = Path(nnsmith_cov.__file__).parent
# Packages whose modules hold per-op knowledge (the analyses, the search, the materializer).
SCANNED = ("nnsmith_cov.gen", "nnsmith_cov.search", "nnsmith_cov.materialize", "nnsmith_cov.ops")


def _modules(package: str):
    pkg = importlib.import_module(package)
    yield pkg
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        yield importlib.import_module(info.name)


def _string_tables():
    """(module.name, strings) for every module-level dict, set or tuple of strings."""
    for package in SCANNED:
        for mod in _modules(package):
            for name, value in vars(mod).items():
                keys = list(value) if isinstance(value, dict | set | frozenset | tuple | list) else []
                if keys and all(isinstance(k, str) for k in keys):
                    yield f"{mod.__name__}.{name}", keys


def test_every_per_op_table_names_only_ops():
    # A table naming one op is a per-op table: all its names must be ops (a misspelt or
    # removed op would silently drop out of the analysis).
    tables = [(where, keys) for where, keys in _string_tables() if any(is_op(k) for k in keys)]
    assert tables, "the scan found no per-op table at all: it looks in the wrong place"
    bad = {where: sorted(k for k in keys if not is_op(k)) for where, keys in tables}
    assert {w: ks for w, ks in bad.items() if ks} == {}


def test_the_scan_catches_a_name_that_is_no_op(monkeypatch):
    monkeypatch.setattr(refine, "SHOWS_ALL", layout.KEEP_ALL | {"Identity"})
    found = dict(_string_tables())
    assert "Identity" in found["nnsmith_cov.gen.feasibility.refine.SHOWS_ALL"]
    assert not is_op("Identity")


def _dtype_pairs(op: type[OpSpec]) -> list[tuple[DType, DType]]:
    return [(ins[0], outs[0]) for ins, outs in op.sigs]


def test_element_moving_ops_are_data_layout_ops():
    for op in ALL_OPS:
        if op.elements is Elements.COMPUTED:
            continue
        # What the output holds are the first input's own elements, so its own dtype.
        assert all(i is o for i, o in _dtype_pairs(op)), op.name()
        assert not op.pointwise and op.value_map is None, op.name()
        if op.elements is Elements.ALL:
            # Every element kept: one data input, one output, reordered exactly.
            assert op.arity() == 1 and op.n_outputs() == 1, op.name()
            assert op.monotone is Monotone.MOVES, op.name()
            assert not op.vulnerable, op.name()


def test_value_maps_are_unary_pointwise_maps():
    mapped = [op for op in ALL_OPS if op.value_map is not None]
    assert mapped
    for op in mapped:
        m = op.value_map
        assert op.arity() == 1 and op.pointwise and issubclass(op, Elementwise), op.name()
        assert all(o is i for i, o in _dtype_pairs(op)), op.name()
        fn = m.fn or op.torch_fn
        assert callable(fn), op.name()
        x = torch.linspace(-0.9, 0.9, 7, dtype=torch.float64)
        # The map is the op's own computation.
        assert torch.allclose(fn(x), op.forward(Attrs(), x).double(), equal_nan=True), op.name()
        if m.dips:  # a dip is a place the map is not monotone
            assert op.monotone is Monotone.NONE, op.name()
        if m.whole:
            assert bool((fn(x * 7) == torch.round(fn(x * 7))).all()), op.name()


def test_inverses_give_back_the_input():
    inverted = [op for op in ALL_OPS if op.inverse is not None]
    assert inverted
    for op in inverted:
        assert op.arity() == 1 and issubclass(op, Elementwise), op.name()
        for x in (0.0, 0.3, 0.6):
            y = float(op.forward(Attrs(), torch.tensor(x, dtype=torch.float64)))
            c = op.inverse(y)
            if c is not None:  # the one input giving y
                assert c == pytest.approx(x, abs=1e-9), op.name()
    assert op_by_name("Exp").inverse(1.0) == 0.0


def test_pointwise_ops_keep_their_shape():
    for op in ALL_OPS:
        if op.pointwise:
            assert issubclass(op, Elementwise | Broadcast) and op.n_outputs() == 1, op.name()


def test_monotone_facts_fit_the_ops():
    for op in ALL_OPS:
        if op.monotone is Monotone.FALLING:
            assert op.arity() == 1 and op.value_map is not None, op.name()
        if op.monotone is Monotone.MAGNITUDE:
            assert op.arity() == 1 and not op.pointwise, op.name()
    # An op whose attributes decide says so for each instance.
    relu_t = op_by_name("ThresholdedRelu")
    assert relu_t.monotone_for(Attrs(alpha=0.5)) is Monotone.RISING
    assert relu_t.monotone_for(Attrs(alpha=-0.5)) is Monotone.NONE


def test_domains_and_search_facts_sit_on_ops_that_need_them():
    for op in ALL_OPS:
        if op.input_domains or op.narrow_rank is not None:
            assert op.vulnerable, f"{op.name()}: a domain on an op that cannot make NaN/Inf"
        assert len(op.input_domains) <= op.arity(), op.name()
        assert all(d is None or isinstance(d, Domain) for d in op.input_domains), op.name()
        for i in op.index_inputs:
            assert i < op.arity() and all(ins[i] is DType.int64 for ins, _ in op.sigs), op.name()
        if op.slow_in_f16:
            assert any(DType.float16 in ins for ins, _ in op.sigs), op.name()
        if op.search_forward is not None:
            params = inspect.signature(op.search_forward).parameters
            assert len(params) == 1 + op.arity(), op.name()


def test_derived_sets_come_from_the_specs():
    names = lambda pred: {op.name() for op in ALL_OPS if pred(op)}  # noqa: E731
    assert layout.KEEP_ALL == names(lambda op: op.elements is Elements.ALL)
    assert values.POINTWISE == names(lambda op: op.pointwise)
    assert feas_elementwise.UNARY == names(lambda op: op.value_map is not None)
    assert set(refine.DOMAINS) == names(lambda op: op.input_domains)
    assert demand.NARROW_FIRST == {op.name(): op.narrow_rank for op in ALL_OPS if op.narrow_rank is not None}
    # The search keeps leaves inside the intervals of the ops that read them (not Div's "not 0").
    assert set(gradient.LEAF_DOMAINS) <= set(refine.DOMAINS)
    assert all(lo < hi for lo, hi in gradient.LEAF_DOMAINS.values())
    assert feas_elementwise.RISING_OPS and feas_elementwise.RISING_OPS.isdisjoint(feas_elementwise.UNARY)


# The generator draws ops by index: the order of the library is part of what a seed means.
# New ops go at the end; moving one changes every seed's graph (update this on purpose).
ORDER_PREFIX, ORDER_SHA1 = 139, "76f05a6d2465a54f7f2e87d46b5fa16cab24bb34"


def test_op_order_is_kept():
    names = ",".join(op.name() for op in ALL_OPS[:ORDER_PREFIX])
    assert len(ALL_OPS) >= ORDER_PREFIX
    assert hashlib.sha1(names.encode()).hexdigest() == ORDER_SHA1


def test_family_modules_list_each_op_once():
    listed = [op for m in MODULES for op in m.OPS]
    assert len(listed) == len(set(listed)) == len(ALL_OPS)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize(
    "folder, banned",
    [("ops", ("nnsmith_cov.gen", "nnsmith_cov.search")), ("abstract", ("nnsmith_cov.ops", "nnsmith_cov.gen"))],
)
def test_specs_sit_below_the_analyses(folder, banned):
    # ops/ may not import gen/ or search/, abstract/ not ops/ (draw_bin lives in abstract.bins).
    for path in sorted((PACKAGE / folder).glob("*.py")):
        bad = sorted(m for m in _imports(path) if m.startswith(banned))
        assert not bad, f"{path.name} imports {bad}"
        assert len(path.read_text().splitlines()) <= 600, f"{path.name}: over 600 lines"
