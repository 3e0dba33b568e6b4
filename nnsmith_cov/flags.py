"""Every flag of `nnsmith-cov`, in one table (libFuzzer's FuzzerFlags.def is the model).

Each row says once how a flag is spelled, how its value is read (`flag_values`), its default,
its unit, its help, and which subcommands take it; a subcommand whose default or help differs
says so in its `Use`. Every subcommand's parser is built from the table by `add_flags`, so a
flag is added, renamed or documented in one place. Durations carry their unit in the name
(`--timeout-s`, `--timeout-ms`) or in the value (`--time 4h`, `--status-every 5m`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnsmith_cov import flag_values as v
from nnsmith_cov.campaign.worker import CALIBRATION_SHARE
from nnsmith_cov.gen.generator import GenConfig
from nnsmith_cov.stored import SEARCH_METHODS


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are CliErrors: one line, not usage + traceback."""

    def error(self, message: str) -> None:
        raise CliError(message)


_SAME: Any = object()  # a Use that keeps the flag's own default


@dataclass(frozen=True)
class Use:
    """How one command takes a flag, where it differs from the flag's row."""

    default: Any = _SAME
    help: str | None = None
    required: bool | None = None


@dataclass(frozen=True)
class Flag:
    """One row of the table. `value` reads the text (None: a switch, or a plain string with
    `choices`); `unit` is the unit of the value after reading ("s", "ms", "MiB" or "")."""

    names: tuple[str, ...]
    help: str
    commands: Mapping[str, Use]
    value: Callable[[str], Any] | None = None
    default: Any = None
    unit: str = ""
    dest: str | None = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    metavar: str | None = None
    repeat: bool = False  # each use appends a value
    required: bool = False
    exclusive: str = ""  # of the rows a command takes naming the same group, exactly one is given
    on_resume: bool = False  # `fuzz --resume` takes it (it does not change the campaign)

    @property
    def positional(self) -> bool:
        return not self.names[0].startswith("-")

    @property
    def key(self) -> str:
        """The attribute of the parsed arguments that holds the value."""
        if self.dest:
            return self.dest
        if self.positional:
            return self.names[0]
        longest = max(self.names, key=len)
        return longest.lstrip("-").replace("-", "_")

    @property
    def switch(self) -> bool:
        return (
            self.value is None
            and self.choices is None
            and self.nargs is None
            and not self.repeat
            and not self.positional
        )

    def use(self, command: str) -> tuple[Any, str, bool]:
        """(default, help, required) of this flag in `command`."""
        u = self.commands[command]
        default = self.default if u.default is _SAME else u.default
        return default, u.help or self.help, self.required if u.required is None else u.required

    def argparse_kwargs(self, command: str) -> dict[str, Any]:
        default, help_text, required = self.use(command)
        kw: dict[str, Any] = {"help": help_text}
        if self.switch:
            kw["action"] = "store_true"
            return kw
        if self.repeat:
            kw["action"] = "append"
        for name, val in (("type", self.value), ("choices", self.choices), ("nargs", self.nargs)):
            if val is not None:
                kw[name] = val
        if self.metavar:
            kw["metavar"] = self.metavar
        if self.positional:
            return kw
        if self.dest:
            kw["dest"] = self.dest
        if required:
            kw["required"] = True
        if default is not None:
            kw["default"] = default
        return kw


def on(*commands: str, **uses: Use) -> dict[str, Use]:
    """The commands that take a flag: those named plainly, and those with a `Use` of their own."""
    return {c: Use() for c in commands} | uses


_GEN = ("generate", "batch", "fuzz")  # the commands that make graphs


def _plugin(names: str) -> str:
    return (
        f"trust a plug-in backend or collector {names} (a bundle or campaign folder is data: "
        "it never imports code the command line does not name)"
    )


FLAGS: tuple[Flag, ...] = (
    # -- what to read and where to write -------------------------------------------------------
    Flag(("model_dir",), "a folder from `generate` (graph.json, record.json) or a bundle", on("coverage"), Path),
    Flag(
        ("bundle",),
        "a finding's bundle folder, or an internal error's record (RUN/internal/...)",
        on("repro", reduce=Use(help="a finding's bundle folder (RUN/findings/...)")),
        Path,
    ),
    Flag(("run",), "a run folder (what `fuzz -o` wrote)", on("triage"), Path, metavar="RUN"),
    Flag(
        ("sources",),
        "campaign folders, folders of bundles / model folders / .onnx files, or .onnx files",
        on("replay"),
        Path,
        nargs="+",
        metavar="SOURCE",
    ),
    Flag(
        ("corpora",),
        "campaign folders (DIR or DIR=LABEL); imports as lcov:FILE[=LABEL] or json:FILE[=LABEL]",
        on("report"),
        nargs="+",
        metavar="CORPUS",
    ),
    Flag(
        ("-o", "--output"),
        "output folder",
        on(
            "generate",
            batch=Use(help="write each model to OUTPUT/<seed>/", required=False),
        ),
        Path,
        required=True,
    ),
    Flag(
        ("-o", "--corpus", "--output"),
        "new campaign folder (LMDB corpus, findings, stats)",
        on("fuzz", replay=Use(help="new campaign folder", required=True)),
        Path,
        dest="output",
        exclusive="where",
    ),
    Flag(
        ("-o", "--out"),
        "folder for report.json, table.csv, figures/, ...",
        on("report", reduce=Use(required=False, help="where the reduced bundle goes (default BUNDLE/reduced)")),
        Path,
        required=True,
    ),
    Flag(
        ("--resume",),
        "continue the campaign in this folder (its own settings)",
        on("fuzz"),
        Path,
        exclusive="where",
        on_resume=True,
    ),
    Flag(
        ("--force",),
        "replace a model already in the output folder",
        on("generate", batch=Use(help="replace models already in OUTPUT/<seed>/")),
    ),
    Flag(
        ("--plugin",),
        _plugin("a bundle or campaign names"),
        on(
            fuzz=Use(help=_plugin("a campaign being resumed names")),
            repro=Use(help=_plugin("the bundle names")),
            reduce=Use(help=_plugin("the bundle names")),
            triage=Use(help="with --reduce: " + _plugin("the bundles name")),
        ),
        repeat=True,
        metavar="MODULE:CLASS",
        on_resume=True,
    ),
    # -- how a campaign runs ---------------------------------------------------------------------
    Flag(
        ("--workers",),
        "workers testing in parallel (default 1; with --cluster ray, one per CPU of the cluster)",
        on("fuzz"),
        v.positive,
        on_resume=True,
    ),
    Flag(
        ("--gen-process",),
        "make each test's graph ahead in a process of its own beside its worker, while the worker runs the test"
        " before it (auto, the default: where every worker can have one core for it, local workers only)",
        on("fuzz"),
        choices=("auto", "on", "off"),
        default="auto",
        on_resume=True,
    ),
    Flag(
        ("--cluster",),
        "where the workers run: local processes (default), or Ray actors on a local Ray instance (ray),"
        " the cluster this node joined (ray:auto) or one at ray://HOST:PORT; needs pip install 'nnsmith-cov[ray]'",
        on("fuzz"),
        v.cluster,
        "local",
        on_resume=True,
    ),
    Flag(
        ("--worker-mem-mb",),
        "address-space limit of each worker in MiB: a system under test exhausting it is an oom finding"
        " (default: none)",
        on("fuzz"),
        v.positive,
        unit="MiB",
        on_resume=True,
    ),
    Flag(
        ("--recycle-after",),
        "replace each worker by a fresh, warmed-up one after this many tests (0: never; default 5000)",
        on("fuzz"),
        v.count,
        5000,
        on_resume=True,
    ),
    Flag(
        ("--worker-max-rss-mb",),
        "replace a worker whose resident memory passed this before its next test (0: never; default 4096)",
        on("fuzz"),
        v.count,
        4096,
        unit="MiB",
        on_resume=True,
    ),
    Flag(
        ("--max-corpus-mb",),
        "corpus disk budget: past it, blobs of tests owning no rare branch go first, oldest first;"
        " records and bitmaps stay (0: none; default 2048)",
        on("fuzz"),
        v.count,
        2048,
        unit="MiB",
        on_resume=True,
    ),
    Flag(
        ("--pass-filter",),
        "pass-only folders/files (default per collector)",
        on(
            "coverage",
            "replay",
            fuzz=Use(help="pass-only folders/files (default: the collector's)"),
            report=Use(help="pass-only folders/files (default: per campaign)"),
        ),
        nargs="+",
        metavar="PATH",
    ),
    Flag(
        ("--feedback",),
        "coverage feedback steers the generator (default: on with a collector; off = plain NNSmith)",
        on("fuzz"),
        choices=("on", "off"),
    ),
    Flag(
        ("--mutation",),
        "with feedback, tests grown from the corpus may mutate a kept test's choices (default on; "
        "off: kept tests are only grown)",
        on("fuzz"),
        choices=("on", "off"),
    ),
    Flag(
        ("--grow-max",),
        "with feedback, the most operators a graph grown or mutated from a kept test may hold "
        "(AFL++'s -G, libFuzzer's -max_len); several, comma-separated, are caps the scheduler "
        "learns among per test (default 4 x --nodes)",
        on("fuzz"),
        v.grow_max,
        metavar="N[,M...]",
    ),
    Flag(
        ("--hedge",),
        "with feedback, the share of tests drawn as without it: a fresh graph, every choice "
        "uniform (default 0.5; 0: every test steered or grown from the corpus)",
        on("fuzz"),
        v.hedge,
        metavar="SHARE",
    ),
    Flag(
        ("--vary-size",),
        "with --feedback off, draw each graph's size uniformly among the sizes feedback chooses "
        "from (the off-var ablation: the same choices, drawn at random)",
        on("fuzz"),
    ),
    Flag(
        ("--backends",),
        "comma list (default ort,tvm)",
        on(
            "fuzz",
            "replay",
            coverage=Use(default=["tvm"], help="comma list (default tvm)"),
            generate=Use(default=None, help="only operators these backends implement, as fuzz draws (comma list)"),
        ),
        v.backends,
        ["ort", "tvm"],
    ),
    Flag(
        ("--generator",),
        "test generator: nnsmith (default) or a baseline in the same harness (graphfuzzer, lemon; "
        "tzer: TIR mutation, --backends tvm only)",
        on("fuzz"),
        choices=("nnsmith", "graphfuzzer", "lemon", "tzer"),
        default="nnsmith",
    ),
    Flag(
        ("--time",),
        "stop after this long (e.g. 10m, 4h)",
        on(
            "fuzz",
            reduce=Use(default=120.0, help="budget, e.g. 90s or 2m (default 120 s); then the best so far is written"),
        ),
        v.duration,
        unit="s",
        on_resume=True,
    ),
    Flag(("--tests",), "stop after this many test cases", on("fuzz"), v.positive, on_resume=True),
    Flag(
        ("--status-every",),
        "when not on a terminal: a plain status line this often, in seconds or e.g. 5m (default 60)",
        on("fuzz"),
        v.duration,
        60.0,
        unit="s",
        metavar="SECONDS",
        on_resume=True,
    ),
    Flag(
        ("--seed",),
        "run seed; test k's seed derives from it (default 0)",
        on(
            "fuzz",
            generate=Use(default=None, help="model seed: the same seed and flags give the same model", required=True),
            batch=Use(help="first seed; model k uses seed+k"),
            replay=Use(help="seed of the random inputs of foreign models (default 0)"),
        ),
        v.seed,
        0,
    ),
    Flag(("--count",), "models to generate (default 100)", on("batch"), v.positive, 100),
    # -- the generator -------------------------------------------------------------------------
    Flag(("--nodes",), f"operators per graph (default 10, at most {v.MAX_NODES})", on(*_GEN), v.nodes, 10),
    Flag(("--no-binning",), "turn attribute binning off", on(*_GEN)),
    Flag(("--ops",), "only these operators (default: all)", on(*_GEN), nargs="+", metavar="OP"),
    Flag(("--max-elems",), "element cap per tensor (default 65536)", on(*_GEN), v.positive, 1 << 16),
    Flag(
        ("--solver-work",),
        f"Z3 work units per graph, all checks together (default {GenConfig.work_budget})",
        on(*_GEN),
        v.positive,
        GenConfig.work_budget,
    ),
    Flag(
        ("--timeout-ms",),
        f"wall-clock safety net per graph (default {GenConfig.timeout_ms})",
        on(*_GEN),
        v.positive,
        GenConfig.timeout_ms,
        unit="ms",
    ),
    Flag(
        ("--opsets",),
        "ONNX opsets to export at, e.g. 11-20 or 13,17,20 (default 20; fuzz with feedback: 11-20, "
        "weighed by the scheduler)",
        on(*_GEN),
        v.opsets,
        metavar="LIST",
    ),
    Flag(
        ("--dynamic",),
        "share of graphs exported with symbolic input dims (default 0; fuzz with feedback: the scheduler's choice)",
        on(*_GEN),
        v.share,
        metavar="P",
    ),
    Flag(
        ("--roundtrip",),
        "share of graphs that backends with a text form of their IR (tvm) compile from it printed "
        "and parsed back (default 0; fuzz with feedback: the scheduler's choice)",
        on(*_GEN),
        v.share,
        metavar="P",
    ),
    # -- the value search ----------------------------------------------------------------------
    Flag(
        ("--search",),
        "value search (default gradient)",
        on("fuzz", generate=Use(help="how inputs and weights are found (default gradient; none = one random draw)")),
        choices=SEARCH_METHODS,
        default="gradient",
    ),
    # Iterations, not time, bound the search by default, so the same seed gives the same
    # values on any machine; the time budget is a safety net.
    Flag(("--search-iters",), "value search iterations (default 256)", on("generate"), v.positive, 256),
    Flag(("--search-budget-ms",), "value search time cap (default 5000)", on("generate"), v.positive, 5000, unit="ms"),
    Flag(("--no-proxy",), "gradient search without proxy derivatives", on("generate")),
    # -- the oracle ----------------------------------------------------------------------------
    Flag(("--rtol",), "relative tolerance (default 0.01)", on("fuzz"), v.nonneg_float, 1e-2),
    Flag(("--atol",), "absolute tolerance (default 0.001)", on("fuzz"), v.nonneg_float, 1e-3),
    Flag(("--half-rtol",), "rtol for float16 outputs (default 0.05)", on("fuzz"), v.nonneg_float, 5e-2),
    Flag(("--half-atol",), "atol for float16 outputs (default 0.01)", on("fuzz"), v.nonneg_float, 1e-2),
    Flag(
        ("--timeout-s",),
        "per worker request (default 60)",
        on(
            "fuzz",
            "replay",
            coverage=Use(default=300.0, help="per worker request (default 300)"),
            repro=Use(default=None, help="per request (default: the bundle's)"),
            reduce=Use(default=None, help="per worker request (default: the bundle's)"),
        ),
        v.duration,
        60.0,
        unit="s",
    ),
    Flag(
        ("--coverage-timeout",),
        "the limit of a backend run under a collector: auto (the default) calibrates it from the campaign's"
        " runs (3x the slowest recent one, 10 s to --timeout-s), full gives each run --timeout-s; a run past it"
        " is re-run natively with --timeout-s, so hangs and findings are judged alike",
        on("fuzz"),
        choices=("auto", "full"),
        default="auto",
        on_resume=True,
    ),
    Flag(
        ("--calibration-share",),
        "binary collector: a worker reruns a run that reached unseen blocks (to flag the flaky ones) while its"
        f" reruns have taken at most this share of its other busy time (default {CALIBRATION_SHARE}; 0: never,"
        " inf: every such run)",
        on("fuzz", "replay"),
        v.nonneg_float,
        CALIBRATION_SHARE,
        metavar="S",
        on_resume=True,
    ),
    Flag(("--no-localize",), "do not re-run failures at O0", on("fuzz", "replay")),
    Flag(
        ("--support-cache",),
        "op-support cache folder (default ~/.cache/nnsmith-cov)",
        on("fuzz", "generate"),
        Path,
        on_resume=True,
    ),
    Flag(("--no-support",), "do not probe op support; use every operator", on("fuzz"), on_resume=True),
    # -- coverage ------------------------------------------------------------------------------
    Flag(
        ("--collector",),
        "coverage collector: python, llvm, binary, python+binary (TVM's Python and ORT's binary), none, "
        "or module:Class (default python)",
        on(
            "fuzz",
            coverage=Use(help="python, llvm, binary or python+binary (default python)"),
            replay=Use(help="python, llvm, binary, python+binary or module:Class (default python)"),
        ),
        v.collector,
        "python",
    ),
    Flag(
        ("--cov-targets",),
        "what the collector measures (default: tvm,torch.onnx for python; all instrumented libraries for llvm)",
        on(
            "fuzz",
            coverage=Use(
                help="what to measure, comma list: Python packages (python; default tvm,torch.onnx) "
                "or instrumented shared libraries (llvm; default all loaded)"
            ),
            replay=Use(help="what the collector measures (default: the collector's own)"),
        ),
        v.comma_list,
        [],
    ),
    Flag(
        ("--binary-module",),
        "binary collector: the shared object to follow (default: those the backends declare,"
        " ORT's onnxruntime_pybind11_state*.so, TVM's libtvm_compiler.so)",
        on("fuzz", "coverage"),
        str,
        metavar="PATTERN",
    ),
    Flag(("--top",), "files in the top list (default 15)", on("coverage"), v.positive, 15),
    # -- replay --------------------------------------------------------------------------------
    Flag(
        ("--clock",),
        "time stamps: source (a campaign's own; default for corpora), mtime (file order), "
        "replay (the replay's own clock; default otherwise)",
        on("replay"),
        choices=("source", "mtime", "replay"),  # replay.engine.CLOCKS (a test keeps them equal)
    ),
    Flag(("--sym-dim",), "value of symbolic dimensions (default 1)", on("replay"), v.positive, 1),
    # -- triage --------------------------------------------------------------------------------
    Flag(
        ("--reduce",),
        "first reduce the first bundle of each root cause not reduced yet (`nnsmith-cov reduce`), in table order",
        on("triage"),
    ),
    Flag(
        ("--reduce-time",),
        "with --reduce: the budget of each bundle, e.g. 90s or 2m (default 120 s)",
        on("triage"),
        v.duration,
        120.0,
        unit="s",
        metavar="TIME",
    ),
    Flag(("--json",), "print JSON instead of the table", on("triage")),
    Flag(
        ("--class",),
        "only root causes of this class",
        on("triage"),
        dest="cls",
        # oracle.finding.CLASSES (a test keeps them equal)
        choices=("bug", "reference", "precision", "discontinuity", "unsupported", "ours"),
    ),
    # -- report --------------------------------------------------------------------------------
    Flag(("--no-figures",), "skip the PNG/SVG figures", on("report")),
    Flag(("--html",), "also write an HTML coverage report per campaign", on("report")),
    Flag(("--mixed",), "compare campaigns of different collectors anyway", on("report")),
    Flag(("--by-line",), "match branches by source line (implies --mixed)", on("report")),
)


# The dests `fuzz --resume` takes: when to stop, how many workers, the op-support cache, how
# status is printed, and which plug-ins to trust. Everything else is the campaign's own.
RESUME_FLAGS: tuple[str, ...] = tuple(f.key for f in FLAGS if f.on_resume)


def flags_of(command: str) -> list[Flag]:
    """The rows `command` takes, in table order."""
    return [f for f in FLAGS if command in f.commands]


def add_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """Add every flag of the table that `command` takes to its parser."""
    rows = flags_of(command)
    shared = {f.exclusive for f in rows if f.exclusive and sum(g.exclusive == f.exclusive for g in rows) > 1}
    groups: dict[str, Any] = {}
    for f in rows:
        target: Any = parser
        if f.exclusive in shared:
            if f.exclusive not in groups:
                groups[f.exclusive] = parser.add_mutually_exclusive_group(required=True)
            target = groups[f.exclusive]
        target.add_argument(*f.names, **f.argparse_kwargs(command))


def command_parser(command: str) -> OneLineParser:
    """A parser of `command`'s flags alone (what a check of the given flags parses with)."""
    parser = OneLineParser(prog=f"nnsmith-cov {command}")
    add_flags(parser, command)
    return parser
