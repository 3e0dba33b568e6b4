"""The `nnsmith-cov` command."""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nnsmith_cov import __version__
from nnsmith_cov.cli_checks import MAX_NODES, nodes
from nnsmith_cov.gen.generator import GenConfig, GenerationError, generate
from nnsmith_cov.materialize.onnx_export import ExportError
from nnsmith_cov.ops import ALL_OPS, select_ops
from nnsmith_cov.replay import command as replay
from nnsmith_cov.report import command as report
from nnsmith_cov.search.gradient import METHODS


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + traceback
        raise CliError(message)


def _number(text: str, cast: type, ok: Callable[[Any], bool], rule: str) -> Any:
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {'an integer' if cast is int else 'a number'}: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{rule}: {text}")
    return value


def _positive(text: str) -> int:
    return _number(text, int, lambda v: v >= 1, "must be at least 1")


def _seed(text: str) -> int:
    return _number(text, int, lambda v: 0 <= v < 2**63, "seed must be in [0, 2^63)")


def _nonneg_float(text: str) -> float:
    return _number(text, float, lambda v: v >= 0, "must be a number >= 0")


def _share(text: str) -> float:
    return _number(text, float, lambda v: 0.0 <= v <= 1.0, "must be a number in [0, 1]")


def _opsets(text: str) -> list[int]:
    """ONNX opsets from "11-20", "13,17,20" or "20"."""
    from nnsmith_cov.abstract.op import MAX_OPSET, MIN_OPSET

    out: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an opset or a range of opsets: {part.strip()!r}") from None
        if not MIN_OPSET <= a <= b <= MAX_OPSET:
            raise argparse.ArgumentTypeError(f"opsets must lie within {MIN_OPSET}..{MAX_OPSET}: {part.strip()}")
        out += range(a, b + 1)
    return sorted(set(out))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    """Seconds from "90", "90s", "10m", "4h" or "1h30m"."""
    import re

    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    elif re.fullmatch(r"(\d+[smhd])+", text):
        seconds = sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", text))
    else:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 10m, 4h, 1h30m)")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive: {text!r}")
    return seconds


def _collector(text: str) -> str:
    from nnsmith_cov.coverage.collector import BUILTIN

    one = lambda n: n in BUILTIN or (n.count(":") == 1 and all(n.split(":")))
    if text == "none" or all(one(n) for n in text.split("+")):
        return text
    raise argparse.ArgumentTypeError(
        f"unknown collector {text!r} (python, llvm, binary, none, module:Class, or several joined by +)"
    )


def _backends(text: str) -> list[str]:
    from nnsmith_cov.backends.registry import check_spec

    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise argparse.ArgumentTypeError("no backend named")
    try:
        return [check_spec(s) for s in dict.fromkeys(specs)]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_gen_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=nodes, default=10, help=f"operators per graph (default 10, at most {MAX_NODES})")
    p.add_argument("--no-binning", action="store_true", help="turn attribute binning off")
    p.add_argument("--ops", nargs="+", metavar="OP", help="only these operators (default: all)")
    p.add_argument("--max-elems", type=_positive, default=1 << 16, help="element cap per tensor (default 65536)")
    p.add_argument(
        "--solver-work",
        type=_positive,
        default=GenConfig.work_budget,
        help=f"Z3 work units per graph, all checks together (default {GenConfig.work_budget})",
    )
    p.add_argument(
        "--timeout-ms",
        type=_positive,
        default=GenConfig.timeout_ms,
        help=f"wall-clock safety net per graph (default {GenConfig.timeout_ms})",
    )
    p.add_argument(
        "--opsets",
        type=_opsets,
        metavar="LIST",
        help="ONNX opsets to export at, e.g. 11-20 or 13,17,20 (default 20; fuzz with feedback: 11-20, "
        "weighed by the scheduler)",
    )
    p.add_argument(
        "--dynamic",
        type=_share,
        metavar="P",
        help="share of graphs exported with symbolic input dims (default 0; fuzz with feedback: "
        "the scheduler's choice)",
    )
    p.add_argument(
        "--roundtrip",
        type=_share,
        metavar="P",
        help="share of graphs that backends with a text form of their IR (tvm) compile from it printed "
        "and parsed back (default 0; fuzz with feedback: the scheduler's choice)",
    )


# With feedback, what the scheduler may choose among when the user says nothing.
FEEDBACK_OPSETS = tuple(range(11, 21))


def _gen_config(args: argparse.Namespace, feedback: bool = False) -> GenConfig:
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


def _binary_module(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--binary-module",
        metavar="PATTERN",
        help="binary collector: the shared object to follow (default: those the backends declare,"
        " ORT's onnxruntime_pybind11_state*.so, TVM's libtvm_compiler.so)",
    )


def _plugin_flag(p: argparse.ArgumentParser, names: str) -> None:
    p.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE:CLASS",
        help=f"trust a plug-in backend or collector {names} (a bundle or campaign folder is data: "
        "it never imports code the command line does not name)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nnsmith-cov", description="Coverage-guided fuzzing of deep-learning compilers.")
    parser.add_argument("--version", action="version", version=f"nnsmith-cov {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="generate one model: model.onnx, graph.json, graph.txt")
    g.add_argument("--seed", type=_seed, required=True)
    g.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    g.add_argument("--force", action="store_true", help="replace a model already in the output folder")
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
    b.add_argument("--force", action="store_true", help="replace models already in OUTPUT/<seed>/")
    _add_gen_flags(b)

    f = sub.add_parser("fuzz", help="coverage-guided differential fuzzing campaign")
    where = f.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "-o",
        "--corpus",
        "--output",
        dest="output",
        type=Path,
        help="new campaign folder (LMDB corpus, findings, stats)",
    )
    where.add_argument("--resume", type=Path, help="continue the campaign in this folder (its own settings)")
    _plugin_flag(f, "a campaign being resumed names")
    f.add_argument("--workers", type=_positive, default=1, help="worker processes testing in parallel (default 1)")
    f.add_argument(
        "--worker-mem-mb",
        type=_positive,
        default=None,
        help="address-space limit of each worker in MiB: a system under test exhausting it is an oom finding"
        " (default: none)",
    )
    f.add_argument(
        "--pass-filter", nargs="+", metavar="PATH", help="pass-only folders/files (default: the collector's)"
    )
    f.add_argument(
        "--feedback",
        choices=("on", "off"),
        help="coverage feedback steers the generator (default: on with a collector; off = plain NNSmith)",
    )
    f.add_argument(
        "--mutation",
        choices=("on", "off"),
        help="with feedback, tests grown from the corpus may mutate a kept test's choices (default on; "
        "off: kept tests are only grown)",
    )
    f.add_argument("--backends", type=_backends, default=["ort", "tvm"], help="comma list (default ort,tvm)")
    f.add_argument(
        "--generator",
        choices=("nnsmith", "graphfuzzer", "lemon"),
        default="nnsmith",
        help="test generator: nnsmith (default) or a baseline in the same harness (graphfuzzer, lemon)",
    )
    f.add_argument("--time", type=_duration, help="stop after this long (e.g. 10m, 4h)")
    f.add_argument("--tests", type=_positive, help="stop after this many test cases")
    f.add_argument(
        "--status-every",
        type=_duration,
        default=60.0,
        metavar="SECONDS",
        help="when not on a terminal: a plain status line this often, in seconds or e.g. 5m (default 60)",
    )
    f.add_argument("--seed", type=_seed, default=0, help="run seed; test k's seed derives from it (default 0)")
    _add_gen_flags(f)
    f.add_argument("--rtol", type=_nonneg_float, default=1e-2, help="relative tolerance (default 0.01)")
    f.add_argument("--atol", type=_nonneg_float, default=1e-3, help="absolute tolerance (default 0.001)")
    f.add_argument("--half-rtol", type=_nonneg_float, default=5e-2, help="rtol for float16 outputs (default 0.05)")
    f.add_argument("--half-atol", type=_nonneg_float, default=1e-2, help="atol for float16 outputs (default 0.01)")
    f.add_argument("--timeout-s", type=_duration, default=60.0, help="per worker request (default 60)")
    f.add_argument("--search", choices=METHODS, default="gradient", help="value search (default gradient)")
    f.add_argument("--no-localize", action="store_true", help="do not re-run failures at O0")
    f.add_argument("--support-cache", type=Path, help="op-support cache folder (default ~/.cache/nnsmith-cov)")
    f.add_argument("--no-support", action="store_true", help="do not probe op support; use every operator")
    f.add_argument(
        "--collector",
        type=_collector,
        default="python",
        help="coverage collector: python, llvm, binary, python+binary (TVM's Python and ORT's binary), none, "
        "or module:Class (default python)",
    )
    f.add_argument(
        "--cov-targets",
        type=lambda t: [s for s in t.split(",") if s],
        default=[],
        help="what the collector measures (default: tvm,torch.onnx for python; all instrumented libraries for llvm)",
    )
    _binary_module(f)

    c = sub.add_parser("coverage", help="run one model under a coverage collector and print JSON")
    c.add_argument("model_dir", type=Path, help="a folder from `generate` (graph.json, record.json) or a bundle")
    c.add_argument(
        "--collector", type=_collector, default="python", help="python, llvm, binary or python+binary (default python)"
    )
    c.add_argument(
        "--cov-targets",
        type=lambda t: [s for s in t.split(",") if s],
        default=[],
        help="what to measure, comma list: Python packages (python; default tvm,torch.onnx) "
        "or instrumented shared libraries (llvm; default all loaded)",
    )
    _binary_module(c)
    c.add_argument("--backends", type=_backends, default=["tvm"], help="comma list (default tvm)")
    c.add_argument("--pass-filter", nargs="+", metavar="PATH", help="pass-only folders/files (default per collector)")
    c.add_argument("--top", type=_positive, default=15, help="files in the top list (default 15)")
    c.add_argument("--timeout-s", type=_duration, default=300.0, help="per worker request (default 300)")
    r = sub.add_parser("repro", help="re-run a finding's bundle and say whether it reproduces")
    r.add_argument("bundle", type=Path)
    r.add_argument("--timeout-s", type=_duration, help="per request (default: the bundle's)")
    _plugin_flag(r, "the bundle names")

    sub.add_parser("ops", help="list the operator specs")
    report.add_parser(sub)
    replay.add_parser(sub)
    return parser


def cmd_generate(args: argparse.Namespace) -> int:
    from nnsmith_cov.cli_checks import check_model_folder
    from nnsmith_cov.materialize.model_dir import materialize_and_export, write_model_dir
    from nnsmith_cov.search.gradient import search_values

    cfg = _gen_config(args)
    check_model_folder(args.output, args.force)
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


def cmd_batch(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from nnsmith_cov.materialize.model_dir import materialize_and_export, write_model_dir
    from nnsmith_cov.materialize.validate import check_agreement
    from nnsmith_cov.search.gradient import search_values

    cfg = _gen_config(args)
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


def cmd_fuzz(args: argparse.Namespace) -> int:
    import math
    from contextlib import nullcontext

    from rich.live import Live

    from nnsmith_cov.backends.registry import roundtrips
    from nnsmith_cov.campaign.fuzz_loop import FuzzConfig, Fuzzer
    from nnsmith_cov.campaign.run_dir import RunDir, RunDirError
    from nnsmith_cov.campaign.status import Ticker, log_console, log_line, screen, summary
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import WorkerHandle, WorkerStartError
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
    collector = "" if args.collector == "none" else args.collector
    feedback = (args.feedback or ("on" if collector else "off")) == "on"
    if feedback and not collector:
        raise CliError("--feedback on needs a coverage collector (--collector python, llvm or binary)")
    if args.mutation == "on" and not feedback:
        raise CliError("--mutation on needs feedback (--feedback on)")
    cfg = _gen_config(args, feedback)
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
    make_folder(args.output, "--resume" if resume else "-o")  # the last check: nothing was written before
    console = log_console(stderr=True)  # in a log: no 80-column wrapping
    mem = args.worker_mem_mb or 0
    worker = WorkerHandle(
        args.backends, run.worker_log(0), collector=collector, cov_targets=args.cov_targets, mem_limit_mb=mem
    )
    try:
        with console.status("starting the worker (importing the backends)"):
            hello = worker.start()
        missing = {b: why for b, why in hello["unavailable"].items() if b in args.backends}
        if missing:
            raise CliError("; ".join(f"backend {b} is unavailable: {why}" for b, why in missing.items()))
        crashes = []
        if not args.no_support:  # from the cache; on resume, of the campaign's own ops
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
        fuzzer = Fuzzer(fuzz_cfg, run, worker, lambda ev: _print_event(console, ev), corpus=True)
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
        raise CliError(str(e)) from None
    import threading

    more = [
        WorkerHandle(
            args.backends, run.worker_log(i), collector=collector, cov_targets=args.cov_targets, mem_limit_mb=mem
        )
        for i in range(1, args.workers)
    ]
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


def _print_event(console, event) -> None:
    kind, what, bundle = event
    if kind == "internal":  # the first of each signature; the rest are counted on the status screen
        if bundle:
            console.print(f"[yellow]internal error[/] (ours, not a finding): {what.signature} -> {bundle}")
    elif kind == "fault":
        console.print(f"[yellow]internal fault[/] (see the worker log): {what}")
    elif kind == "new":
        where = f" (localized: {what.localized})" if what.localized else ""
        console.print(f"[bold red]new[/] {what.symptom} {what.backend}/{what.stage}/{what.opt}{where}: {what.detail}")
        console.print(f"    -> {bundle}")
    else:
        console.print(f"[dim]dup {what.signature[:140]}[/]")


def cmd_repro(args: argparse.Namespace) -> int:
    import tempfile

    from nnsmith_cov.campaign.repro import ReproError, reproduce
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.oracle.bundle import BundleError, read_bundle

    if _is_internal_record(args.bundle):
        return _repro_internal(args.bundle)
    try:
        bundle = read_bundle(args.bundle, args.plugin or [])
    except BundleError as e:
        raise CliError(str(e)) from None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = reproduce(bundle, Path(tmp) / "worker.log", args.timeout_s)
        except (ReproError, WorkerStartError) as e:
            raise CliError(str(e)) from None
    print(f"expected: {bundle.meta['signature']}")
    now = result.finding.signature if result.finding else "no finding (the test passes)"
    print(f"now:      {now}")
    print("reproduces" if result.reproduced else "does not reproduce")
    return 0 if result.reproduced else 1


def _is_internal_record(path: Path) -> bool:
    from nnsmith_cov.bounded_read import read_json

    try:
        meta = read_json(path / "meta.json")  # bounded: a hostile meta.json is read_bundle's to report
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("symptom") == "internal"


def _repro_internal(path: Path) -> int:
    """Replay an internal error's record (RUN/internal/...): exit 0 when it still shows."""
    import tempfile

    from nnsmith_cov.campaign.internal import InternalReplayError, read_internal, replay_internal
    from nnsmith_cov.campaign.worker_handle import WorkerStartError

    with tempfile.TemporaryDirectory() as tmp:
        try:
            meta = read_internal(path)
            now = replay_internal(path, meta, Path(tmp) / "worker.log")
        except (InternalReplayError, WorkerStartError) as e:
            raise CliError(str(e)) from None
    expected = meta["signature"]
    print(f"expected: {expected}")
    print(f"now:      {now or 'no internal error (the steps run clean)'}")
    print("reproduces" if now == expected else "does not reproduce")
    return 0 if now == expected else 1


def cmd_coverage(args: argparse.Namespace) -> int:
    import json
    import tempfile

    import numpy as np

    from nnsmith_cov.campaign.measure import MeasureError, measure
    from nnsmith_cov.campaign.testcase import CaseSettings
    from nnsmith_cov.campaign.worker_handle import WorkerStartError
    from nnsmith_cov.coverage.collector import pass_filters
    from nnsmith_cov.coverage.summary import coverage_summary, format_summary

    settings = CaseSettings(backends=args.backends, timeout_s=args.timeout_s)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            m = measure(args.model_dir, settings, args.collector, args.cov_targets, Path(tmp) / "worker.log")
        except (MeasureError, WorkerStartError) as e:
            raise CliError(str(e)) from None
    hits = m.result.hits
    covered = hits.index if hits is not None else np.zeros(0, np.uint32)
    filters = args.pass_filter or pass_filters(args.collector)
    out = coverage_summary(m.universe, covered, filters, args.top) | {
        "model": str(args.model_dir),
        "backends": args.backends,
        "status": m.result.status,
        "findings": [f.header() for f in m.result.findings],
    }
    print(format_summary(out), file=sys.stderr)
    print(json.dumps(out, indent=1))
    return 0


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
        args.argv = list(sys.argv[1:] if argv is None else argv)  # which flags were given (fuzz --resume)
        if getattr(args, "binary_module", None):  # the binary part's target, also inside a composite
            args.cov_targets = [*args.cov_targets, f"binary={args.binary_module}"]
        commands = {"generate": cmd_generate, "batch": cmd_batch, "fuzz": cmd_fuzz, "repro": cmd_repro, "ops": cmd_ops}
        commands["coverage"] = cmd_coverage
        commands["report"] = report.cmd_report
        commands["replay"] = replay.cmd_replay
        return commands[args.command](args)
    except CliError as e:
        print(f"nnsmith-cov: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nnsmith-cov: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
