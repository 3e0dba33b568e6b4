"""`nnsmith-cov reduce`: delta debugging of a finding's graph, a minimal bundle, a standalone repro.py.

candidates.py  cuts of the original graph and the edits that shrink them
trace.py       every value of one PyTorch run of the whole graph (in a child process)
check.py       one candidate in the crash-isolated worker: does it keep the finding?
delta.py       the search (outputs, nodes, private subgraphs, leaf values) to a fixpoint
script.py      repro.py: numpy, onnx and the backend, nothing of nnsmith-cov
engine.py      a bundle in, BUNDLE/reduced out (reduce_bundle: also what triage calls)
command.py     the command line
"""
