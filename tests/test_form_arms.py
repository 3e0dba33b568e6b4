"""An op's ONNX export form is a choice the scheduler learns: one arm per (form draw, option)."""

from __future__ import annotations

import json

from nnsmith_cov.abstract.op import export_forms
from nnsmith_cov.coverage.covmap import Novelty
from nnsmith_cov.feedback.scheduler import Proposal, Scheduler
from nnsmith_cov.gen.generator import GenConfig, GenRecord, generate
from nnsmith_cov.ops import ALL_OPS, select_ops

NAMES = ["Conv2d", "Relu", "Add"]
FORMS = {"conv.form": ("bias", "add")}


def test_the_op_library_declares_its_form_draws():
    forms = export_forms(ALL_OPS)
    assert forms["conv.form"] == ("bias", "add") and forms["interp.form"] == ("sizes", "scales")
    assert set(forms) == {"conv.form", "linear.form", "interp.form", "clip.form"}


def test_the_scheduler_learns_the_form_that_pays():
    s = Scheduler(NAMES, 5, seed=3, forms=FORMS)
    for k in range(300):
        p = s.propose()
        form = k % 2  # the tests alternate; only the "add" form finds something
        record = GenRecord(seed=k, ops=["Conv2d", "Relu"], draws=[("op", 0), ("conv.form", form)])
        s.observe(p, record, Novelty(3, 0) if form == 1 else Novelty(0, 0))
    w = s.propose().form_weights["conv.form"]
    assert w[1] > 1.5 * w[0]
    back = Scheduler.from_state(json.loads(json.dumps(s.state())))
    assert back.propose() == s.propose()  # the form arms resume with the rest


def test_form_weights_steer_the_generator_and_a_seed_still_replays():
    ops = select_ops(["Conv2d", "Relu"])
    base = GenConfig(nodes=4, ops=ops)
    steered = Scheduler.apply(Proposal(None, 0.5, None, 4, False, form_weights={"conv.form": [0.0, 1.0]}), base)
    seen = []
    for seed in range(40):
        gen = generate(steered, seed)
        seen += [v for label, v in gen.record.draws if label == "conv.form"]
        again = generate(steered, seed)
        assert again.graph.to_json() == gen.graph.to_json()
    assert seen and set(seen) == {1}  # every Conv2d in the "add" form
    uniform = [v for seed in range(40) for label, v in generate(base, seed).record.draws if label == "conv.form"]
    assert set(uniform) == {0, 1}


def test_a_schema_4_state_resumes_without_form_evidence():
    s = Scheduler(NAMES, 5, seed=3, forms=FORMS)
    old = json.loads(json.dumps(s.state()))
    old["schema"] = 4
    del old["hedged"], old["config"]["params"]["hedge"]  # (nor the hedge: schema 9)
    del old["config"]["forms"], old["groups"]["form"], old["config"]["caps"]
    back = Scheduler.from_state(old)
    assert back.forms == {} and "form" not in back.groups
    proposal = s.propose().to_json()
    del proposal["form_weights"]
    assert Proposal.from_json(proposal).form_weights is None
