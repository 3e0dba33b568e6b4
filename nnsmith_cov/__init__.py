"""nnsmith-cov: a coverage-guided fuzzer for deep-learning compilers."""

__version__ = "0.1.0"
