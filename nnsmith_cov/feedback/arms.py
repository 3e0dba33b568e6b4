"""Discounted Beta evidence for one group of arms, and the two ways a group turns it into a choice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Label = str | int  # an arm's name: an op name, "forward", a bin number, a node count
Prior = tuple[float, float]  # Beta pseudo-counts (hits, misses) every posterior starts from

_FIELDS = ("hit_in", "miss_in", "hit_out", "miss_out")


class ArmGroup:
    """Evidence about one group of arms: ops, directions, the bins of one kind, sizes, fresh/seeded.

    A test is a trial with a reward r in [0, 1] (1: it reached new coverage). It
    *exposes* each arm i to a degree e_i in [0, 1]; the scheduler says how (an op
    present in the graph: 1, else 0; a direction or bin: the share of the test's
    draws that took it; a size: 1 for the one used). Per arm the group keeps two
    discounted Beta posteriors of the interesting rate:

    - *in*: tests with the arm, each weighted by e_i (hits += e_i r, misses += e_i (1 - r));
    - *out*: tests without it, weighted by 1 - e_i.

    Their ratio, the arm's *lift*, is what the arm is worth, and comparing with
    the tests without the arm is how a test's credit is shared among its arms.
    The generator draws each insertion independently, so the op that causes new
    coverage is about as frequent in tests with a bystander as in tests without
    it: both of the bystander's rates carry the cause's effect, its lift stays
    near 1, and only the cause's lift rises. Dividing a test's reward among the
    ops present would not tell them apart: a bystander in an interesting graph
    gets the cause's share, and once the scheduler puts the cause in most
    graphs every op's rate climbs toward the cause's.

    `decay` multiplies every count by the discount once per observed test, so a
    posterior remembers about 1 / (1 - discount) tests: the estimate follows a
    reward that moves as coverage saturates, and an arm not seen lately drifts
    back to the prior instead of staying condemned.

    A group decides in one of two ways (both draw from the caller's generator):
    `share` gives per-draw probabilities for choices drawn many times per graph
    (ops, directions, bins), `pick` chooses one arm for choices made once per test
    (size, fresh/seeded). Not thread-safe.
    """

    def __init__(self, name: str, labels: Sequence[Label]) -> None:
        if not labels:
            raise ValueError(f"{name}: a group needs at least one arm")
        if len(set(labels)) != len(labels):
            raise ValueError(f"{name}: arm labels repeat")
        self.name = name
        self.labels: tuple[Label, ...] = tuple(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}
        # rows: _FIELDS, one column per arm; one array so that decay is one multiply
        self.counts = np.zeros((len(_FIELDS), len(self.labels)))

    def __len__(self) -> int:
        return len(self.labels)

    # -- evidence -------------------------------------------------------------------
    @property
    def hit_in(self) -> np.ndarray:
        return self.counts[0]

    @property
    def miss_in(self) -> np.ndarray:
        return self.counts[1]

    @property
    def hit_out(self) -> np.ndarray:
        return self.counts[2]

    @property
    def miss_out(self) -> np.ndarray:
        return self.counts[3]

    def decay(self, discount: float) -> None:
        self.counts *= discount

    def update(self, exposure: np.ndarray, reward: float, cost: float = 1.0) -> None:
        """Add one test: `exposure` per arm in [0, 1], `reward` in [0, 1], `cost` in average tests.

        A test that took twice the average time counts as two trials (one hit at
        most): the rates are per unit of campaign time, so an arm that makes tests
        interesting by making them slow (bigger graphs, costly ops) is not paid for
        the time it takes from the others.
        """
        e = np.asarray(exposure, dtype=float)
        if e.shape != (len(self),):
            raise ValueError(f"{self.name}: exposure of shape {e.shape}, expected ({len(self)},)")
        miss = max(cost - reward, 0.0)
        self.counts += np.stack([e * reward, e * miss, (1.0 - e) * reward, (1.0 - e) * miss])

    # -- decisions ------------------------------------------------------------------
    def share(self, rng: np.random.Generator, prior: Prior, cap: float, floor: float) -> np.ndarray:
        """Per-draw probabilities: proportional to a Thompson sample of each arm's lift.

        The `in` rate is sampled from its posterior (the exploration: an arm with
        little evidence sometimes samples high); the `out` rate, backed by most
        tests, enters by its mean. Lifts are clipped to [1/cap, cap] so that one
        lucky sample cannot take a whole graph. Weights proportional to the lift,
        not the probability that an arm is best, keep graphs mixed: a strong op
        gets a large share, not every slot, and an arm without any effect stays
        near the uniform share. A `floor` of the mass is spread uniformly, so every
        arm keeps at least floor / len(group).
        """
        return self.spread(self.lifts(rng, prior, cap), floor)

    def lifts(self, rng: np.random.Generator, prior: Prior, cap: float) -> np.ndarray:
        """One Thompson sample of every arm's lift, clipped to [1/cap, cap] (see `share`)."""
        a0, b0 = prior
        theta_in = rng.beta(self.hit_in + a0, self.miss_in + b0)
        theta_out = (self.hit_out + a0) / (self.hit_out + self.miss_out + a0 + b0)
        return np.clip(theta_in / theta_out, 1.0 / cap, cap)

    def spread(self, lift: np.ndarray, floor: float) -> np.ndarray:
        """Per-draw probabilities proportional to `lift`, a `floor` of the mass spread uniformly."""
        return (1.0 - floor) * lift / lift.sum() + floor / len(self)

    def pick(self, rng: np.random.Generator, prior: Prior, floor: float) -> int:
        """Thompson sampling for a choice made once per test: the arm whose sampled rate is highest.

        With probability `floor` the arm is drawn uniformly instead, so every arm
        is picked with probability at least floor / len(group). Ties (tiny priors
        can sample exact zeros) are broken uniformly, not by position.
        """
        if rng.random() < floor:
            return int(rng.integers(len(self)))
        a0, b0 = prior
        theta = rng.beta(self.hit_in + a0, self.miss_in + b0)
        best = np.flatnonzero(theta == theta.max())
        return int(best[0]) if len(best) == 1 else int(best[rng.integers(len(best))])

    # -- persistence -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {f: [float(x) for x in row] for f, row in zip(_FIELDS, self.counts)}

    def load_json(self, obj: Any) -> None:
        """Restore counts saved by `to_json`; validates them (states may come from elsewhere)."""
        if not isinstance(obj, dict) or set(obj) != set(_FIELDS):
            raise ValueError(f"{self.name}: expected the fields {', '.join(_FIELDS)}")
        counts = np.zeros_like(self.counts)
        for row, f in enumerate(_FIELDS):
            values = obj[f]
            if not isinstance(values, list) or len(values) != len(self):
                raise ValueError(f"{self.name}.{f}: expected a list of {len(self)} numbers")
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                raise ValueError(f"{self.name}.{f}: expected numbers")
            arr = np.array(values, dtype=float)
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ValueError(f"{self.name}.{f}: counts must be finite and non-negative")
            counts[row] = arr
        self.counts = counts
