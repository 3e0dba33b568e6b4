"""`nnsmith-cov generate`: one model, its values and oracle, into a folder."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nnsmith_cov.flags import CliError, add_flags
from nnsmith_cov.gen.generator import GenConfig

# With feedback, what the scheduler may choose among when the user says nothing.
FEEDBACK_OPSETS = tuple(range(11, 21))


def add_parser(sub: Any) -> None:
    p = sub.add_parser("generate", help="generate one model: model.onnx, graph.json, graph.txt")
    add_flags(p, "generate")


def gen_config(args: argparse.Namespace, feedback: bool = False) -> GenConfig:
    """The generator settings the flags name (those of generate, batch and fuzz)."""
    from nnsmith_cov.ops import select_ops

    try:
        ops = select_ops(args.ops)
    except ValueError as e:
        raise CliError(str(e)) from None
    return GenConfig(
        nodes=args.nodes,
        ops=ops,
        binning=not args.no_binning,
        max_elems=args.max_elems,
        timeout_ms=args.timeout_ms,
        work_budget=args.solver_work,
        opsets=args.opsets or (FEEDBACK_OPSETS if feedback else GenConfig.opsets),
        dynamic_prob=args.dynamic or 0.0,
        roundtrip_prob=args.roundtrip or 0.0,
    )


def main(args: argparse.Namespace) -> int:
    from nnsmith_cov.cli_checks import check_model_folder
    from nnsmith_cov.gen.generator import GenerationError, generate
    from nnsmith_cov.materialize.model_dir import materialize_and_export, write_model_dir
    from nnsmith_cov.materialize.onnx_export import ExportError
    from nnsmith_cov.search.gradient import search_values

    cfg = gen_config(args)
    check_model_folder(args.output, args.force)
    if args.backends:  # only what those backends implement, as a campaign draws
        from nnsmith_cov.campaign.op_support import SupportError, ops_for_backends

        try:
            cfg.ops = ops_for_backends(cfg.ops, args.backends, args.support_cache)
        except SupportError as e:
            raise CliError(str(e)) from None
    try:
        gen = generate(cfg, args.seed)
    except GenerationError as e:
        raise CliError(f"seed {args.seed}: {e}") from None
    if len(gen.graph.insts) < args.nodes:
        print(
            f"generated {len(gen.graph.insts)} of the {args.nodes} operators asked for (the solver's work budget "
            f"or the insertion tries ran out; see --solver-work)",
            file=sys.stderr,
        )
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
