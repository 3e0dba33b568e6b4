"""`nnsmith-cov batch`: generate, search values for, check and export many models; a summary."""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from typing import Any

from nnsmith_cov.commands.generate import gen_config
from nnsmith_cov.flags import CliError, add_flags


def add_parser(sub: Any) -> None:
    p = sub.add_parser("batch", help="generate, search values for, check and export many models; print a summary")
    add_flags(p, "batch")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from nnsmith_cov.gen.generator import GenerationError, generate
    from nnsmith_cov.materialize.model_dir import materialize_and_export, write_model_dir
    from nnsmith_cov.materialize.onnx_export import ExportError
    from nnsmith_cov.materialize.validate import check_agreement
    from nnsmith_cov.search.gradient import search_values

    cfg = gen_config(args)
    if args.output is not None:
        from nnsmith_cov.cli_checks import check_batch_folder

        check_batch_folder(args.output, range(args.seed, args.seed + args.count), args.force)
    console = Console()
    counts: collections.Counter[str] = collections.Counter()
    ops: collections.Counter[str] = collections.Counter()
    gen_ms, search_ms, total_ms = [], [], []
    with console.status("generating") as status:
        for k in range(args.count):
            seed = args.seed + k
            status.update(f"model {k + 1}/{args.count} (seed {seed})")
            t0 = time.perf_counter()
            try:
                gen = generate(cfg, seed)
            except GenerationError:
                counts["generation failed"] += 1
                continue
            gen_ms.append(gen.record.gen_ms)
            ops.update(gen.graph.op_counts())
            search = search_values(gen.graph, seed, max_iters=256, budget_ms=5000)
            search_ms.append(search.elapsed_ms)
            counts["values found" if search.ok else "no NaN/Inf-free values"] += 1
            try:
                exported = materialize_and_export(gen.graph, search.values)
            except ExportError:
                counts["exporter failed"] += 1
                continue
            total_ms.append((time.perf_counter() - t0) * 1000)
            agreement = check_agreement(gen.graph, search.values)
            counts["valid" if agreement.ok else "type disagreement"] += 1
            if args.output is not None:
                try:
                    write_model_dir(args.output / str(seed), gen, exported, search)
                except OSError as e:
                    raise CliError(f"cannot write {args.output / str(seed)}: {e.strerror or e}") from None
    table = Table(title=f"{args.count} models, {args.nodes} nodes, seeds {args.seed}..{args.seed + args.count - 1}")
    table.add_column("outcome")
    table.add_column("models", justify="right")
    keys = ("valid", "type disagreement", "exporter failed", "generation failed")
    for key in (*keys, "values found", "no NaN/Inf-free values"):
        table.add_row(key, str(counts[key]))
    console.print(table)
    for label, xs in (("generation", gen_ms), ("value search", search_ms), ("generate + search + export", total_ms)):
        if xs:
            console.print(f"{label}: median {statistics.median(xs):.1f} ms")
    console.print("most used ops: " + ", ".join(f"{n} {c}" for n, c in ops.most_common(12)))
    if args.output is not None:
        console.print(f"models in {args.output}/")
    return 0 if counts["type disagreement"] == 0 else 1
