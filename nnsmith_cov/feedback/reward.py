"""A test's reward that keeps ranking tests when most of them add something.

`reward_of` (1 for any new branch) is right while interesting tests are rare and says nothing
once nearly every test adds a block (ORT's binary collector: 1,332 of the first 1,387). Here a
test first gets a *score*, then its *rank* among the scores of the last `window` tests:

- score, per map part (a composite collector's parts are averaged, so that one part's many
  blocks cannot drown another's arcs): log2(1 + new branches) + BUCKET_WEIGHT * log2(1 + new
  buckets) + RARE_WEIGHT * log2(1 + rare branches). The logarithm makes 40 new branches worth
  about 5 single ones, not 40: early windfalls come from whatever a test holds. A new bucket
  of a known branch weighs a quarter of a new branch (15 new buckets ~ one new branch). Rare
  branches (reached by at most two corpus entries so far) are known but seldom reached: a test
  that reaches them is near the frontier, worth a little even without anything new.
- reward = (tests in the window scoring less + half of those scoring the same + 1) / (window
  size + 1), 0 for a score of 0. With few interesting tests (most scores 0) any new branch
  ranks near 1, as before; when most tests add something, a test is worth how it compares
  with its neighbours in time, which keeps the Beta posteriors informative. The rank adapts as
  coverage saturates (no constant to tune per compiler).

Pass-only branches are not weighed apart: `Novelty` does not split them (a later change of the
map could), and the rarity weight already favours the compiler's less-travelled code.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable

from nnsmith_cov.coverage.covmap import Novelty

BUCKET_WEIGHT = 0.25
RARE_WEIGHT = 0.1


def novelty_score(novelty: Novelty | None, rare: int = 0) -> float:
    """How much a test added, on a log scale (0: nothing, or no coverage result)."""
    if novelty is None:
        return 0.0
    parts = novelty.parts or ((novelty.new_branches, novelty.new_buckets),)
    added = sum(math.log2(1 + b) + BUCKET_WEIGHT * math.log2(1 + k) for b, k in parts) / len(parts)
    # rare known branches count only beside something new: they are reached again and again
    return added + RARE_WEIGHT * math.log2(1 + rare) if added > 0 else 0.0


class RecentRanks:
    """The scores of the last `window` tests, and a new score's rank among them."""

    def __init__(self, window: int, scores: Iterable[float] = ()) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self.recent: deque[float] = deque(scores, maxlen=window)

    def reward(self, score: float) -> float:
        """The rank of `score` in [0, 1] (see the module docstring), then remember it."""
        reward = 0.0
        if score > 0:
            ordered = sorted(self.recent)
            below = bisect.bisect_left(ordered, score)
            same = bisect.bisect_right(ordered, score) - below
            reward = (below + 0.5 * same + 1.0) / (len(ordered) + 1.0)
        self.recent.append(score)
        return reward
