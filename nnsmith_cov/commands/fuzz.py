"""`nnsmith-cov fuzz`: a coverage-guided differential fuzzing campaign, new or resumed; the
status screen (or plain status lines in a log) while it runs, a summary at the end."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nnsmith_cov import __version__
from nnsmith_cov.commands.events import print_event
from nnsmith_cov.commands.generate import gen_config
from nnsmith_cov.flags import CliError, add_flags


def add_parser(sub: Any) -> None:
    p = sub.add_parser("fuzz", help="coverage-guided differential fuzzing campaign")
    add_flags(p, "fuzz")


def main(args: argparse.Namespace) -> int:
    import math
    from contextlib import nullcontext

    from rich.live import Live

    from nnsmith_cov.backends.registry import roundtrips
    from nnsmith_cov.campaign.cluster import ClusterError, shutdown, worker_kind
    from nnsmith_cov.campaign.fuzz_config import FuzzConfig
    from nnsmith_cov.campaign.fuzz_loop import Fuzzer
    from nnsmith_cov.campaign.run_dir import RunDir, RunDirError
    from nnsmith_cov.campaign.status import Ticker, log_console, log_line, screen, summary
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import WorkerStartError, recycling
    from nnsmith_cov.cli_checks import check_new_campaign, check_resume_flags, make_folder, restore_fuzz_args
    from nnsmith_cov.corpus.records import CorpusError

    resume = args.resume is not None
    if resume:
        check_resume_flags(args.argv)
        restore_fuzz_args(args)
    else:
        check_new_campaign(args.output, "-o")
    if args.time is None and args.tests is None:
        raise CliError("say when to stop: --time (e.g. 10m) and/or --tests N")
    if args.generator == "tzer" and list(args.backends) != ["tvm"]:
        raise CliError("--generator tzer tests TVM's TIR: use --backends tvm")
    collector = "" if args.collector == "none" else args.collector
    feedback = (args.feedback or ("on" if collector else "off")) == "on"
    if feedback and not collector:
        raise CliError("--feedback on needs a coverage collector (--collector python, llvm or binary)")
    if args.mutation == "on" and not feedback:
        raise CliError("--mutation on needs feedback (--feedback on)")
    cfg = gen_config(args, feedback)
    settings = CaseSettings(
        backends=args.backends,
        rtol=args.rtol,
        atol=args.atol,
        half_rtol=args.half_rtol,
        half_atol=args.half_atol,
        timeout_s=args.timeout_s,
        search={"method": args.search, "max_iters": 256, "budget_ms": 5000},
        localize=not args.no_localize,
    )
    run = RunDir(args.output)
    try:  # local processes, or Ray actors (the cluster joined here, before anything is written)
        handle_kind, workers = worker_kind(args.cluster, args.workers)
    except ClusterError as e:
        raise CliError(str(e)) from None
    make_folder(args.output, "--resume" if resume else "-o")  # the last check: nothing was written before
    console = log_console(stderr=True)  # in a log: no 80-column wrapping
    mem = args.worker_mem_mb or 0
    worker = handle_kind(
        args.backends, run.worker_log(0), collector=collector, cov_targets=args.cov_targets, mem_limit_mb=mem
    )
    recycling(worker, args.recycle_after, args.worker_max_rss_mb)
    try:
        with console.status("starting the worker (importing the backends)"):
            hello = worker.start()
        missing = {b: why for b, why in hello["unavailable"].items() if b in args.backends}
        if missing:
            raise CliError("; ".join(f"backend {b} is unavailable: {why}" for b, why in missing.items()))
        crashes = []
        if not args.no_support and args.generator != "tzer":  # from the cache; on resume, the campaign's own ops
            cfg.ops, crashes = _supported_ops(args, worker, cfg.ops, console)
        fuzz_cfg = FuzzConfig(
            cfg,
            settings,
            seed=args.seed,
            time_s=args.time,
            max_tests=args.tests,
            feedback=feedback,
            collector=collector,
            cov_targets=args.cov_targets,
            pass_filters=args.pass_filter,
            generator=args.generator,
            dynamic_arm=feedback and args.dynamic is None,
            roundtrip_arm=feedback and args.roundtrip is None and any(map(roundtrips, args.backends)),
            mutation=feedback and args.mutation != "off",
        )
        kind = _tzer_fuzzer() if args.generator == "tzer" else Fuzzer  # Tzer's tests are TIR functions
        fuzzer = kind(fuzz_cfg, run, worker, lambda ev: print_event(console, ev), corpus=True)
        fuzzer.ledger.max_corpus_bytes = args.max_corpus_mb << 20  # the disk budget (corpus/budget.py)
        if not args.no_support:  # refusals learned go back to the probe's cache for the next campaign
            from nnsmith_cov.campaign.op_support import default_cache_dir

            fuzzer.support.remember_in(args.support_cache or default_cache_dir(), hello["versions"])
        with console.status("measuring the branch universe" if collector else "starting"):
            repaired = fuzzer.start(resume=resume)
        for line in repaired:  # the files beside the corpus, brought back in line with it
            console.print(f"[dim]resume: {line}[/]")
        if not resume and crashes:  # the probe's crashes are findings: the first tests file them
            graphs = [(f"{c.backend}:{c.op}[{c.sig_key}]", c.graph()) for c in crashes]
            fuzzer.queue_probes([(label, g) for label, g in graphs if g is not None])
            console.print(f"{len(graphs)} crashes of the op-support probe are run first, to be filed as findings")
    except (WorkerStartError, RunDirError, CorpusError) as e:
        worker.close()
        shutdown()
        raise CliError(str(e)) from None
    import threading

    more = [
        handle_kind(
            args.backends, run.worker_log(i), collector=collector, cov_targets=args.cov_targets, mem_limit_mb=mem
        )
        for i in range(1, workers)
    ]
    for w in more:
        recycling(w, args.recycle_after, args.worker_max_rss_mb)
    stop = threading.Event()
    failure: list[BaseException] = []

    # The main thread waits on this event, never in driver.join(): a signal's KeyboardInterrupt
    # raised inside Thread.join marks a live thread as stopped (CPython 3.11), and the workers
    # would then be closed under the test still in flight.
    finished = threading.Event()

    def drive() -> None:
        try:
            fuzzer.run_workers(more, lambda: None, stop)
        except BaseException as e:
            failure.append(e)
        finally:
            finished.set()

    interrupted = False
    last_stats = 0.0
    _terminate_as_interrupt()
    driver = threading.Thread(target=drive, daemon=True)
    # On a terminal the status screen, redrawn twice a second; in a log, a plain line every
    # --status-every seconds of campaign time and one at the end.
    live_screen = console.is_interactive
    ticker = Ticker(args.status_every, fuzzer.stats.elapsed())
    title = f"nnsmith-cov {__version__} · {args.output} · {','.join(args.backends)} · {collector or 'no collector'}"
    arms: dict | None = None
    arms_at = -math.inf

    def view(final: bool) -> tuple[float, dict | None]:
        """Campaign time and the scheduler's top arms (held lock; the summary samples the
        posterior for ~25 ms, so it is refreshed every few seconds and at the end, not at
        every redraw)."""
        nonlocal arms, arms_at
        now = fuzzer.stats.elapsed()
        if feedback and fuzzer.scheduler is not None and (final or now - arms_at >= 5):
            arms, arms_at = fuzzer.scheduler.summary(), now
        return now, arms

    def render(final: bool = False):
        with fuzzer.lock:
            now, top = view(final)
            return screen(fuzzer.stats, now=now, limit_s=args.time, max_tests=args.tests, arms=top, title=title)

    def log(final: bool = False) -> None:
        with fuzzer.lock:
            now, top = view(final)
            line = log_line(fuzzer.stats, now=now, arms=top)
        console.out(line, highlight=False)

    try:
        with Live(render(), console=console, refresh_per_second=2) if live_screen else nullcontext() as live:
            driver.start()
            while not finished.is_set():
                finished.wait(timeout=0.5 if live_screen else min(0.5, ticker.wait_s(fuzzer.stats.elapsed())))
                if live is not None:
                    live.update(render(final=finished.is_set()))
                elif not finished.is_set() and ticker.due(fuzzer.stats.elapsed()):
                    log()  # (not when the campaign just ended: the final line follows)
                if fuzzer.stats.elapsed() - last_stats >= 5:
                    if not _stats_written(fuzzer, failure):
                        stop.set()  # the disk is full or gone: the campaign cannot go on
                    last_stats = fuzzer.stats.elapsed()
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        while not finished.is_set():  # the tests in flight finish and are committed
            try:
                finished.wait()
            except KeyboardInterrupt:  # a second signal: still let them finish (at most --timeout-s)
                pass
    finally:
        if not live_screen and not failure:
            log(final=True)
        _stats_written(fuzzer, failure)
        fuzzer.close()
        for w in (worker, *more):
            w.close()
        shutdown()
    if failure and isinstance(failure[0], WorkerStartError):
        raise CliError(str(failure[0]))
    if failure:
        from nnsmith_cov.campaign.internal import BreakerTripped

        if isinstance(failure[0], BreakerTripped):
            print(f"nnsmith-cov: {failure[0]}", file=sys.stderr)
            return 3
        if isinstance(failure[0], CorpusError | OSError):  # the corpus or the disk failed: committed tests are kept
            raise CliError(f"campaign stopped: {failure[0]}") from None
        raise failure[0]
    log_console().print(summary(fuzzer.stats))
    print(f"campaign folder: {args.output}  (findings in {args.output / 'findings'}; resume with --resume)")
    return 130 if interrupted else 0


def _tzer_fuzzer() -> Any:
    """The Fuzzer that steps through Tzer's loop (imported only for `--generator tzer`)."""
    from nnsmith_cov.tzer.loop import TzerFuzzer

    return TzerFuzzer


def _stats_written(fuzzer, failure: list[BaseException]) -> bool:
    """Rewrite stats.json; an OSError (a full disk) is the campaign's failure, not a traceback."""
    try:
        fuzzer.write_stats()
        return True
    except OSError as e:
        if not failure:
            failure.append(e)
        return False


def _supported_ops(args: argparse.Namespace, worker, ops, console) -> tuple[list, list]:
    """The ops narrowed to what every backend accepts (refusals out), and the probe's crashes."""
    from nnsmith_cov.campaign.op_support import (
        SupportError,
        default_cache_dir,
        load_or_probe,
        probe_crashes,
        restrict_ops,
    )

    cache = args.support_cache or default_cache_dir()
    with console.status("probing operator support (once per backend version)") as status:
        try:
            tables = load_or_probe(
                worker, args.backends, ops, cache, args.timeout_s, progress=lambda m: status.update(m)
            )
            return restrict_ops(ops, tables.values()), probe_crashes(tables, ops)
        except SupportError as e:
            raise CliError(str(e)) from None


def _terminate_as_interrupt() -> None:
    """SIGTERM (a scheduler's or `timeout`'s stop) ends a campaign as Ctrl-C does: the test in
    flight is finished or dropped, stats written, the corpus closed and resumable."""
    import signal
    import threading

    def interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
        signal.signal(signal.SIGTERM, interrupt)
