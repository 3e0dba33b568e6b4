"""A campaign's settings, `FuzzConfig`, and its config.json: `to_json` writes it when the
campaign starts, `from_json` reads it back for `fuzz --resume`, checking every value (a
campaign folder is data, and may come from anyone) and migrating older schemas explicitly.

config.json, schema 6 (besides the keys below: "versions", "coverage", and for a replay
"replay", which describe the run rather than set it, and are not read back here):

  {"schema": 6, "seed": 0, "time_s": 600.0, "max_tests": null, "feedback": true,
   "mutation": true, "grow_max": [40], "hedge": 0.5, "vary_size": false, "collector": "python", "cov_targets": [],
   "pass_filters": null,
   "generator": {"nodes": 10, "binning": true, "max_elems": 65536, "timeout_ms": 60000,
                 "work_budget": 10000000, "opsets": [11, ..., 20], "dynamic_prob": null,
                 "roundtrip_prob": null, "ops": ["Abs", "Add", ...], "name": "nnsmith",
                 "feedback_arms": ["op", "direction", ...]},
   "backends": ["ort", "tvm"], "rtol": 0.01, "atol": 0.001, "half_rtol": 0.05,
   "half_atol": 0.01, "timeout_s": 60.0,
   "search": {"method": "gradient", "max_iters": 256, "budget_ms": 5000}, "localize": true}

("dynamic_prob"/"roundtrip_prob" null: the scheduler chooses the share; "feedback_arms" is
derived from the generator and feedback, written for readers, not read back.)

Schemas:
  1  the first layout (a file without "schema" is one). Keys added after it began may be
     absent, and then stand for the settings of the runs made before them: `_V1_ABSENT`.
  2  the same keys, every one written and required: absence is an error, never a default.
  3  "vary_size" (feedback off drawing graph sizes at random: the off-var ablation); a
     schema-2 config reads as false.
  4  "grow_max" (the most operators a child of a kept test may hold); a schema-3 config
     reads as 4 x its generator's nodes, the cap campaigns had before the key.
  5  "grow_max" is a list: the caps the scheduler learns among (one: that cap, fixed); a
     schema-4 config's number reads as the list of it.
  6  "hedge" (with feedback, the share of tests drawn as without it); a schema-5 config
     reads as 0, the campaigns before it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from nnsmith_cov.baselines import FEEDBACK_ARMS
from nnsmith_cov.bounded_read import shown
from nnsmith_cov.campaign.testcase import CaseSettings
from nnsmith_cov.feedback.params import BanditParams
from nnsmith_cov.flag_values import MAX_CAPS, MAX_GROWN, MAX_NODES, is_hedge
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.stored import (
    StoredError,
    is_number,
    number,
    search_settings,
    timeout,
    trusted_backend,
    trusted_collector,
)

CONFIG_SCHEMA = 6
# The caps, in multiples of the configured size, on the ops a child of a kept test may hold unless
# the campaign says otherwise (`fuzz --grow-max`; several are learned among). One, 4: learning
# between 2 and 4 found the chain fake's goal in 6 of 12 seeds, as 2 alone, 4 alone in 10.
GROW_FACTORS = (4,)
READS = (1, 2, 3, 4, 5, 6)  # the schemas `from_json` takes (1-5 through `_migrate_1` .. `_migrate_5`)

# What a schema-1 config.json may lack, and what its absence meant (frozen here: a later
# change of a default must not change how an old campaign resumes).
_V1_ABSENT: dict[str, Any] = {
    "time_s": None,
    "max_tests": None,
    "mutation": False,  # campaigns from before mutation did not mutate
    "cov_targets": [],
    "pass_filters": None,
    "rtol": 1e-2,
    "atol": 1e-3,
    "half_rtol": 5e-2,
    "half_atol": 1e-2,
    "timeout_s": 60.0,
}
_V1_GEN_ABSENT: dict[str, Any] = {
    "name": "nnsmith",
    "work_budget": 10_000_000,
    "opsets": [20],  # before opset choice, every graph was exported at 20
    "dynamic_prob": 0.0,
    "roundtrip_prob": 0.0,
}


@dataclass
class FuzzConfig:
    gen: GenConfig
    settings: CaseSettings
    seed: int = 0
    time_s: float | None = None  # stop after this long ...
    max_tests: int | None = None  # ... or after this many test cases, whichever comes first
    feedback: bool = False  # the scheduler biases choices toward new coverage (else plain NNSmith)
    collector: str = ""  # recorded so that a resumed campaign measures the same way
    cov_targets: list[str] = field(default_factory=list)
    pass_filters: list[str] | None = None  # None: the collector's defaults (coverage.collector.PASS_FILTERS)
    timeline_s: float = 5.0  # a coverage-over-time point at least this often
    generator: str = "nnsmith"  # or a baseline: graphfuzzer, lemon (nnsmith_cov.baselines)
    dynamic_arm: bool = False  # the scheduler chooses the share of dynamic-dim exports (gen.dynamic_prob unused)
    roundtrip_arm: bool = False  # ... and of graphs compiled from the IR's text (gen.roundtrip_prob unused)
    mutation: bool = False  # with feedback, seeded tests may mutate their parent's draws (else only grow it)
    vary_size: bool = False  # without feedback, the size drawn uniformly among the size arm's (off-var)
    grow_max: tuple[int, ...] = ()  # caps on a grown or mutated graph's ops; (): GROW_FACTORS x gen.nodes
    hedge: float = BanditParams.hedge  # with feedback, the share of tests drawn as without it

    @property
    def grow_caps(self) -> tuple[int, ...]:
        """The caps on a child's ops, ascending: `grow_max`, or its default for the generator's size."""
        return tuple(sorted(set(self.grow_max or (f * self.gen.nodes for f in GROW_FACTORS))))

    @property
    def max_grown(self) -> int:
        """The cap of a seeded test whose proposal names none (the campaign's largest)."""
        return self.grow_caps[-1]

    def to_json(self) -> dict[str, Any]:
        gen = self.gen
        return {
            "schema": CONFIG_SCHEMA,
            "seed": self.seed,
            "time_s": self.time_s,
            "max_tests": self.max_tests,
            "feedback": self.feedback,
            "mutation": self.mutation,
            "grow_max": list(self.grow_caps),
            "hedge": self.hedge,
            "vary_size": self.vary_size,
            "collector": self.collector,
            "cov_targets": self.cov_targets,
            "pass_filters": self.pass_filters,
            "generator": {
                "nodes": gen.nodes,
                "binning": gen.binning,
                "max_elems": gen.max_elems,
                "timeout_ms": gen.timeout_ms,
                "work_budget": gen.work_budget,
                "opsets": list(gen.opsets),
                "dynamic_prob": None if self.dynamic_arm else gen.dynamic_prob,  # None: the scheduler's
                "roundtrip_prob": None if self.roundtrip_arm else gen.roundtrip_prob,
                "ops": sorted(o.name() for o in gen.ops),
                "name": self.generator,
                # the scheduler's knobs this generator follows (none without feedback)
                "feedback_arms": list(FEEDBACK_ARMS[self.generator]) if self.feedback else [],
            },
        } | self.settings.to_json()

    @classmethod
    def from_json(cls, obj: object, plugins: Collection[str] = ()) -> FuzzConfig:
        """The settings a config.json holds, every value checked; StoredError (one line) for
        what does not fit: an unknown schema, a missing key, a value of the wrong type or range,
        a plug-in backend or collector not in `plugins` (those the user named on the command
        line; data never imports code)."""
        return _read(_current(obj), plugins)


def _current(obj: object) -> dict[str, Any]:
    """`obj` in the layout of CONFIG_SCHEMA: older schemas migrated, unknown ones refused."""
    if not isinstance(obj, dict):
        raise StoredError(f"expected a JSON object, not {shown(obj)}")
    schema = obj.get("schema", 1)
    if type(schema) is not int or schema not in READS:
        raise StoredError(f"schema {shown(schema)}: this nnsmith-cov reads config schemas {READS[0]}..{READS[-1]}")
    if schema == 1:
        obj = _migrate_1(obj)
    if obj["schema"] == 2:
        obj = _migrate_2(obj)
    if obj["schema"] == 3:
        obj = _migrate_3(obj)
    if obj["schema"] == 4:
        obj = _migrate_4(obj)
    return _migrate_5(obj) if obj["schema"] == 5 else obj


def _migrate_1(obj: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 config as schema 2: the keys it lacks, with what their absence meant."""
    out = copy.deepcopy(obj)
    for key, value in _V1_ABSENT.items():
        out.setdefault(key, copy.deepcopy(value))
    if isinstance(out.get("generator"), dict):
        for key, value in _V1_GEN_ABSENT.items():
            out["generator"].setdefault(key, copy.deepcopy(value))
    out["schema"] = 2
    return out


def _migrate_2(obj: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 config as schema 3: off-var's sizes did not vary before `vary_size`."""
    return obj | {"schema": 3, "vary_size": False}


def _migrate_3(obj: dict[str, Any]) -> dict[str, Any]:
    """A schema-3 config as schema 4: children were capped at 4 x the configured size."""
    gen = obj.get("generator")
    nodes = gen.get("nodes") if isinstance(gen, dict) else None
    if type(nodes) is not int:
        return obj | {"schema": 4}  # `_read` names what is wrong with the generator
    return obj | {"schema": 4, "grow_max": 4 * nodes}


def _migrate_4(obj: dict[str, Any]) -> dict[str, Any]:
    """A schema-4 config as schema 5: its one cap, fixed."""
    cap = obj.get("grow_max")
    return obj | {"schema": 5, "grow_max": [cap] if type(cap) is int else cap}


def _migrate_5(obj: dict[str, Any]) -> dict[str, Any]:
    """A schema-5 config as schema 6: no test was hedged before the hedge."""
    return obj | {"schema": 6, "hedge": 0.0}


def _of(
    obj: Mapping[str, Any], key: str, kind: type | tuple, ok: Callable[[Any], bool] = lambda _: True, rule: str = ""
) -> Any:
    """`obj[key]`, of `kind` and passing `ok`; StoredError names the key otherwise."""
    if key not in obj:
        raise StoredError(f"lacks {key!r}")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    bad_bool = isinstance(value, bool) and bool not in kinds
    if bad_bool or not isinstance(value, kinds) or not ok(value):
        raise StoredError(f"{key} must be {rule or ' or '.join(k.__name__ for k in kinds)}, not {shown(value)}")
    return value


def _caps(v: list[Any]) -> bool:
    ok = all(type(x) is int and 1 <= x <= MAX_GROWN for x in v)
    return ok and 1 <= len(v) <= MAX_CAPS and len(set(v)) == len(v)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


def _read(c: dict[str, Any], plugins: Collection[str]) -> FuzzConfig:
    from nnsmith_cov.abstract.op import MAX_OPSET, MIN_OPSET
    from nnsmith_cov.ops import select_ops

    pos_int, pos_rule = (lambda v: v >= 1), "a positive integer"
    share = lambda v: v is None or (is_number(v) and 0 <= v <= 1)
    maybe_share = (int, float, type(None))
    gen = _of(c, "generator", dict)
    names = _of(gen, "ops", list, _strs, "a list of operator names")
    try:
        ops = select_ops(names)
    except ValueError as e:
        raise StoredError(str(e)) from None
    in_range = lambda v: bool(v) and all(type(o) is int and MIN_OPSET <= o <= MAX_OPSET for o in v)
    dynamic = _of(gen, "dynamic_prob", maybe_share, share, "a share in [0, 1]")
    roundtrip = _of(gen, "roundtrip_prob", maybe_share, share, "a share in [0, 1]")
    gen_cfg = GenConfig(
        nodes=_of(gen, "nodes", int, lambda v: 1 <= v <= MAX_NODES, f"an integer in 1..{MAX_NODES}"),
        ops=ops,
        binning=_of(gen, "binning", bool),
        max_elems=_of(gen, "max_elems", int, pos_int, pos_rule),
        timeout_ms=_of(gen, "timeout_ms", int, pos_int, pos_rule),
        work_budget=_of(gen, "work_budget", int, pos_int, pos_rule),
        opsets=tuple(_of(gen, "opsets", list, in_range, f"opsets in {MIN_OPSET}..{MAX_OPSET}")),
        dynamic_prob=float(dynamic or 0.0),
        roundtrip_prob=float(roundtrip or 0.0),
    )
    backends = _of(c, "backends", list, bool, "a non-empty list of backends")
    for key in ("rtol", "atol", "half_rtol", "half_atol", "timeout_s"):
        if key not in c:  # (schema 2 implies nothing; `number` below checks type and range)
            raise StoredError(f"lacks {key!r}")
    settings = CaseSettings(
        backends=[trusted_backend(b, plugins, "backends") for b in backends],
        rtol=number(c, "rtol", "config", 0),
        atol=number(c, "atol", "config", 0),
        half_rtol=number(c, "half_rtol", "config", 0),
        half_atol=number(c, "half_atol", "config", 0),
        timeout_s=timeout(c, "config", 0),
        search=search_settings(_of(c, "search", dict), "config"),
        localize=_of(c, "localize", bool),
    )
    time_s = _of(c, "time_s", (int, float, type(None)), lambda v: v is None or (is_number(v) and v > 0))
    return FuzzConfig(
        gen_cfg,
        settings,
        seed=_of(c, "seed", int, lambda v: 0 <= v < 2**63, "an integer in [0, 2^63)"),
        time_s=time_s,
        max_tests=_of(c, "max_tests", (int, type(None)), lambda v: v is None or v >= 1, pos_rule),
        feedback=_of(c, "feedback", bool),
        collector=trusted_collector(_of(c, "collector", (str, type(None))), plugins, "collector"),
        cov_targets=list(_of(c, "cov_targets", list, _strs, "a list of strings")),
        pass_filters=_of(c, "pass_filters", (list, type(None)), lambda v: v is None or _strs(v), "paths"),
        generator=_of(gen, "name", str, lambda v: v in FEEDBACK_ARMS, "a generator"),
        dynamic_arm=dynamic is None,
        roundtrip_arm=roundtrip is None,
        mutation=_of(c, "mutation", bool),
        vary_size=_of(c, "vary_size", bool),
        grow_max=tuple(_of(c, "grow_max", list, _caps, f"a list of 1..{MAX_CAPS} distinct integers in 1..{MAX_GROWN}")),
        hedge=float(_of(c, "hedge", (int, float), is_hedge, "a share in [0, 1)")),
    )
