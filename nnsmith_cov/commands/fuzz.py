"""`nnsmith-cov fuzz`: a coverage-guided differential fuzzing campaign, new or resumed; the
status screen (or plain status lines in a log) while it runs, a summary at the end."""

from __future__ import annotations

import argparse
import math
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nnsmith_cov import __version__
from nnsmith_cov.commands.events import print_event
from nnsmith_cov.commands.generate import gen_config
from nnsmith_cov.flags import CliError, add_flags

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from nnsmith_cov.campaign.fuzz_config import FuzzConfig
    from nnsmith_cov.campaign.fuzz_loop import Fuzzer
    from nnsmith_cov.campaign.run_dir import RunDir
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.gen.generator import GenConfig


def add_parser(sub: Any) -> None:
    p = sub.add_parser("fuzz", help="coverage-guided differential fuzzing campaign")
    add_flags(p, "fuzz")


@dataclass(frozen=True)
class _Plan:
    """What the checked flags decided, read by every later step."""

    resume: bool
    collector: str  # "" for --collector none
    feedback: bool


def main(args: argparse.Namespace) -> int:
    """Run one campaign from the parsed flags; its exit status (0, 130 after a signal, 3 when
    the breaker tripped). Bad flags and failures to start are CliErrors (one line)."""
    from nnsmith_cov.campaign.run_dir import RunDir
    from nnsmith_cov.campaign.status import log_console
    from nnsmith_cov.cli_checks import make_folder

    plan = _checked(args)
    cfg = gen_config(args, plan.feedback)
    settings = _case_settings(args)
    run = RunDir(args.output)
    handle_kind, workers = _worker_kind(args)  # a Ray cluster is joined here, before anything is written
    make_folder(args.output, "--resume" if plan.resume else "-o")  # the last check: nothing was written before
    console = log_console(stderr=True)  # in a log: no 80-column wrapping
    first = _new_worker(handle_kind, args, run, 0, plan.collector)
    fuzzer = _started_fuzzer(args, plan, cfg, settings, run, first, console)
    more = [_new_worker(handle_kind, args, run, i, plan.collector) for i in range(1, workers)]
    _generators(args, fuzzer, [first, *more], handle_kind, run, console)
    campaign = _Campaign(fuzzer, more, console, _StatusView(fuzzer, args, plan))
    try:
        interrupted = campaign.run(args.status_every)
    finally:
        closing = _close(fuzzer, [first, *more])
    if closing is not None and not campaign.failure:  # the last commits failed as the campaign closed
        campaign.failure.append(closing)
    return _finish(args, fuzzer, campaign.failure, interrupted)


def _checked(args: argparse.Namespace) -> _Plan:
    """Check the flags of a new campaign, or restore a resumed one's and check those given;
    CliError on a bad combination."""
    from nnsmith_cov.cli_checks import check_new_campaign, check_resume_flags, restore_fuzz_args

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
    if args.grow_max is not None and not feedback:
        raise CliError("--grow-max needs feedback (--feedback on): without it no test is grown")
    if args.hedge is not None and not feedback:
        raise CliError("--hedge needs feedback (--feedback on): without it every test is drawn uniformly")
    return _Plan(resume, collector, feedback)


def _case_settings(args: argparse.Namespace) -> CaseSettings:
    """How each test runs and is judged: backends, tolerances, timeout, value search."""
    from nnsmith_cov.campaign.testcase import CaseSettings

    return CaseSettings(
        backends=args.backends,
        rtol=args.rtol,
        atol=args.atol,
        half_rtol=args.half_rtol,
        half_atol=args.half_atol,
        timeout_s=args.timeout_s,
        search={"method": args.search, "max_iters": 256, "budget_ms": 5000},
        localize=not args.no_localize,
    )


def _worker_kind(args: argparse.Namespace) -> tuple[type, int]:
    """The worker handle class (local processes or Ray actors) and how many to start."""
    from nnsmith_cov.campaign.cluster import ClusterError, worker_kind

    try:
        return worker_kind(args.cluster, args.workers)
    except ClusterError as e:
        raise CliError(str(e)) from None


def _new_worker(handle_kind: type, args: argparse.Namespace, run: RunDir, index: int, collector: str) -> Any:
    """Worker `index`'s handle (not started yet), with its recycling points."""
    from nnsmith_cov.campaign.worker_handle import recycling

    worker = handle_kind(
        args.backends,
        run.worker_log(index),
        collector=collector,
        cov_targets=args.cov_targets,
        mem_limit_mb=args.worker_mem_mb or 0,
        calibration_share=args.calibration_share,
    )
    recycling(worker, args.recycle_after, args.worker_max_rss_mb)
    return worker


def _generators(
    args: argparse.Namespace, fuzzer: Fuzzer, workers: list, handle_kind: type, run: RunDir, console: Console
) -> None:
    """Give each local worker a generator process that makes its next test's graph ahead
    (`campaign.ahead`), where --gen-process says so; one that cannot start leaves its worker
    making its own graphs, as without one."""
    from nnsmith_cov.campaign.ahead import Generator, generators_fit
    from nnsmith_cov.campaign.fuzz_loop import Fuzzer
    from nnsmith_cov.campaign.worker_handle import WorkerHandle, WorkerStartError, recycling

    local = handle_kind is WorkerHandle and type(fuzzer) is Fuzzer  # not Ray actors, not Tzer's TIR tests
    if args.gen_process == "off" or not local or (args.gen_process == "auto" and not generators_fit(len(workers))):
        return
    for i, worker in enumerate(workers):
        generator = Generator(run.generator_log(i), args.backends, args.worker_mem_mb or 0)
        recycling(generator.handle, args.recycle_after, args.worker_max_rss_mb)  # as its worker, for Z3's memory
        try:
            fuzzer.generate_ahead(worker, generator)
        except WorkerStartError as e:
            console.print(f"[yellow]generator {i} did not start ({e}): worker {i} makes its own graphs[/]")


def _started_fuzzer(
    args: argparse.Namespace,
    plan: _Plan,
    cfg: GenConfig,
    settings: CaseSettings,
    run: RunDir,
    worker: Any,
    console: Console,
) -> Fuzzer:
    """Start the first worker, narrow the ops to what the backends accept, then build and start
    the Fuzzer. A worker, run-folder or corpus error closes the worker (and the cluster) and is
    a one-line error, as is a backend the worker cannot load."""
    from nnsmith_cov.campaign.cluster import shutdown
    from nnsmith_cov.campaign.fuzz_loop import Fuzzer
    from nnsmith_cov.campaign.run_dir import RunDirError
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.corpus.records import CorpusError

    try:
        hello = _hello(worker, args, console)
        crashes = []
        if not args.no_support and args.generator != "tzer":  # from the cache; on resume, the campaign's own ops
            cfg.ops, crashes = _supported_ops(args, worker, cfg.ops, console)
        fuzz_cfg = _fuzz_config(args, plan, cfg, settings)
        kind = _tzer_fuzzer() if args.generator == "tzer" else Fuzzer  # Tzer's tests are TIR functions
        fuzzer = kind(fuzz_cfg, run, worker, lambda ev: print_event(console, ev), corpus=True)
        fuzzer.ledger.max_corpus_bytes = args.max_corpus_mb << 20  # the disk budget (corpus/budget.py)
        fuzzer.run_limits.calibrate = args.coverage_timeout == "auto"
        fuzzer.stats.calibration_share = args.calibration_share if plan.collector else None  # (stats.json)
        if not args.no_support:  # refusals learned go back to the probe's cache for the next campaign
            from nnsmith_cov.campaign.op_support import default_cache_dir

            fuzzer.support.remember_in(args.support_cache or default_cache_dir(), hello["versions"])
        _start(fuzzer, plan, crashes, console)
        return fuzzer
    except (WorkerStartError, RunDirError, CorpusError, CliError) as e:  # (CliError: a backend unavailable)
        worker.close()
        shutdown()
        raise CliError(str(e)) from None


def _hello(worker: Any, args: argparse.Namespace, console: Console) -> dict:
    """Start the worker; its hello (backend versions, unavailable backends). A backend asked
    for but unavailable there is a one-line error."""
    with console.status("starting the worker (importing the backends)"):
        hello = worker.start()
    missing = {b: why for b, why in hello["unavailable"].items() if b in args.backends}
    if missing:
        raise CliError("; ".join(f"backend {b} is unavailable: {why}" for b, why in missing.items()))
    return hello


def _fuzz_config(args: argparse.Namespace, plan: _Plan, cfg: GenConfig, settings: CaseSettings) -> FuzzConfig:
    """The campaign's configuration: generator, test settings, stop conditions and feedback arms."""
    from nnsmith_cov.backends.registry import roundtrips
    from nnsmith_cov.campaign.fuzz_config import FuzzConfig
    from nnsmith_cov.feedback.params import BanditParams

    feedback = plan.feedback
    return FuzzConfig(
        cfg,
        settings,
        seed=args.seed,
        time_s=args.time,
        max_tests=args.tests,
        feedback=feedback,
        collector=plan.collector,
        cov_targets=args.cov_targets,
        pass_filters=args.pass_filter,
        generator=args.generator,
        dynamic_arm=feedback and args.dynamic is None,
        roundtrip_arm=feedback and args.roundtrip is None and any(map(roundtrips, args.backends)),
        mutation=feedback and args.mutation != "off",
        vary_size=not feedback and bool(args.vary_size),
        grow_max=args.grow_max or (),
        hedge=(BanditParams.hedge if args.hedge is None else args.hedge) if feedback else 0.0,  # 0: none drawn
    )


def _start(fuzzer: Fuzzer, plan: _Plan, crashes: list, console: Console) -> None:
    """Start the fuzzer on its run folder (new, or resumed and repaired), and queue the op-support
    probe's crashes of a new campaign to run first."""
    with console.status("measuring the branch universe" if plan.collector else "starting"):
        repaired = fuzzer.start(resume=plan.resume)
    for line in repaired:  # the files beside the corpus, brought back in line with it
        console.print(f"[dim]resume: {line}[/]")
    if not plan.resume and crashes:  # the probe's crashes are findings: the first tests file them
        graphs = [(f"{c.backend}:{c.op}[{c.sig_key}]", c.graph()) for c in crashes]
        fuzzer.queue_probes([(label, g) for label, g in graphs if g is not None])
        console.print(f"{len(graphs)} crashes of the op-support probe are run first, to be filed as findings")


class _StatusView:
    """The status screen and the log lines of a running campaign. The scheduler's top arms
    sample its posterior for ~25 ms under the fuzzer's lock, so they are refreshed every few
    seconds and at the end, not at every redraw."""

    def __init__(self, fuzzer: Fuzzer, args: argparse.Namespace, plan: _Plan) -> None:
        self.fuzzer = fuzzer
        self.feedback = plan.feedback
        self.limit_s, self.max_tests = args.time, args.tests
        backends = ",".join(args.backends)
        self.title = f"nnsmith-cov {__version__} · {args.output} · {backends} · {plan.collector or 'no collector'}"
        self.arms: dict | None = None
        self.arms_at = -math.inf

    def _now_and_arms(self, final: bool) -> tuple[float, dict | None]:
        """Campaign time and the top arms (the caller holds the fuzzer's lock)."""
        fuzzer = self.fuzzer
        now = fuzzer.stats.elapsed()
        if self.feedback and fuzzer.scheduler is not None and (final or now - self.arms_at >= 5):
            self.arms, self.arms_at = fuzzer.scheduler.summary(), now
        return now, self.arms

    def render(self, final: bool = False) -> RenderableType:
        """The status screen, for a terminal."""
        from nnsmith_cov.campaign.status import screen

        with self.fuzzer.lock:
            now, top = self._now_and_arms(final)
            return screen(
                self.fuzzer.stats, now=now, limit_s=self.limit_s, max_tests=self.max_tests, arms=top, title=self.title
            )

    def log(self, console: Console, final: bool = False) -> None:
        """One plain status line, for a log (printed outside the lock)."""
        from nnsmith_cov.campaign.status import log_line

        with self.fuzzer.lock:
            now, top = self._now_and_arms(final)
            line = log_line(self.fuzzer.stats, now=now, arms=top)
        console.out(line, highlight=False)


class _Campaign:
    """The running campaign: the fuzzer's loop over the workers on a second thread, while the
    main thread draws the status, rewrites stats.json and takes the signals."""

    def __init__(self, fuzzer: Fuzzer, more: list, console: Console, view: _StatusView) -> None:
        self.fuzzer, self.more, self.console, self.view = fuzzer, more, console, view
        self.stop = threading.Event()
        # The main thread waits on this event, never in driver.join(): a signal's KeyboardInterrupt
        # raised inside Thread.join marks a live thread as stopped (CPython 3.11), and the workers
        # would then be closed under the test still in flight.
        self.finished = threading.Event()
        self.failure: list[BaseException] = []  # what stopped the loop (the first only)

    def _drive(self) -> None:
        try:
            self.fuzzer.run_workers(self.more, lambda: None, self.stop)
        except BaseException as e:
            self.failure.append(e)
        finally:
            self.finished.set()

    def run(self, status_every: float) -> bool:
        """Run to the end (a stop condition, a failure or a signal); True after a signal.
        stats.json is written last, and in a log a final status line, unless the loop failed."""
        from contextlib import nullcontext

        from rich.live import Live

        from nnsmith_cov.campaign.status import Ticker

        _terminate_as_interrupt()
        driver = threading.Thread(target=self._drive, daemon=True)
        # On a terminal the status screen, redrawn twice a second; in a log, a plain line every
        # --status-every seconds of campaign time and one at the end.
        live_screen = self.console.is_interactive
        ticker = Ticker(status_every, self.fuzzer.stats.elapsed())
        try:
            with (
                Live(self.view.render(), console=self.console, refresh_per_second=2)
                if live_screen
                else nullcontext() as live
            ):
                driver.start()
                self._watch(live, ticker)
            return False
        except KeyboardInterrupt:
            self.stop.set()
            self._wait_in_flight()
            return True
        finally:
            if not live_screen and not self.failure:
                self.view.log(self.console, final=True)
            _stats_written(self.fuzzer, self.failure)

    def _watch(self, live: Any, ticker: Any) -> None:
        """Until the loop ends: redraw the screen or print the due log line, and rewrite
        stats.json every 5 s of campaign time."""
        fuzzer, finished = self.fuzzer, self.finished
        last_stats = 0.0
        while not finished.is_set():
            finished.wait(timeout=0.5 if live is not None else min(0.5, ticker.wait_s(fuzzer.stats.elapsed())))
            if live is not None:
                live.update(self.view.render(final=finished.is_set()))
            elif not finished.is_set() and ticker.due(fuzzer.stats.elapsed()):
                self.view.log(self.console)  # (not when the campaign just ended: the final line follows)
            if fuzzer.stats.elapsed() - last_stats >= 5:
                if not _stats_written(fuzzer, self.failure):
                    self.stop.set()  # the disk is full or gone: the campaign cannot go on
                last_stats = fuzzer.stats.elapsed()

    def _wait_in_flight(self) -> None:
        """After a signal: the tests in flight finish and are committed."""
        while not self.finished.is_set():
            try:
                self.finished.wait()
            except KeyboardInterrupt:  # a second signal: still let them finish (at most --timeout-s)
                pass


def _close(fuzzer: Fuzzer, workers: list) -> BaseException | None:
    """Close the fuzzer, every worker and the Ray instance joined (if any), whatever the
    fuzzer's close raises; returns that error when it is the corpus's, the disk's or the
    breaker's (the last tests' commits), for `_finish` to report."""
    from nnsmith_cov.campaign.cluster import shutdown
    from nnsmith_cov.campaign.internal import BreakerTripped
    from nnsmith_cov.corpus.records import CorpusError

    try:
        fuzzer.close()
    except (CorpusError, OSError, BreakerTripped) as e:
        return e
    finally:
        for w in workers:
            w.close()
        shutdown()
    return None


def _finish(args: argparse.Namespace, fuzzer: Fuzzer, failure: list[BaseException], interrupted: bool) -> int:
    """The summary and the exit status: 0, 130 after a signal, or the failure's (see _failed)."""
    from nnsmith_cov.campaign.status import log_console, summary

    if failure:
        return _failed(failure[0])
    log_console().print(summary(fuzzer.stats))
    print(f"campaign folder: {args.output}  (findings in {args.output / 'findings'}; resume with --resume)")
    return 130 if interrupted else 0


def _failed(error: BaseException) -> int:
    """What the loop's failure ends in: exit status 3 when the breaker tripped; a one-line error
    for a worker that could not start or a corpus/disk failure (committed tests are kept); any
    other error is raised again."""
    from nnsmith_cov.campaign.internal import BreakerTripped
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.corpus.records import CorpusError

    if isinstance(error, WorkerStartError):
        raise CliError(str(error))
    if isinstance(error, BreakerTripped):
        print(f"nnsmith-cov: {error}", file=sys.stderr)
        return 3
    if isinstance(error, CorpusError | OSError):
        raise CliError(f"campaign stopped: {error}") from None
    raise error


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
