"""The scheduler that biases the generator's choices toward tests that reach new coverage."""

from nnsmith_cov.feedback.scheduler import BanditParams, Proposal, Scheduler, reward_of

__all__ = ["BanditParams", "Proposal", "Scheduler", "reward_of"]
