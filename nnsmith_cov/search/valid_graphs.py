"""Generated graphs for which the value search found values: what the benchmarks measure on."""

from __future__ import annotations

from collections.abc import Iterator

from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.search_result import SearchResult
from nnsmith_cov.search.gradient import search_values


def valid_graphs(cfg: GenConfig, seed: int) -> Iterator[tuple[int, GraphIR, SearchResult]]:
    """(seed, graph, search) for seeds seed+1, seed+2, ..., skipping graphs that could not be
    generated or given NaN/Inf-free values; endless: take as many as needed."""
    s = seed
    while True:
        s += 1
        try:
            graph = generate(cfg, s).graph
        except GenerationError:
            continue
        search = search_values(graph, s)
        if search.ok:
            yield s, graph, search
