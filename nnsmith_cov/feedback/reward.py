"""A test's reward that keeps ranking tests when most of them add something.

`reward_of` (1 for any new branch) is right while interesting tests are rare and says nothing
once nearly every test adds a block (ORT's binary collector: 1,332 of the first 1,387). Here a
test first gets a *score*, then its *rank* among the scores of the last `window` tests:

- score, per map part (a composite collector's parts are averaged, so that one part's many
  blocks cannot drown another's arcs): log2(1 + new branches) + RARE_WEIGHT * log2(1 + rare
  branches). The logarithm makes 40 new branches worth about 5 single ones, not 40: early
  windfalls come from whatever a test holds. Rare branches (reached by at most two corpus
  entries so far) are known but seldom reached: beside a new branch, a test that reaches them
  is nearer the frontier. New hit-count buckets of known branches score nothing. They still
  put a test in the corpus (AFL's rule), but they are not what a campaign is measured by, and
  on native code they are what almost every test adds: on ORT's binary collector, after the
  first 5 minutes of a 15-minute campaign, 82% of the tests kept (2,647 of 3,216 under feedback,
  2,228 of 2,800 without) added buckets and no block (`docs/bench-feedback-ort-15min-2seeds`).
  When a bucket weighed a quarter of a branch, 15 new buckets (a tensor a little larger than
  before runs its loops more often) counted as one new block, and those tests' ranks carried
  the bandit's evidence: the arms learnt which choices change loop counts, not which reach code.
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

RARE_WEIGHT = 0.1


def novelty_score(novelty: Novelty | None, rare: int = 0) -> float:
    """How many branches a test added, on a log scale (0: none, or no coverage result)."""
    if novelty is None:
        return 0.0
    parts = novelty.parts or ((novelty.new_branches, novelty.new_buckets),)
    added = sum(math.log2(1 + b) for b, _ in parts) / len(parts)
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
