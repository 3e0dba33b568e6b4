"""A test as the driver proposes it to a worker, which generates its graph itself.

The driver decides everything random about a test (its seed, the scheduler's proposal, the
parent and the donor, the mutation's edit: `feedback.mutate.prepare`), so the worker's part is
a pure function of the request: the same request gives the same graph wherever it runs. The
request carries, as JSON, the generator calls to try in order (the mutation, then growth) and
the fresh configuration to fall back on, exactly as `Fuzzer` tried them when it generated in
the driver:

  {"kind": "propose", "test": 17, "seed": 881, "generator": "nnsmith",
   "calls": [<call_json(mutate.Call)>, ...], "fresh": <gen_config_json(GenConfig)>,
   "search": {"method": "gradient", ...}}

`generate_proposed` is the worker's side; `record_from_json` reads the GenRecord back.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nnsmith_cov.abstract.choice import ReplayDivergence
from nnsmith_cov.campaign.internal import FLOORS, gen_config_from_json, gen_config_json
from nnsmith_cov.feedback import mutate
from nnsmith_cov.gen.binning import BinChoice
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError, GenRecord

FRESH = -1  # the index a reply gives for the fresh fallback (no call of the list)

# Op sets encoded and decoded once: a campaign's op set changes only when support is learned,
# and decoding a narrowed set makes new op classes (which generation caches are keyed on).
_OPS_TEXT: dict[tuple[int, ...], tuple[tuple[Any, ...], dict[str, list[str]]]] = {}
_OPS_BACK: dict[str, list[Any]] = {}
_CACHE_LIMIT = 64


def config_json(cfg: GenConfig) -> dict[str, Any]:
    """`gen_config_json(cfg)`, its op set (signatures and opset floors) encoded once per
    distinct op set."""
    key = tuple(id(op) for op in cfg.ops)
    cached = _OPS_TEXT.get(key)
    if cached is None:
        if len(_OPS_TEXT) >= _CACHE_LIMIT:
            _OPS_TEXT.clear()
        # the classes are kept with their text: while cached, no other class can take their ids
        ops = gen_config_json(GenConfig(ops=cfg.ops))
        cached = _OPS_TEXT[key] = (tuple(cfg.ops), {"ops": ops["ops"], FLOORS: ops[FLOORS]})
    return gen_config_json(dataclasses.replace(cfg, ops=())) | cached[1]


def config_from_json(obj: Mapping[str, Any]) -> GenConfig:
    """`gen_config_from_json(obj)`, one op list per distinct op set (ValueError like it)."""
    obj = dict(obj)
    floors = obj.pop(FLOORS, None)
    ops_text = obj.pop("ops", None) or {}
    key = json.dumps([ops_text, floors], sort_keys=True)
    ops = _OPS_BACK.get(key)
    if ops is None:
        if len(_OPS_BACK) >= _CACHE_LIMIT:
            _OPS_BACK.clear()
        ops_obj = {"ops": ops_text} if floors is None else {"ops": ops_text, FLOORS: floors}
        ops = _OPS_BACK[key] = gen_config_from_json(ops_obj).ops
    return dataclasses.replace(gen_config_from_json(obj), ops=ops)


def call_json(call: mutate.Call) -> dict[str, Any]:
    return {
        "cfg": config_json(call.cfg),
        "prefix": [[label, value] for label, value in call.prefix],
        "lenient": call.lenient,
        "parent": call.parent,
        "mutation": None if call.mutation is None else call.mutation.to_json(),
        "min_ops": call.min_ops,
    }


def call_from_json(obj: Mapping[str, Any]) -> mutate.Call:
    mutation = None if obj["mutation"] is None else mutate.Mutation.from_json(obj["mutation"])
    prefix = [(str(label), value) for label, value in obj["prefix"]]
    cfg = config_from_json(obj["cfg"])
    return mutate.Call(cfg, prefix, bool(obj["lenient"]), int(obj["parent"]), mutation, int(obj["min_ops"]))


def record_json(record: GenRecord) -> dict[str, Any]:
    """Everything a GenRecord holds (its `to_json` and its draws)."""
    return record.to_json() | {"draws": [[label, value] for label, value in record.draws]}


def record_from_json(obj: Mapping[str, Any]) -> GenRecord:
    """The record back, a baseline's (with its generator's name and steps) as a BaselineRecord."""
    from nnsmith_cov.baselines.record import BaselineRecord

    kw = dict(obj)
    kw["bins"] = [BinChoice(**b) for b in kw.get("bins", [])]
    kw["draws"] = [(str(label), value) for label, value in kw.get("draws", [])]
    cls = BaselineRecord if "generator" in kw else GenRecord
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kw.items() if k in names})


@dataclass
class Outcome:
    """What the worker made of a proposal: the graph from call `index` (FRESH: the fresh
    fallback), or none (`failed`: the generator gave up; `error`: our own code raised, with
    the call in progress as `index`)."""

    index: int
    gen: Generated | None = None
    failed: bool = False
    error: BaseException | None = None


def generate_proposed(generator: str, calls: Sequence[mutate.Call], fresh: GenConfig, seed: int) -> Outcome:
    """Try the calls in order (a mutant, then the parent grown; one that does not apply to the
    graph or gives none is passed over), then a fresh graph, as the campaign always did."""
    from nnsmith_cov.baselines import generate_with

    index = FRESH
    try:
        for index, call in enumerate(calls):
            try:
                gen = mutate.make(call, seed)
            except (GenerationError, ReplayDivergence):
                continue
            if gen is not None:
                return Outcome(index, gen)
        index = FRESH
        try:
            return Outcome(FRESH, generate_with(generator, fresh, seed))
        except GenerationError:
            return Outcome(FRESH, failed=True)
    except Exception as e:  # noqa: BLE001 - our own code's error: the caller reports it as such
        return Outcome(index, error=e)
