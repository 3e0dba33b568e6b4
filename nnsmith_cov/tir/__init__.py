"""TIR tools of the Tzer-style baseline, free of campaign code (the worker imports them).

seeds.py     the seed PrimFuncs (TOPI operators as Relax legalizes them, hand-written TVMScript)
tree.py      walking and rebuilding TIR trees (TVM 0.27 has no Python IR mutator)
mutate.py    IR mutations: each a well-formed PrimFunc or a clean rejection
passes.py    the optional pass menu and pass-sequence mutation

The worker's side of a TIR test (parse, passes, llvm build, run) is campaign/tir_request.py.
"""
