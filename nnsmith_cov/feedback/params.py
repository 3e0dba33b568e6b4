"""The scheduler's constants and what it hands the generator for one test, with their JSON forms."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from nnsmith_cov.corpus.records import is_int
from nnsmith_cov.feedback.mutate import ARMS
from nnsmith_cov.flag_values import is_hedge


@dataclass(frozen=True)
class BanditParams:
    """The scheduler's constants; the defaults are argued in `Scheduler`'s docstring."""

    discount: float = 0.997  # per observed test: memory ~ 1 / (1 - discount) = 333 tests, half-life 231
    prior_tests: float = 4.0  # weight of the prior, in tests at the campaign's current interesting rate
    lift_cap: float = 32.0  # a sampled lift is clipped to [1/cap, cap]
    floor: float = 0.2  # share of every decision spread uniformly: each arm keeps >= floor / arms
    size_factors: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0)  # graph sizes, times the configured node count
    window: int = 256  # recent tests a reward is ranked among (feedback.reward); 0: `reward_of`, saturating
    hedge: float = 0.5  # share of tests drawn as feedback off draws them (a fresh graph, every choice uniform)

    def __post_init__(self) -> None:
        if not 0.0 < self.discount <= 1.0:
            raise ValueError("discount must be in (0, 1]")
        if self.prior_tests <= 0.0:
            raise ValueError("prior_tests must be positive")
        if self.lift_cap < 1.0:
            raise ValueError("lift_cap must be at least 1")
        if not 0.0 < self.floor <= 1.0:
            raise ValueError("floor must be in (0, 1]: a zero floor could starve an arm")
        if not self.size_factors or any(not f > 0 for f in self.size_factors):
            raise ValueError("size_factors must be positive")
        if not isinstance(self.window, int) or self.window < 0:
            raise ValueError("window must be a non-negative integer")
        if not is_hedge(self.hedge):
            raise ValueError("hedge must be in [0, 1): a hedge of 1 is feedback off")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"size_factors": list(self.size_factors)}

    @staticmethod
    def from_json(obj: Any) -> BanditParams:
        names = {f.name for f in dataclasses.fields(BanditParams)}
        if isinstance(obj, dict) and set(obj) == names - {"window", "hedge"}:  # saved before the ranked reward
            obj = obj | {"window": BanditParams.window}
        if isinstance(obj, dict) and set(obj) == names - {"hedge"}:  # saved before the hedge: none
            obj = obj | {"hedge": 0.0}
        if not isinstance(obj, dict) or set(obj) != names:
            raise ValueError(f"bandit params: expected the fields {sorted(names)}")
        if not all(is_number(obj[k]) for k in names - {"size_factors"}):
            raise ValueError("bandit params: expected numbers")
        factors, window = obj["size_factors"], obj["window"]
        if not isinstance(factors, list) or not all(is_number(f) for f in factors):
            raise ValueError("bandit params: size_factors must be a list of numbers")
        if not isinstance(window, int) or isinstance(window, bool):
            raise ValueError("bandit params: window must be an integer")
        floats = {k: float(obj[k]) for k in names - {"size_factors", "window"}}
        return BanditParams(**floats, size_factors=tuple(factors), window=window)


@dataclass(frozen=True)
class Proposal:
    """The generator knobs for one test, as `Scheduler.apply` hands them to `GenConfig`.

    Weights are relative to uniform (mean 1 over the arms), so an op the
    scheduler does not know gets the generator's default weight 1.0, the
    uniform share, rather than a hundred times the rest. None means uniform.
    `seeded` asks for a test that grows a stored corpus entry instead of
    starting from scratch; a caller that could not follow it (empty corpus)
    observes `dataclasses.replace(proposal, seeded=False)`. `opset_weights` and
    `dynamic_prob` / `roundtrip_prob` None keep the base config's. `mutation`, for a
    seeded test, is how the parent is changed (`feedback.mutate.ARMS`; None: grown), and
    `grow_max` the most ops its child may hold, where the scheduler learns the cap.
    `first_op` is the op a fresh graph starts with (`GenConfig.first_op`). `hedged`: the
    test is one of the scheduler's hedge, every knob as feedback off draws it.
    """

    op_weights: dict[str, float] | None  # per op spec name
    forward_prob: float
    bin_weights: dict[str, list[float]] | None  # per attribute kind, one weight per bin (see abstract.bins.n_bins)
    nodes: int
    seeded: bool
    opset_weights: dict[int, float] | None = None  # per ONNX opset
    dynamic_prob: float | None = None  # probability of symbolic input dims
    roundtrip_prob: float | None = None  # probability of compiling from the IR's text
    mutation: str | None = None  # a seeded test's mutation operator
    form_weights: dict[str, list[float]] | None = None  # per form draw label, one weight per option
    grow_max: int | None = None  # a seeded test's cap on its child's ops (None: the campaign's only cap)
    first_op: str | None = None  # the op a fresh graph's first insertion tries (None: drawn by op_weights)
    hedged: bool = False  # drawn as without feedback (`BanditParams.hedge`)

    def to_json(self) -> dict[str, Any]:
        obj = dataclasses.asdict(self)
        if self.opset_weights is not None:  # JSON object keys are strings
            obj["opset_weights"] = {str(k): w for k, w in self.opset_weights.items()}
        return obj

    @staticmethod
    def from_json(obj: Any) -> Proposal:
        if isinstance(obj, dict) and "mutation" not in obj:  # from before mutation
            obj = obj | {"mutation": None}
        if isinstance(obj, dict) and "form_weights" not in obj:  # from before the form arms
            obj = obj | {"form_weights": None}
        if isinstance(obj, dict) and "grow_max" not in obj:  # from before the cap was an arm
            obj = obj | {"grow_max": None}
        if isinstance(obj, dict) and "first_op" not in obj:  # from before the first op was chosen
            obj = obj | {"first_op": None}
        if isinstance(obj, dict) and "hedged" not in obj:  # from before the hedge
            obj = obj | {"hedged": False}
        if not isinstance(obj, dict) or set(obj) != {f.name for f in dataclasses.fields(Proposal)}:
            raise ValueError("proposal: unexpected fields")
        if obj["mutation"] is not None and obj["mutation"] not in ARMS:
            raise ValueError(f"proposal: mutation must be one of {', '.join(ARMS)}")
        ops, bins, opsets = obj["op_weights"], obj["bin_weights"], obj["opset_weights"]
        if opsets is not None:
            if not isinstance(opsets, dict) or not all(isinstance(k, str) and k.isdigit() for k in opsets):
                raise ValueError("proposal: opset_weights must map opset numbers to weights")
            opsets = {int(k): w for k, w in opsets.items()}
        dyn, trip = obj["dynamic_prob"], obj["roundtrip_prob"]
        for name, p in (("dynamic_prob", dyn), ("roundtrip_prob", trip)):
            if p is not None and not (is_number(p) and 0.0 <= p <= 1.0):
                raise ValueError(f"proposal: {name} must be a number in [0, 1]")
        if ops is not None and not (isinstance(ops, dict) and all(isinstance(k, str) for k in ops)):
            raise ValueError("proposal: op_weights must map names to weights")
        if obj["first_op"] is not None and not isinstance(obj["first_op"], str):
            raise ValueError("proposal: first_op must be an op name or null")
        if bins is not None and not (
            isinstance(bins, dict) and all(isinstance(k, str) and isinstance(w, list) for k, w in bins.items())
        ):
            raise ValueError("proposal: bin_weights must map kinds to lists of weights")
        forms = obj["form_weights"]
        if forms is not None and not (
            isinstance(forms, dict) and all(isinstance(k, str) and isinstance(w, list) for k, w in forms.items())
        ):
            raise ValueError("proposal: form_weights must map draw labels to lists of weights")
        weights = [*(ops or {}).values(), *(x for w in (bins or {}).values() for x in w), *(opsets or {}).values()]
        weights += [x for w in (forms or {}).values() for x in w]
        if not all(is_number(x) and math.isfinite(x) and x >= 0 for x in weights):
            raise ValueError("proposal: weights must be finite non-negative numbers")
        fwd, nodes = obj["forward_prob"], obj["nodes"]
        if not (is_number(fwd) and 0.0 <= fwd <= 1.0):
            raise ValueError("proposal: forward_prob must be a number in [0, 1]")
        if not (is_int(nodes) and nodes >= 1):
            raise ValueError("proposal: nodes must be a positive integer")
        if not isinstance(obj["seeded"], bool) or not isinstance(obj["hedged"], bool):
            raise ValueError("proposal: seeded and hedged must be bools")
        cap = obj["grow_max"]
        if cap is not None and not (is_int(cap) and cap >= 1):
            raise ValueError("proposal: grow_max must be a positive integer or null")
        return Proposal(
            None if ops is None else {k: float(v) for k, v in ops.items()},
            float(obj["forward_prob"]),
            None if bins is None else {k: [float(x) for x in w] for k, w in bins.items()},
            obj["nodes"],
            obj["seeded"],
            None if opsets is None else {k: float(w) for k, w in opsets.items()},
            None if dyn is None else float(dyn),
            None if trip is None else float(trip),
            obj["mutation"],
            None if forms is None else {k: [float(x) for x in w] for k, w in forms.items()},
            cap,
            obj["first_op"],
            obj["hedged"],
        )


def is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
