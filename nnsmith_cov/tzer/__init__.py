"""A Tzer-style baseline (`fuzz --generator tzer`, TVM only): coverage-guided joint mutation
of TIR PrimFuncs and of the TIR pass sequence they are compiled with, in the same harness.

pool.py      the coverage-gated seed pool and its tolerance switch
mutant.py    one mutant of a pool entry; rebuilding a stored mutant
case.py      the parent's side: with/without passes, crash/hang/inconsistency oracle
loop.py      the campaign's step (TzerFuzzer)
repro.py     re-running a Tzer bundle

The TIR it mutates is handled by nnsmith_cov/tir/; the worker runs it in campaign/tir_request.py.
"""
