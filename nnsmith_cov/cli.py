"""The `nnsmith-cov` command."""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from nnsmith_cov import __version__
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.materialize.onnx_export import ExportError
from nnsmith_cov.ops import ALL_OPS, select_ops
from nnsmith_cov.search.gradient import METHODS


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + traceback
        raise CliError(message)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2^63): {value}")
    return value


def _add_gen_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=_positive, default=10, help="operators per graph (default 10)")
    p.add_argument("--no-binning", action="store_true", help="turn attribute binning off")
    p.add_argument("--ops", nargs="+", metavar="OP", help="only these operators (default: all)")
    p.add_argument("--max-elems", type=_positive, default=1 << 16, help="element cap per tensor (default 65536)")
    p.add_argument("--timeout-ms", type=_positive, default=5000, help="Z3 budget per graph (default 5000)")


def _gen_config(args: argparse.Namespace) -> GenConfig:
    try:
        ops = select_ops(args.ops)
    except ValueError as e:
        raise CliError(str(e)) from None
    return GenConfig(
        nodes=args.nodes, ops=ops, binning=not args.no_binning, max_elems=args.max_elems, timeout_ms=args.timeout_ms
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nnsmith-cov", description="Coverage-guided fuzzing of deep-learning compilers.")
    parser.add_argument("--version", action="version", version=f"nnsmith-cov {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="generate one model: model.onnx, graph.json, graph.txt")
    g.add_argument("--seed", type=_seed, required=True)
    g.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    _add_gen_flags(g)
    g.add_argument(
        "--search",
        choices=METHODS,
        default="gradient",
        help="how inputs and weights are found (default gradient; none = one random draw)",
    )
    # Iterations, not time, bound the search by default, so the same seed gives
    # the same values on any machine; the time budget is a safety net.
    g.add_argument("--search-iters", type=_positive, default=256, help="value search iterations (default 256)")
    g.add_argument("--search-budget-ms", type=_positive, default=5000, help="value search time cap (default 5000)")
    g.add_argument("--no-proxy", action="store_true", help="gradient search without proxy derivatives")

    b = sub.add_parser("batch", help="generate, search values for, check and export many models; print a summary")
    b.add_argument("--count", type=_positive, default=100, help="models to generate (default 100)")
    b.add_argument("--seed", type=_seed, default=0, help="first seed; model k uses seed+k")
    b.add_argument("-o", "--output", type=Path, help="write each model to OUTPUT/<seed>/")
    _add_gen_flags(b)

    sub.add_parser("ops", help="list the operator specs")
    return parser


def cmd_generate(args: argparse.Namespace) -> int:
    from nnsmith_cov.materialize.model_dir import materialize_and_export, write_model_dir
    from nnsmith_cov.search.gradient import search_values

    cfg = _gen_config(args)
    try:
        gen = generate(cfg, args.seed)
    except GenerationError as e:
        raise CliError(f"seed {args.seed}: {e}") from None
    search = search_values(
        gen.graph,
        args.seed,
        args.search,
        budget_ms=args.search_budget_ms,
        proxy=not args.no_proxy,
        max_iters=args.search_iters,
    )
    exported = None
    try:
        exported = materialize_and_export(gen.graph, search.values)
    except ExportError as e:
        print(f"exporter failed (a finding about the exporter): {e}", file=sys.stderr)
    try:
        files = write_model_dir(args.output, gen, exported, search)
    except OSError as e:
        raise CliError(f"cannot write {args.output}: {e.strerror}") from None
    print(gen.graph.text(), end="")
    if not search.ok:
        print(
            f"value search ({args.search}) found no NaN/Inf-free values in {search.elapsed_ms:.0f} ms: "
            f"{search.failed_op} still produces NaN/Inf; no oracle written",
            file=sys.stderr,
        )
    print(f"wrote {', '.join(str(f) for f in files)}")
    return 0 if exported is not None and search.ok else 1


def cmd_batch(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from nnsmith_cov.materialize.model_dir import materialize_and_export, write_model_dir
    from nnsmith_cov.materialize.validate import check_agreement
    from nnsmith_cov.search.gradient import search_values

    cfg = _gen_config(args)
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
                write_model_dir(args.output / str(seed), gen, exported, search)
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


def cmd_ops(args: argparse.Namespace) -> int:
    for op in ALL_OPS:
        dtypes = sorted({d.value for s in op.sigs for d in s[0]})
        mark = "  [vulnerable]" if op.vulnerable else ""
        print(f"{op.name():<20} arity {op.arity()}  in {','.join(dtypes)}{mark}")
    print(f"{len(ALL_OPS)} operators")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        return {"generate": cmd_generate, "batch": cmd_batch, "ops": cmd_ops}[args.command](args)
    except CliError as e:
        print(f"nnsmith-cov: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nnsmith-cov: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
