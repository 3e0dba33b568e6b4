"""`fuzz --generator tzer`: Tzer's coverage-guided joint IR/pass search in nnsmith-cov's campaign.

Each test picks a pool entry (`pool.py`), mutates its IR or, past the tolerance, its pass
sequence (`mutant.py`), runs the mutant in the worker (`case.py`), and commits it through the
same ledger as every generator: counters, coverage map, corpus entry, findings and bundles.
A mutant that reached new coverage joins the pool. Without a collector nothing is learned:
every test mutates one of the initial seeds.

On resume the pool is rebuilt from the seeds and the corpus entries of earlier tests (their
chains replay their IR); the tolerance counters start again from zero.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from nnsmith_cov.campaign.fuzz_loop import Fuzzer, _Test
from nnsmith_cov.campaign.ledger import Finished, Material
from nnsmith_cov.campaign.testcase import CaseResult
from nnsmith_cov.campaign.worker_handle import WorkerHandle
from nnsmith_cov.tir import passes, seeds
from nnsmith_cov.tzer import case, mutant
from nnsmith_cov.tzer.pool import Entry, Pool

NAME = "tzer"


class TzerFuzzer(Fuzzer):
    """A Fuzzer whose tests are TIR mutants instead of generated graphs."""

    def start(self, resume: bool = False) -> list[str]:
        repaired = super().start(resume)
        self._warmed: set[tuple[int, int]] = set()
        self.pool = Pool()
        for i, name in enumerate(seeds.names()):
            rng = np.random.default_rng([self.cfg.seed, i])
            self.pool.entries.append(Entry(name, [], passes.initial(rng), seeds.seed(name)))
        if resume and self.store is not None and self.covmap is not None:
            for test_id, record in self.store.entries():
                gen = record.gen
                if gen.get("generator") != NAME or record.novelty is None or not record.novelty.interesting:
                    continue
                chain = [(str(n), int(d)) for n, d in gen["chain"]]
                func = mutant.replay(gen["origin"], chain)
                self.pool.entries.append(Entry(gen["origin"], chain, list(gen["passes"]), func, test_id))
        return repaired

    def step(self, worker: WorkerHandle | None = None, defer: bool = False) -> CaseResult | None:
        worker = worker or self.worker
        if (id(worker), worker.deaths) not in self._warmed:  # a restarted worker is a fresh process
            case.warm_up(worker, seeds.seed(seeds.names()[0]), self.cfg.settings.timeout_s)
            self._warmed.add((id(worker), worker.deaths))  # after: a warm-up that died is not retried
        return super().step(worker, defer)

    def _run_test(self, worker: WorkerHandle, test: _Test, defer: bool = False) -> CaseResult | None:
        # `defer` changes nothing here: a TIR test has no proposal to overlap, it commits at once
        with self.lock:
            if not self._take(test):
                return None
            rng = np.random.default_rng([self.cfg.seed, test.k])
            learn = self.covmap is not None and self.cfg.feedback
            parent = self.pool.pick(rng) if learn else self.pool.entries[int(rng.integers(len(seeds.names())))]
            mode = parent.mode()
        t0 = time.perf_counter()
        test.stage = "generate"
        m = mutant.make(parent, test.seed, mode)
        gen = mutant.record(test.seed, parent.origin, m, mode, parent.test_id)
        gen_ms = (time.perf_counter() - t0) * 1e3
        args = case.arguments(m.func, test.seed)
        test.stage = "test"
        result, reference = case.run_case(worker, gen["tir"], m.passes, args, self.cfg.settings)
        test.stage = "observe"
        with self.lock:
            self._commit(test, gen, gen_ms, result, Material(args, reference), parent, m, mode)
        return result

    def _commit(
        self,
        test: _Test,
        gen: dict[str, Any],
        gen_ms: float,
        result: CaseResult,
        material: Material,
        parent: Entry,
        m: mutant.Mutant,
        mode: str,
    ) -> None:
        st = self.stats
        st.restarts = sum(w.deaths for w in self.workers)
        st.stage_ms["generate"].append(gen_ms)
        st.op_tests.update([f"tzer.{m.step}"])
        novelty = self.ledger.fold(result.hits, result.flaky)
        gained = novelty is not None and novelty.interesting
        finished = Finished(
            test.k,
            test.seed,
            result,
            None,
            gen=gen,
            parent=parent.test_id,
            meta={
                "settings": self.cfg.settings.to_json(),
                "generator": self.cfg.to_json()["generator"],
                "versions": self.versions,
                "tzer": {k: gen[k] for k in ("origin", "chain", "passes", "mode", "seed", "tir")},
            },
            material=material,
        )
        assert self.scheduler is not None
        self.ledger.commit(finished, novelty, self.scheduler.state(), last=self.done())
        if self.cfg.feedback:
            child = Entry(parent.origin, m.chain, m.passes, m.func, test.k) if gained else None
            self.pool.observe(parent, mode, gained, child)
        self.breaker.note(None)
