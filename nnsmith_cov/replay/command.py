"""The `nnsmith-cov replay` command: its flags, its progress display and its summary."""

from __future__ import annotations

import argparse
from typing import Any

from nnsmith_cov.cli_checks import check_new_campaign, make_folder
from nnsmith_cov.commands.events import print_event
from nnsmith_cov.flags import CliError, add_flags


def add_parser(sub: Any) -> None:
    """Register `replay` on the CLI's subcommand set."""
    p = sub.add_parser(
        "replay",
        help="re-run corpora, bug bundles or ONNX models under a collector into a new campaign corpus",
    )
    add_flags(p, "replay")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from nnsmith_cov.campaign.run_dir import RunDir, RunDirError
    from nnsmith_cov.campaign.status import summary
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.corpus.records import CorpusError
    from nnsmith_cov.replay.engine import Replayer, ReplayError, default_clock, plan, replay_config
    from nnsmith_cov.replay.sources import SourceError, open_sources

    if args.collector == "none":
        raise CliError("a replay measures coverage: --collector python, llvm, binary, python+binary or module:Class")
    check_new_campaign(args.output, "-o")
    for src in args.sources:
        if src.resolve() == args.output.resolve():
            raise CliError(f"{src}: a replay cannot write into its own source")
    console = Console(stderr=True)
    try:
        sources = open_sources(args.sources, args.sym_dim)
    except SourceError as e:
        raise CliError(str(e)) from None
    try:
        clock = args.clock or default_clock(sources)
        try:
            planned = plan(sources, clock)
        except ReplayError as e:
            raise CliError(str(e)) from None
        first = next((s.config for s in sources if s.config), None) or {}
        settings = CaseSettings(
            backends=args.backends,
            timeout_s=args.timeout_s,
            search=first.get("search") or CaseSettings([]).search,
            localize=not args.no_localize,
        )
        config = replay_config(sources, settings, args.seed, args.collector, args.cov_targets, args.pass_filter, clock)
        run = RunDir(args.output)
        make_folder(args.output, "-o")  # after every check: a refused replay writes nothing
        from nnsmith_cov.campaign.worker_handle import WorkerHandle

        collector, share = args.collector, args.calibration_share
        worker = WorkerHandle(
            args.backends, run.worker_log(0), collector=collector, cov_targets=args.cov_targets, calibration_share=share
        )
        replayer = Replayer(settings, run, worker, lambda ev: _print_event(console, ev), seed=args.seed)
        replayer.stats.calibration_share = share  # (stats.json; a replay always has a collector)
        try:
            with console.status("starting the worker and measuring the branch universe"):
                replayer.start(config)
        except (WorkerStartError, RunDirError, CorpusError, ReplayError) as e:
            worker.close()
            replayer.close()
            raise CliError(str(e)) from None
        interrupted = False
        columns = (
            TextColumn("replay"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[line]}"),
        )
        try:
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("replay", total=len(planned), line="")
                for k, p in enumerate(planned):
                    replayer.replay(p, last=k == len(planned) - 1)
                    progress.update(task, advance=1, line=_line(replayer))
                    if k % 20 == 19:
                        replayer.write_stats()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            replayer.write_stats()
            replayer.close()
            worker.close()
    finally:
        for s in sources:
            s.close()
    from rich.console import Console as Out

    Out().print(summary(replayer.stats))
    s = replayer.summary()
    print(
        f"replayed {s['replayed']} of {s['items']} inputs ({clock} clock); "
        f"{s['broken']} broken, {s['rejected']} refused by a backend at import"
        + ("  (listed in replay-errors.jsonl)" if s["broken"] or s["rejected"] else "")
    )
    print(f"campaign folder: {args.output}")
    if interrupted:
        return 130
    return 0 if s["replayed"] or not s["items"] else 1


def _line(replayer: Any) -> str:
    st = replayer.stats
    found = sum(st.findings.values())
    return (
        f"branches {st.branches} (pass-only {st.pass_branches})  corpus {st.corpus}  "
        f"findings {found}  broken {replayer.broken}  restarts {st.restarts}"
    )


def _print_event(console: Any, event: tuple[str, Any, Any]) -> None:
    kind, what, detail = event
    if kind == "broken":
        console.print(f"[yellow]broken[/] {what}: {detail}")
    elif kind == "rejected":
        console.print(f"[yellow]refused[/] by {detail['backend']} at import: {what}")
    else:
        print_event(console, event)
