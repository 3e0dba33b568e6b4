"""The fuzzing loop: generate -> search -> export -> every backend -> oracle -> coverage, until time is up."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnsmith_cov import __version__
from nnsmith_cov.abstract.op import export_forms
from nnsmith_cov.campaign.ahead import Generator, Pending
from nnsmith_cov.campaign.commits import Committer
from nnsmith_cov.campaign.fuzz_config import FuzzConfig
from nnsmith_cov.campaign.internal import Breaker, BreakerTripped, InternalError, gen_config_json
from nnsmith_cov.campaign.ledger import Event, Finished, Ledger
from nnsmith_cov.campaign.proposal import FRESH, call_json, config_json
from nnsmith_cov.campaign.run_dir import RUN_SCHEMA, RunDir
from nnsmith_cov.campaign.run_limit import RunLimits
from nnsmith_cov.campaign.run_stats import RunStats
from nnsmith_cov.campaign.testcase import CaseResult, Proposed, prepare, propose, run_prepared
from nnsmith_cov.campaign.unsupported import SupportLearner
from nnsmith_cov.campaign.worker_handle import Reply, WorkerFault, WorkerHandle, WorkerStartError
from nnsmith_cov.corpus.records import CorpusError
from nnsmith_cov.corpus.seeds import Seed, SeedPool
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.coverage.covmap import Hits, Novelty, VirginMap
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.feedback import mutate
from nnsmith_cov.feedback.params import BanditParams
from nnsmith_cov.feedback.scheduler import Proposal, Scheduler
from nnsmith_cov.gen.generator import GenConfig, Generated, GenRecord
from nnsmith_cov.gen.graph_ir import GraphIR


def test_seed(run_seed: int, k: int) -> int:
    """The seed of test k: a hash, so neighbouring runs share no test cases."""
    digest = hashlib.sha256(f"nnsmith-cov:{run_seed}:{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class Fuzzer:
    """Runs test cases on its workers and applies each finished one to the campaign through
    its `Ledger`: counters, map, corpus entry (with a corpus), findings and bundles, in one
    commit per test. With a scheduler, its proposals shape each graph and each test's
    coverage is its reward.

    Containment: an exception of nnsmith-cov's own code while making or judging a test
    (proposal, generation, growth, the worker's search and export, the oracle, the
    scheduler's bookkeeping) ends that test only, as an internal error the ledger records
    apart from findings; `Breaker` stops a campaign whose own code keeps failing. What
    ends a campaign otherwise: its budget, `stop`, and failures of the corpus itself
    (CorpusError, OSError).
    """

    def __init__(
        self,
        cfg: FuzzConfig,
        run: RunDir,
        worker: WorkerHandle,
        on_event: Callable[[Event], None],
        corpus: bool = False,
    ) -> None:
        self.cfg, self.run, self.worker, self.on_event = cfg, run, worker, on_event
        self.stats = RunStats()
        self.ledger = Ledger(run, self.stats, on_event, cfg.timeline_s)
        self.ledger.workers_rss = lambda: [w.rss_kb() if hasattr(w, "rss_kb") else 0 for w in self.workers]
        self.breaker = Breaker()
        # What backends refuse at the opsets the campaign exports at, learned as tests meet it.
        self.support = SupportLearner(cfg.gen.ops, cfg.settings.backends, cfg.settings.timeout_s)
        # Under a collector, each backend run's limit, calibrated from the campaign's runs.
        self.run_limits = RunLimits()
        self.versions: dict[str, str] = {"nnsmith-cov": __version__}
        self.universe: Universe | None = None
        self.use_corpus = corpus
        self.scheduler: Scheduler | None = None
        self.workers = [worker]
        self.seeds: SeedPool | None = None  # corpus entries to grow (with a collector)
        # Graphs run as the campaign's first tests: the op-support probe's crashes (findings, not
        # exclusions), so they are filed with bundles like any other.
        self.probes: collections.deque[tuple[str, GraphIR]] = collections.deque()
        # Held for everything shared (ledger, scheduler, seeds, stats, run folder) so that one
        # thread per worker can drive tests; generation and the workers' runs happen outside.
        self.lock = threading.RLock()
        # Per worker (id), its last test's commit when `run_workers` defers it (see `_finish`).
        self._pending: dict[int, Callable[[], None]] = {}
        # Per worker with a generator (id), its last test's `_finish` itself, deferred so that the
        # worker takes the test made ahead at once (see `_run_test`).
        self._unfinished: dict[int, Callable[[], None]] = {}
        self._committer = Committer(self.lock)  # deferred commits, run beside the loop (`_beside`)
        # Signatures filed so far, as of each test's `_finish` (not its commit, which runs when
        # its thread gets to it): what a test's run reads to skip a known crash's O0 rerun.
        self._filed: set[str] | None = None
        # Per worker (id), the generator that makes its next test's graph ahead (`campaign.ahead`).
        self.generators: dict[int, Generator] = {}
        self._stop = threading.Event()  # `run_workers`' stop: no test is taken ahead once it is set

    @property
    def covmap(self) -> VirginMap | None:
        return self.ledger.covmap

    @property
    def pass_mask(self) -> np.ndarray | None:
        return self.ledger.pass_mask

    @property
    def store(self) -> CorpusStore | None:
        return self.ledger.store

    @property
    def store_path(self) -> Path:
        return self.run.root / "lmdb"

    def start(self, resume: bool = False) -> list[str]:
        """Start the worker and the run folder (a new one, or the one being resumed); returns
        what a resume repaired in the files beside the corpus (see `Ledger.reconcile`)."""
        hello = self.worker.start()
        self.versions |= hello["versions"]
        coverage = hello.get("collector")
        if coverage:
            self.universe = self.worker.universe()
            self.ledger.track(self.universe, self.cfg.pass_filters)
        config = self.cfg.to_json() | {"versions": self.versions, "coverage": coverage}
        if self.covmap is not None and self.cfg.generator == "nnsmith":  # seeds regrow nnsmith's draws only
            self.seeds = SeedPool(self.covmap.size)
        if resume:
            return self._resume()
        self.run.create(config)
        if self.use_corpus:
            self.ledger.store = CorpusStore.create(self.store_path, config, _str_values(self.versions), self.universe)
        self.scheduler = self._new_scheduler()
        return []

    def _new_scheduler(self) -> Scheduler:
        gen = self.cfg.gen
        names = [o.name() for o in gen.ops]
        return Scheduler(
            names,
            gen.nodes,
            gen.bins,
            self.cfg.seed,
            feedback=self.cfg.feedback,
            params=BanditParams(hedge=self.cfg.hedge),
            opsets=gen.opsets,
            dynamic=self.cfg.dynamic_arm,
            roundtrip=self.cfg.roundtrip_arm,
            mutation=self.cfg.feedback and self.cfg.mutation,
            forms=export_forms(gen.ops),
            vary=self.cfg.vary_size,
            caps=self.cfg.grow_caps if self.cfg.feedback else (),
        )

    def _steady(self, hits: Hits) -> Hits:
        covmap = self.ledger.covmap
        return covmap.steady(hits) if covmap is not None else hits

    def _resume(self) -> list[str]:
        """Pick up where the stored campaign stopped: map, scheduler, numbering, time, counters, findings."""
        if not self.store_path.exists():
            raise CorpusError(f"{self.run.root} holds no campaign corpus to resume")
        ident = self.universe.ident if self.universe is not None else ""
        collector = self.universe.collector if self.universe is not None else "none"
        self.ledger.store = CorpusStore.open(self.store_path, expect_ident=ident, expect_collector=collector)
        self.ledger.restore()
        if self.seeds is not None:
            for i, record in self.store.entries():
                hits = self.store.hits(i)
                if hits is not None:
                    self.seeds.add(_seed_of(i, record.gen, record.draws), self._steady(hits))
        state = self.store.scheduler_state()
        self.scheduler = Scheduler.from_state(state) if state is not None else self._new_scheduler()
        return self.ledger.reconcile()

    def queue_probes(self, graphs: list[tuple[str, GraphIR]]) -> None:
        """Run these (label, graph) pairs as the next tests, before any generated one."""
        with self.lock:
            self.probes.extend(graphs)

    def close(self) -> None:
        try:
            for w in self.workers:
                self.flush(w)
        finally:
            self._committer.close()
            for g in self.generators.values():
                g.close()
            self.ledger.close()

    def generate_ahead(self, worker: WorkerHandle, generator: Generator) -> None:
        """Have `generator` make `worker`'s next graph while `worker` runs its current test."""
        generator.start()
        self.generators[id(worker)] = generator

    def done(self) -> bool:
        cfg, st = self.cfg, self.stats
        return (cfg.max_tests is not None and st.tests >= cfg.max_tests) or (
            cfg.time_s is not None and st.elapsed() >= cfg.time_s
        )

    def step(self, worker: WorkerHandle | None = None, defer: bool = False) -> CaseResult | None:
        """One test case on `worker` (default: the first); None when no graph could be made or
        nnsmith-cov's own code failed on it (an internal error, recorded). Safe to call from one
        thread per worker: only generation and the worker's run happen outside the campaign lock.
        Raises BreakerTripped when internal errors pass the breaker's threshold.

        `defer`: the test's commit (the corpus transaction, bundles, log lines) runs once the
        worker's next request is sent, beside its generation, or at `flush`; everything the
        next proposal reads (map, scheduler, seed pool, counters) is updated before."""
        worker = worker or self.worker
        assert self.scheduler is not None, "start() first"
        test = _Test(-1, 0)
        try:
            return self._run_test(worker, test, defer)
        except _GenerationFailed as e:  # our own code, in the worker's generation
            with self.lock:
                self.flush(worker)
                self._internal(test, e.error)
            return None
        except WorkerFault as e:
            with self.lock:
                self.flush(worker)
                self._internal(test, InternalError.from_worker("worker", str(e)))
            return None
        except BreakerTripped:
            raise
        except (CorpusError, OSError):  # the corpus or the disk: nothing a next test would fix
            raise
        except Exception as e:  # noqa: BLE001 - our own code's error on this test: contained
            if test.k < 0:
                raise
            with self.lock:
                self.flush(worker)
                self._internal(test, InternalError.from_exception(test.stage, e))
            return None

    def flush(self, worker: WorkerHandle) -> None:
        """Run `worker`'s deferred finish and commit, if waiting, after the commits queued before
        them (commits stay in test order); raises a queued commit's error."""
        self._apply(worker)
        self._commit_waiting(worker)

    def _commit_waiting(self, worker: WorkerHandle) -> None:
        """The queued commits, then `worker`'s waiting one (test order)."""
        self._committer.drain()
        commit = self._pending.pop(id(worker), None)
        if commit is not None:
            commit()

    def _apply(self, worker: WorkerHandle) -> None:
        """Apply `worker`'s last test to what the next proposal reads, if that was deferred; its
        commit is then the one waiting (a commit still waiting from the test before goes first)."""
        finish = self._unfinished.pop(id(worker), None)
        if finish is not None:
            self._commit_waiting(worker)
            finish()

    def _beside(self, worker: WorkerHandle) -> None:
        """What runs once the worker has its next request: the previous test applied (so the
        proposal taken ahead now reads what it read when the test was applied before the
        request), the next test taken ahead (`campaign.ahead`), and the previous test's commit
        queued (`campaign.commits`: the worker's answer need not wait for it)."""
        with self.lock:
            self._committer.drain()  # a failed commit stops the campaign here
            self._apply(worker)
        self._ahead(worker)
        with self.lock:
            commit = self._pending.pop(id(worker), None)
        if commit is not None:
            self._committer.put(commit)

    def _take(self, test: _Test) -> bool:
        """Number `test` as the campaign's next one (under the lock); False when the budget is spent."""
        if self.done():  # another thread took the last test
            return False
        test.k, test.seed = self.stats.tests, test_seed(self.cfg.seed, self.stats.tests)
        self.stats.tests += 1
        self.stats.starts.append(self.stats.elapsed())
        return True

    def _begin(self, test: _Test) -> tuple[str, GraphIR] | None:
        """Propose `test` (numbered by `_take`; its parent drawn), or hand it the next probe, which
        is returned; under the lock."""
        assert self.scheduler is not None
        probe = self.probes.popleft() if self.probes else None
        if probe is None:
            test.stage = "propose"
            test.proposal = self.scheduler.propose()
            if test.proposal.seeded and self.seeds:
                rng = np.random.default_rng([self.cfg.seed, test.k])
                test.parent = self.seeds.pick(rng, attempt=True, max_ops=self._cap(test.proposal))
        return probe

    def _ahead(self, worker: WorkerHandle) -> None:
        """Take `worker`'s next tests now, as many as its generator makes ahead, and have it make
        their graphs (see `campaign.ahead`); nothing when it has none, or the budget is spent."""
        generator = self.generators.get(id(worker))
        while generator is not None and not generator.full() and not self._stop.is_set():
            nxt = _Test(-1, 0)
            pending = Pending(nxt)
            with self.lock:
                if not self._take(nxt):
                    return
                try:
                    pending.probe = self._begin(nxt)
                except Exception as e:  # noqa: BLE001 - our own, on that test: recorded when it comes up
                    pending.error = e
            if pending.probe is None and pending.error is None:
                try:
                    pending.request = self._proposal(nxt)
                except Exception as e:  # noqa: BLE001 - as above
                    pending.error = e
            generator.hold(pending, self.cfg.settings.timeout_s + self.cfg.gen.timeout_ms / 1e3)

    def has_ahead(self, worker: WorkerHandle) -> bool:
        """`worker` has a test taken ahead, to run even once the budget is spent."""
        generator = self.generators.get(id(worker))
        return generator is not None and generator.busy()

    def _run_test(self, worker: WorkerHandle, test: _Test, defer: bool = False) -> CaseResult | None:
        """`step`'s body: `test` is filled in as it goes, so that an error anywhere is recorded
        against the right test and stage."""
        assert self.scheduler is not None
        made: Reply | None = None
        generator = self.generators.get(id(worker))
        if generator is not None and generator.busy():
            pending = generator.take()
            vars(test).update(vars(pending.test))  # the test that was taken ahead, in the caller's record
            probe, request, made = pending.probe, pending.request, pending.reply
            if pending.error is not None:
                raise pending.error
        else:
            with self.lock:
                self._apply(worker)  # a deferred finish, left when the test taken ahead had no graph
                if not self._take(test):
                    self.flush(worker)
                    return None
                probe = self._begin(test)
            request = None if probe is not None else self._proposal(test)  # the worker makes the graph
        t0 = time.perf_counter()  # the test's cost, for the scheduler
        test.stage = "generate"
        settings, known = self.cfg.settings, self._filed_signatures().__contains__
        if probe is not None:
            self._beside(worker)
            gen: Generated | None = _probe_test(probe, test.seed)
            prep = lambda: prepare(worker, probe[1], test.seed, settings)
        else:
            assert request is not None

            meanwhile = lambda: self._beside(worker)
            proposed = propose(worker, request, settings, self.cfg.gen.timeout_ms / 1e3, meanwhile, made)
            if proposed.gen is None:  # no graph (perhaps not even sent): the previous test goes first
                self._locked(self.flush, worker)
            gen = self._generated(test, proposed)
            prep = lambda: (proposed.prepared, proposed.finding)
            if made is not None and gen is not None:
                t0 -= gen.record.gen_ms / 1e3  # made elsewhere, still this test's cost
        if gen is None:
            return None
        test.graph = gen.graph
        test.stage = "test"  # the oracle runs here; the worker's own errors come back as WorkerFault
        # Read without the lock: a signature filed meanwhile only costs one more O0 run.
        result = run_prepared(worker, settings, prep, known, self.run_limits)  # type: ignore[arg-type]
        self.stats.run_limits = self.run_limits.limits(settings.timeout_s)
        if result.unsupported:
            self._learn(worker, gen.graph, result)
        test.stage = "observe"
        seconds = time.perf_counter() - t0
        if defer and generator is not None:
            # The next test is made ahead: the worker takes it now, and this test is applied
            # beside it, before the test after is proposed (`_beside`): proposals read what they
            # read with this test applied here, the worker no longer waits on it.
            def finish() -> None:
                try:
                    self._pending[id(worker)] = self._finish(test, gen, result, seconds)
                except (CorpusError, OSError, BreakerTripped):
                    raise
                except Exception as e:  # noqa: BLE001 - ours, on this test (not on the next one it runs beside)
                    self._internal(test, InternalError.from_exception("observe", e))

            self._unfinished[id(worker)] = finish  # this thread's own key: read under the lock by `_apply`
            return result
        with self.lock:
            commit = self._finish(test, gen, result, seconds)
            if defer:
                self._pending[id(worker)] = commit
            else:
                commit()
        return result

    def _filed_signatures(self) -> set[str]:
        """The signatures of the findings of the tests applied so far (and before a resume)."""
        if self._filed is None:
            with self.lock:
                if self._filed is None:
                    self._filed = set(self.stats.signatures)
        return self._filed

    def _locked(self, fn: Callable[..., None], *args: Any) -> None:
        with self.lock:
            fn(*args)

    def _learn(self, worker: WorkerHandle, graph: GraphIR, result: CaseResult) -> None:
        """Fold a test's refusals into the campaign's support tables and narrow the generator's
        ops to match; the probes that tell which op was refused run outside the lock."""
        found = [(f.backend, self.support.attribute(worker, graph, f)) for f in result.unsupported]
        with self.lock:
            learned = [r for backend, pairs in found for r in self.support.learn(backend, pairs, graph.opset)]
            ops = self.support.ops() if learned else None
            if ops is not None:
                self.cfg.gen = dataclasses.replace(self.cfg.gen, ops=ops)
            self.stats.learned.extend(r.text() for r in learned)

    def _cap(self, proposal: Proposal) -> int:
        """The most ops a seeded test's child may hold: its proposal's cap, else the campaign's."""
        return proposal.grow_max or self.cfg.max_grown

    def _proposal(self, test: _Test) -> dict[str, Any]:
        """The request that has the worker make the test's graph (see `campaign.proposal`): the
        parent mutated as the proposal says (`feedback.mutate`), else grown (rebuilt from its
        insertion draws with more operators), else a fresh graph, each tried in turn there.
        `test` keeps the calls, to know what the worker's answer stands for."""
        assert test.proposal is not None
        proposal, parent = test.proposal, test.parent
        test.calls = []
        if parent is not None:
            assert self.seeds is not None
            base = Scheduler.apply(proposal, self.cfg.gen)
            donor = None
            if proposal.mutation == "splice":
                with self.lock:
                    donor = self.seeds.donor(np.random.default_rng([self.cfg.seed, test.k, 1]), parent)
            for kind in dict.fromkeys([proposal.mutation or mutate.GROW, mutate.GROW]):
                call = mutate.prepare(kind, parent, base, test.seed, donor, self._cap(proposal))
                if call is not None:
                    test.calls.append((kind, call))
        fresh = dataclasses.replace(proposal, seeded=False, mutation=None, grow_max=None)
        test.fresh = Scheduler.apply(fresh, self.cfg.gen)
        return {
            "kind": "propose",
            "test": test.k,
            "seed": test.seed,
            "generator": self.cfg.generator,
            "calls": [call_json(call) for _, call in test.calls],
            "fresh": config_json(test.fresh),
            "search": self.cfg.settings.search,
        }

    def _generated(self, test: _Test, proposed: Proposed) -> Generated | None:
        """The worker's graph, with `test` set to the call that made it (or raised); None (a
        counted generation failure, committed) when the generator gave up. Raises the internal
        error of a generation that failed in our own code."""
        assert test.proposal is not None and self.scheduler is not None
        if proposed.index is not None and 0 <= proposed.index < len(test.calls):
            kind, call = test.calls[proposed.index]
            test.cfg, test.prefix, test.lenient = call.cfg, call.prefix, call.lenient
            mutation = test.proposal.mutation
            if proposed.gen is not None and mutation is not None and kind != mutation:  # grown instead
                test.proposal = dataclasses.replace(test.proposal, mutation=mutate.GROW)
        elif proposed.index == FRESH:
            test.parent, test.prefix = None, None
            test.proposal = dataclasses.replace(test.proposal, seeded=False, mutation=None, grow_max=None)
            test.cfg = test.fresh
        if proposed.error is not None:
            raise _GenerationFailed(proposed.error)
        if proposed.failed:
            with self.lock:
                self.stats.gen_failed += 1
                self.scheduler.observe(test.proposal, GenRecord(test.seed), None)
                self.ledger.skip(test.k, self.scheduler.state(), last=self.done())
                self.breaker.note(None)
            return None
        return proposed.gen

    def _finish(self, test: _Test, gen: Generated, result: CaseResult, seconds: float) -> Callable[[], None]:
        """Apply a finished test to what the next proposal reads (counters, map, scheduler, seed
        pool); returns its commit (the ledger's), to run now or beside the next test."""
        st, sched = self.stats, self.scheduler
        assert sched is not None
        handles = [*self.workers, *(g.handle for g in self.generators.values())]
        st.restarts = sum(w.deaths for w in handles)
        st.recycles = sum(getattr(w, "recycles", 0) for w in handles)
        st.stage_ms["generate"].append(gen.record.gen_ms)
        st.infeasible += len(gen.record.infeasible)
        st.op_tests.update(set(gen.record.ops))
        if gen.record.ops:
            st.export_tests.update([f"opset {gen.record.opset}", "dynamic" if gen.record.dynamic else "static"])
            if gen.record.roundtrip:
                st.export_tests["roundtrip"] += 1
            # the ONNX form an op was exported in ("conv.form=1": the spec's FORMS[1]), once per test
            st.export_tests.update({f"{label}={value}" for label, value in gen.record.draws if label.endswith(".form")})
        self._filed_signatures().update(f.signature for f in result.findings)
        novelty = self.ledger.fold(result.hits, result.flaky)
        test.folded = (result.hits, novelty) if result.hits is not None and novelty is not None else None
        # A grown graph's reward goes to every op it holds, inherited or new: coverage comes
        # from what runs, and the lift estimate already discounts bystanders. A probe's test
        # was no choice of the scheduler's: nothing to credit.
        if test.proposal is not None:
            rare = 0
            if self.seeds is not None and result.hits is not None:
                rare = self.seeds.rare(self._steady(result.hits))
            sched.observe(test.proposal, gen.record, novelty, seconds, rare=rare)
        p = result.prepared
        if p is not None and (result.findings or (novelty is not None and novelty.interesting)):
            p.load()  # kept: its values and model come over from the worker
        origin: dict[str, Any] = {"origin": "probe"} if test.proposal is None else {}
        if test.proposal is not None and test.proposal.grow_max is not None:
            origin["grow_max"] = test.proposal.grow_max  # the cap the scheduler chose for this child
        if test.proposal is not None and test.proposal.hedged:
            origin["hedged"] = True  # drawn as without feedback (the scheduler's hedge)
        finished = Finished(
            test.k,
            gen.record.seed,
            result,
            gen.graph,
            gen=gen.record.to_json() | origin,
            draws=[(label, value) for label, value in gen.record.draws],
            parent=test.parent.test_id if test.parent is not None else None,
            meta={
                "settings": self.cfg.settings.to_json(),
                "generator": self.cfg.to_json()["generator"],
                "versions": self.versions,
                "search": p.search if p is not None else None,
                "draws": gen.record.draws,
            },
        )
        if novelty is not None and novelty.interesting and self.seeds is not None:
            # The entry the commit keeps with these hits, pooled now for the next proposal (a
            # commit that fails encoding our own record leaves it pooled: its children then name
            # a parent the corpus lacks). A child that adds buckets alone is kept, but leaves its
            # parent's energy fading.
            assert result.hits is not None
            seed = _seed_of(test.k, finished.gen, gen.record.draws)
            self.seeds.add(seed, self._steady(result.hits), novelty.new_branches > 0)
        self.breaker.note(None)
        state, last = sched.state(), self.done()  # as of this test, whenever the commit runs

        def commit() -> None:
            try:
                self.ledger.commit(finished, novelty, state, last=last)
            except (CorpusError, OSError, BreakerTripped):
                raise
            except Exception as e:  # noqa: BLE001 - ours, on this test (not on the next one it may run beside)
                self._internal(test, InternalError.from_exception("observe", e))

        return commit

    def _internal(self, test: _Test, error: InternalError) -> None:
        """Record the test as an internal error (what replays it in its bundle), then let the
        breaker judge; held lock."""
        cfg = test.cfg or self.cfg.gen
        meta = {
            "proposal": test.proposal.to_json() if test.proposal is not None else None,
            "parent": None
            if test.parent is None or test.prefix is None
            else {"test": test.parent.test_id, "prefix": [list(d) for d in test.prefix], "lenient": test.lenient},
            "gen_config": gen_config_json(cfg),  # the proposal applied, as generation was called
            "generator": self.cfg.generator,
            "settings": self.cfg.settings.to_json(),
            "versions": self.versions,
        }
        state = self.scheduler.state() if self.scheduler is not None else None
        self.ledger.commit_internal(
            test.k, test.seed, error, meta, test.graph, test.folded, scheduler=state, last=self.done()
        )
        self.breaker.note(error.signature)

    def run_workers(self, more: list[WorkerHandle], on_step: Callable[[], None], stop: threading.Event) -> None:
        """Test in parallel on `self.worker` and `more` (started, same collector and universe),
        one thread each, until done() or `stop` is set; `on_step` runs after each test."""
        for w in more:
            hello = w.start()
            if hello.get("collector") and self.universe is not None and w.universe().ident != self.universe.ident:
                raise WorkerStartError("workers measure different branch universes")
        self.workers = [self.worker, *more]
        self._stop = stop
        errors: list[BaseException] = []

        def loop(w: WorkerHandle) -> None:
            try:
                try:
                    # a test taken ahead (`campaign.ahead`) is run even once the budget is spent
                    while (not stop.is_set() and not self.done()) or self.has_ahead(w):
                        self.step(w, defer=True)
                        on_step()
                except (CorpusError, OSError):
                    self._unfinished.pop(id(w), None)  # the store failed: nothing more goes into it
                    self._pending.pop(id(w), None)
                    raise
                finally:
                    with self.lock:
                        self.flush(w)  # this worker's last test (also after an error elsewhere)
            except BaseException as e:  # surfaced in the main thread
                errors.append(e)
                stop.set()

        threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def write_stats(self) -> None:
        with self.lock:
            stats = {"schema": RUN_SCHEMA} | self.stats.to_json()
            if self.scheduler is not None and self.cfg.feedback:
                stats["scheduler"] = self.scheduler.summary()
        self.run.write_json("stats.json", stats)


@dataclass
class _Test:
    """One test in the making: what an internal error's record needs, wherever it strikes."""

    k: int
    seed: int
    stage: str = "propose"
    proposal: Proposal | None = None
    parent: Seed | None = None
    cfg: GenConfig | None = None  # what generation was (last) called with
    prefix: list[tuple[str, int | float]] | None = None  # ... and the parent's draws it replayed
    lenient: bool = False  # ... leniently (a mutant's edited draws)
    graph: GraphIR | None = None
    folded: tuple[Hits, Novelty] | None = None  # its hits once in the map: they must be stored with it
    calls: list[tuple[str, mutate.Call]] = field(default_factory=list)  # proposed to the worker, in turn
    fresh: GenConfig | None = None  # ... and the fresh graph's config after them


class _GenerationFailed(Exception):
    """Generation in the worker raised in our own code: the test's internal error."""

    def __init__(self, error: InternalError) -> None:
        super().__init__(error.message)
        self.error = error


def _probe_test(probe: tuple[str, GraphIR], seed: int) -> Generated:
    """A probe's single-operator graph as a test (no draws: it replays from its graph)."""
    _, graph = probe
    record = GenRecord(seed, ops=[inst.op for inst in graph.insts], opset=graph.opset, roundtrip=graph.roundtrip)
    return Generated(graph, record)


def _seed_of(test_id: int, gen: dict[str, Any], draws: list) -> Seed:
    return Seed.of(test_id, gen, draws)


def _str_values(versions: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in versions.items()}
