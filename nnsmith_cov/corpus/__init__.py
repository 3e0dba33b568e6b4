"""The campaign corpus: kept tests, their coverage and the campaign's state, in one LMDB environment."""

from nnsmith_cov.corpus.records import (
    CORPUS_SCHEMA,
    CorpusError,
    Counters,
    TestEntry,
    TestRecord,
    TimelineRow,
)
from nnsmith_cov.corpus.store import DEFAULT_MAP_SIZE, CorpusStore
from nnsmith_cov.corpus.view import CorpusMeta, CorpusView

__all__ = [
    "CORPUS_SCHEMA",
    "DEFAULT_MAP_SIZE",
    "Counters",
    "CorpusError",
    "CorpusMeta",
    "CorpusStore",
    "CorpusView",
    "TestEntry",
    "TestRecord",
    "TimelineRow",
]
