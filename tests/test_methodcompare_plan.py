"""Compare Methods' time budget planned across the methods and the cores (issue 25): the
planner as a pure function, and the lanes of :func:`core.methodcompare.run_comparison`
by what they observably do (trainings overlap, a cancel keeps what finished), not by time.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from neural_rom.core import methodcompare as mc
from neural_rom.core import registry
from neural_rom.core.errors import JobCancelled, NeuralRomError


def _random_costs(rng: np.random.Generator) -> dict:
    costs = {}
    for i in range(int(rng.integers(1, 7))):
        fixed = float(rng.uniform(0.5, 20.0))
        need = 0.0 if rng.uniform() < 0.3 else float(rng.uniform(0.1, 900.0))
        costs[f"m{i}"] = {"fixed_s": fixed, "need_s": need}
    return costs


@pytest.mark.parametrize("seed", range(20))
def test_shares_sum_to_the_budget_never_more(seed):
    """Per lane: the shares sum to the budget when a method of the lane has a need (to the
    fixed seconds otherwise, never more); every fixed cost is set aside in full; the budgets
    are in proportion to the needs among those above the floor."""
    rng = np.random.default_rng(seed)
    costs = _random_costs(rng)
    lanes = int(rng.integers(1, 4))
    total = sum(c["fixed_s"] for c in costs.values()) + float(rng.uniform(10.0, 2000.0))
    plan = mc.plan_budget(costs, total, lanes)
    assert list(plan) == list(costs)
    for lane in range(lanes):
        mine = [n for n in plan if plan[n]["lane"] == lane]
        spent = sum(plan[n]["share_s"] for n in mine)
        assert spent <= total * (1 + 1e-12)
        if any(costs[n]["need_s"] > 0 for n in mine):
            assert spent == pytest.approx(total, rel=1e-12)
        free = [n for n in mine if (plan[n]["budget_s"] or 0) > mc.MIN_BUDGET_S]
        for a in free:
            for b in free:
                ratio = plan[a]["budget_s"] / plan[b]["budget_s"]
                assert ratio == pytest.approx(costs[a]["need_s"] / costs[b]["need_s"], rel=1e-9)
    for n, c in costs.items():
        assert plan[n]["share_s"] >= c["fixed_s"]  # a fixed cost is never starved
        if c["need_s"] > 0:
            assert plan[n]["budget_s"] >= mc.MIN_BUDGET_S
        else:
            assert plan[n]["budget_s"] is None and plan[n]["share_s"] == c["fixed_s"]


def test_a_method_with_a_fixed_cost_is_not_starved_and_the_lanes_balance():
    """Linear (all fixed, 30 s) beside two learned methods: it keeps its 30 s, the others
    share the rest 1:3 in one lane; in two lanes the costliest goes alone to one lane."""
    costs = {
        "linear": {"fixed_s": 30.0, "need_s": 0.0},
        "a": {"fixed_s": 10.0, "need_s": 100.0},
        "b": {"fixed_s": 10.0, "need_s": 300.0},
    }
    one = mc.plan_budget(costs, 250.0, 1)
    assert one["linear"] == {"lane": 0, "budget_s": None, "share_s": 30.0}
    assert one["a"]["budget_s"] == pytest.approx(50.0) and one["b"]["budget_s"] == pytest.approx(
        150.0
    )
    two = mc.plan_budget(costs, 250.0, 2)
    assert two["b"]["lane"] != two["a"]["lane"] == two["linear"]["lane"]
    assert two["b"]["budget_s"] == pytest.approx(240.0)
    assert two["a"]["budget_s"] == pytest.approx(250.0 - 30.0 - 10.0)


def test_a_tiny_need_gets_the_floor_and_the_sum_holds():
    costs = {"a": {"fixed_s": 1.0, "need_s": 0.001}, "b": {"fixed_s": 1.0, "need_s": 1000.0}}
    plan = mc.plan_budget(costs, 50.0, 1)
    assert plan["a"]["budget_s"] == mc.MIN_BUDGET_S
    assert plan["a"]["share_s"] + plan["b"]["share_s"] == pytest.approx(50.0, rel=1e-12)


def test_a_budget_below_the_fixed_costs_is_refused_saying_what_fits():
    costs = {"linear": {"fixed_s": 30.0, "need_s": 0.0}, "a": {"fixed_s": 20.0, "need_s": 9.0}}
    with pytest.raises(NeuralRomError, match=r"less than the methods take .* give 77 s or more"):
        mc.plan_budget(costs, 40.0, 1)
    with pytest.raises(NeuralRomError, match="must be positive"):
        mc.plan_budget(costs, 0.0, 1)


def test_estimated_costs_come_from_the_record():
    """A method without a time budget is all fixed cost; a learned one sets aside its
    record's multiple of that, and needs its record's default budget, scaled down by fewer
    epochs than its default."""
    linear = mc.estimate_cost(registry.get("linear"), {}, 1000, 200)
    assert linear["need_s"] == 0.0
    assert linear["fixed_s"] == pytest.approx(mc.FIXED_S + mc.FIXED_S_PER_NODE_FRAME * 2e5)
    ae = registry.get("autoencoder")
    got = mc.estimate_cost(ae, {}, 1000, 200)
    assert got["fixed_s"] == pytest.approx(ae.setup_cost * linear["fixed_s"]) and ae.setup_cost > 1
    full = got["need_s"]
    assert full == ae.defaults()["time_budget"]
    quick = mc.estimate_cost(ae, {"epochs": ae.defaults()["epochs"] // 10}, 1000, 200)
    assert quick["need_s"] == pytest.approx(full / 10)


# ------------------------------------------------------------------- the lanes, observed


def _spec(tmp_path, lanes: dict[str, int]) -> dict:
    methods = []
    for name, lane in lanes.items():
        methods.append(
            {
                "method": name,
                "label": name.title(),
                "status": "run",
                "reason": "",
                "lane": lane,
                "train": {"method": name, "out": str(tmp_path / f"{name}.nrmodel")},
                "compares": [{"bake_name": "v1", "out": str(tmp_path / f"{name}_v1.npz")}],
            }
        )
    return {"state": str(tmp_path / "state.json"), "methods": methods, "pca": None}


def _compare(c: dict) -> dict:
    return {"frames": 5, "max": 0.02, "mean": 0.01, "step_ms": 1.0, "diagonal": 1.0}


class Trainer:
    """Fake trainings that record how many ran at once; ``meet`` makes the named ones wait
    (up to 60 s) until another is running beside them: with lanes they meet, without they
    could not."""

    def __init__(self, meet=(), cancel=()):
        self.lock = threading.Lock()
        self.running, self.most, self.calls = 0, 0, []
        self.meet, self.cancel = set(meet), set(cancel)
        self.other = threading.Event()

    def __call__(self, spec: dict) -> dict:
        name = spec["method"]
        with self.lock:
            self.calls.append(name)
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running > 1:
                self.other.set()
        try:
            if name in self.meet:
                assert self.other.wait(60.0), f"{name} trained alone"
            if name in self.cancel:
                raise JobCancelled(f"{name} cancelled by the test")
            with open(spec["out"], "w") as fh:
                fh.write(name)
            return {"dofs": 3}
        finally:
            with self.lock:
                self.running -= 1


def test_two_lanes_train_at_once_one_lane_never(tmp_path):
    t = Trainer(meet=["a"])
    result = mc.run_comparison(_spec(tmp_path, {"a": 0, "b": 1}), train=t, compare=_compare)
    assert t.most == 2 and sorted(result["trained"]) == ["a", "b"]
    assert [r["status"] for r in result["rows"]] == [mc.DONE, mc.DONE]

    t = Trainer()
    spec = _spec(tmp_path / "one", {"a": 0, "b": 0, "c": 0})
    (tmp_path / "one").mkdir()
    result = mc.run_comparison(spec, train=t, compare=_compare)
    assert t.most == 1 and t.calls == ["a", "b", "c"]  # in the plan's order


def test_a_cancel_in_one_lane_keeps_what_the_lanes_finished(tmp_path):
    """Lane 0 trains a then is cancelled in c; lane 1 trains b (beside a or c: both wait
    until two ran at once). The cancel keeps a and b (trained, not yet replayed); c is not in
    the state; the re-run trains c alone, replays all three."""
    spec = _spec(tmp_path, {"a": 0, "c": 0, "b": 1})
    t = Trainer(meet=["b", "c"], cancel=["c"])
    with pytest.raises(JobCancelled, match="2 method.s. finished are kept") as info:
        mc.run_comparison(spec, train=t, compare=_compare)
    assert sorted(info.value.result["trained"]) == ["a", "b"]
    state = mc.read_state(spec["state"])
    assert {n: e["status"] for n, e in state["methods"].items()} == {
        "a": mc.TRAINED,
        "b": mc.TRAINED,
    }
    t = Trainer()
    result = mc.run_comparison(spec, train=t, compare=_compare)
    assert t.calls == ["c"] and sorted(result["kept"]) == ["a", "b"]
    assert [r["status"] for r in result["rows"]] == [mc.DONE] * 3


# ------------------------------------------------- a lane's training in its child worker


def test_a_lanes_child_worker_returns_fails_and_cancels(tmp_path, monkeypatch):
    """What :func:`worker._train_in_child` gives the lanes, on the worker's self-test job:
    the child's result; its error as a NeuralRomError with its message; and this worker's
    cancel forwarded to the child, which stops at its next safe point (long before its 1000
    steps of 20 ms), as a JobCancelled."""
    from neural_rom import worker
    from neural_rom.core import jobs

    parent = {"log_dir": str(tmp_path)}
    got = worker._train_in_child({"kind": "selftest", "method": "ok", "steps": 2}, parent)
    assert got == {"committed": 2, "steps": 2}
    with pytest.raises(NeuralRomError, match="simulated user error at step 1: change the input"):
        worker._train_in_child({"kind": "selftest", "method": "bad", "error_at": 1}, parent)
    monkeypatch.setattr(jobs, "should_cancel", lambda: True)
    spec = {"kind": "selftest", "method": "long", "steps": 1000, "sleep": 0.02}
    with pytest.raises(JobCancelled, match="long: training cancelled"):
        worker._train_in_child(spec, parent)


def test_the_recommendation_takes_a_near_best_method_only_when_it_is_clearly_faster():
    """Within 10% of the lowest error, a method is preferred only at least 1.5x faster per
    step: a jelly's pick flipped between Shen and LiCROM from one run to the next on
    ms/step the machine's load moved (2.43 vs 1.43 ms, then 4.18 vs 11.3)."""
    from neural_rom.core.methodcompare import CLEARLY_FASTER, NEAR_BEST, recommend

    def row(method, mean, ms):
        return {"method": method, "label": method, "status": "done", "mean_m": mean,
                "max_m": 2 * mean, "mean_pct": 1.0, "step_ms": ms}  # fmt: skip

    best = row("shen", 0.010, 3.0)
    assert recommend([best, row("licrom", 0.0105, 2.5)])["method"] == "shen"  # 1.2x: noise
    fast = row("licrom", 0.0105, 3.0 / CLEARLY_FASTER)
    rec = recommend([best, fast])
    assert rec["method"] == "licrom" and "faster per step" in rec["reason"]
    far = row("snp", NEAR_BEST * 0.010 * 1.01, 0.01)  # 300x faster but not near the best
    assert recommend([best, far])["method"] == "shen"
