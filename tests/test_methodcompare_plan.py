"""Compare Methods' time budget planned across the methods and the cores (issue 25): the
planner as a pure function, and the lanes of :func:`core.methodcompare.run_comparison`
by what they observably do (trainings overlap, a cancel keeps what finished, their progress
moves the comparison's), not by time; the step timing in turns on a simulated machine
whose load comes and goes (:func:`core.comparejob.interleaved_step_ms`), not by a clock.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from neural_rom.core import registry
from neural_rom.core.errors import JobCancelled, NeuralRomError
from neural_rom.core.jobs import compare_methods as mc


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
    return {"state": str(tmp_path / "state.json"), "methods": methods, mc.BASELINE: None}


def _compare(c: dict) -> dict:
    return {"frames": 5, "max": 0.02, "mean": 0.01, "step_ms": 1.0, "diagonal": 1.0}


class Trainer:
    """Fake trainings that record how many ran at once; ``meet`` makes the named ones wait
    (up to 60 s) until another is running beside them: with lanes they meet, without they
    could not. Each reports its progress at a quarter, half and three quarters."""

    def __init__(self, meet=(), cancel=()):
        self.lock = threading.Lock()
        self.running, self.most, self.calls = 0, 0, []
        self.meet, self.cancel = set(meet), set(cancel)
        self.other = threading.Event()

    def __call__(self, spec: dict, progress=None) -> dict:
        name = spec["method"]
        for f in (0.25, 0.5, 0.75):
            if progress is not None:
                progress(f, f"epoch {int(4 * f)}/4")
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


def test_the_baseline_kept_under_its_old_key_is_read(tmp_path):
    """A state file written before issue 29 keeps the baseline at equal DOFs under "pca":
    :func:`read_state` reads it as the baseline, and a re-run keeps its models (nothing
    trains again) and shows their closest shapes."""
    spec = _spec(tmp_path, {"a": 0})
    spec[mc.BASELINE] = {
        "train": {"method": "linear", "out": str(tmp_path / mc.BASELINE_FILE), "settings": {}},
        "compares": [{"bake_name": "v1", "out": str(tmp_path / "v1.npz")}],
    }

    def compare(c: dict) -> dict:
        return {**_compare(c), "closest_max": 0.015, "closest_mean": 0.005}

    t = Trainer()
    first = mc.run_comparison(spec, train=t, compare=compare)
    assert t.calls == ["a", "linear"]  # the method, then the baseline at its 3 DOFs
    assert first["rows"][0]["pca_max_m"] == 0.015
    path = tmp_path / mc.STATE_FILE
    state = json.loads(path.read_text(encoding="utf-8"))
    assert list(state[mc.BASELINE]) == ["3"] and mc.OLD_BASELINE not in state
    state[mc.OLD_BASELINE] = state.pop(mc.BASELINE)  # as an earlier version wrote it
    path.write_text(json.dumps(state), encoding="utf-8")
    assert mc.read_state(path)[mc.BASELINE] == state[mc.OLD_BASELINE]
    assert mc.OLD_BASELINE not in mc.read_state(path)
    t = Trainer()
    again = mc.run_comparison(spec, train=t, compare=compare)
    assert t.calls == [] and again["kept"] == ["a"]
    assert again["rows"][0]["pca_max_m"] == 0.015 and again["rows"][0]["pca_mean_m"] == 0.005


# ------------------------------------------------- a lane's training in its child worker


@pytest.mark.parametrize("lanes", [{"a": 0, "b": 0, "c": 0}, {"a": 0, "b": 1, "c": 1}])
def test_the_trainings_progress_moves_the_comparisons_bar(tmp_path, lanes):
    """Session 11's bar moved once per method. Each training's progress now goes into the
    comparison's, weighted by the methods' planned shares (a: 10 s, b: 30 s, c: 60 s): the
    bar passes through the weighted sums of the trainings' fractions, never steps back,
    reaches the trainings' part (TRAINING) when they end, and says which method and epoch."""
    spec = _spec(tmp_path, lanes)
    shares = {"a": 10.0, "b": 30.0, "c": 60.0}
    for e in spec["methods"]:
        e["share_s"] = shares[e["method"]]
    said = []
    mc.run_comparison(spec, train=Trainer(), compare=_compare, say=lambda f, m: said.append((f, m)))
    training = [(f, m) for f, m in said if m.startswith("training ")]
    fractions = [f for f, _ in training]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(mc.TRAINING)
    # every quarter of every method is a step of the bar (9 inside the trainings, each
    # weighted by its share: 0.8 x 0.25 x 10 / 100 = 0.005 is the smallest)
    inside = {round(f, 9) for f in fractions} - {0.0, round(mc.TRAINING, 9)}
    assert len(inside) >= 9 and min(inside) == pytest.approx(mc.TRAINING * 0.25 * 10 / 100)
    if len(set(lanes.values())) == 1:  # one lane: a's quarters, then b's on top of a whole
        assert mc.TRAINING * (10 + 0.5 * 30) / 100 in [pytest.approx(f) for f in fractions]
    assert "training C: epoch 2/4" in {m for _, m in training}
    assert all(f >= mc.TRAINING for f, m in said[said.index(training[-1]) + 1 :])


def test_a_lanes_child_worker_returns_fails_and_cancels(tmp_path, monkeypatch):
    """What :func:`core.jobs.train.train_in_child` gives the lanes, on the worker's self-test
    job: the child's result and its progress, passed on; its error as a NeuralRomError with its
    message; and this worker's cancel forwarded to the child, which stops at its next safe
    point (long before its 1000 steps of 20 ms), as a JobCancelled."""
    from neural_rom.core.jobs import train

    parent = {"log_dir": str(tmp_path)}
    seen = []
    got = train.train_in_child(
        {"kind": "selftest", "method": "ok", "steps": 2}, parent, lambda f, m: seen.append((f, m))
    )
    assert got == {"committed": 2, "steps": 2}
    assert seen == [(0.5, "step 1/2"), (1.0, "step 2/2")]
    with pytest.raises(NeuralRomError, match="simulated user error at step 1: change the input"):
        train.train_in_child({"kind": "selftest", "method": "bad", "error_at": 1}, parent)
    monkeypatch.setattr(train, "should_cancel", lambda: True)
    spec = {"kind": "selftest", "method": "long", "steps": 1000, "sleep": 0.02}
    with pytest.raises(JobCancelled, match="long: training cancelled"):
        train.train_in_child(spec, parent)


def test_the_recommendation_takes_a_near_best_method_only_when_it_is_clearly_faster():
    """Within 10% of the lowest error, a method is preferred only at least 1.5x faster per
    step: a jelly's pick flipped between Shen and LiCROM from one run to the next on
    ms/step the machine's load moved (2.43 vs 1.43 ms, then 4.18 vs 11.3)."""
    from neural_rom.core.jobs.compare_methods import CLEARLY_FASTER, NEAR_BEST, recommend

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


# ------------------------------------------ the step timing, on a machine whose load moves


class Machine:
    """A simulated clock and its load: ``busy`` (start, end, slowdown) spans in which
    another job slows every step that starts there."""

    def __init__(self, busy=()):
        self.now, self.busy = 0.0, list(busy)

    def run(self, seconds: float) -> float:
        slow = max([s for a, b, s in self.busy if a <= self.now < b] or [1.0])
        self.now += seconds * slow
        return seconds * slow


class FakeSim:
    """A model whose steps cost ``cost`` seconds each on a quiet machine (``cost[i % 2]``:
    two kinds of frame) and whose state must be restarted before a replay."""

    def __init__(self, machine: Machine, cost: tuple[float, float]):
        self.machine, self.cost, self.f = machine, cost, None

    def reset(self):
        self.f = 0

    def start_from(self, x0, v0, f0):
        self.f = 0

    def step(self, inputs):
        assert self.f is not None, "stepped before reset or start_from"
        seconds = self.machine.run(self.cost[self.f % 2])
        self.f += 1
        return type("Report", (), {"wall_time": seconds})()

    def positions(self):
        return None


@pytest.mark.parametrize("seed", range(10))
def test_steps_timed_in_turns_drop_the_load_that_fell_on_one_method(seed):
    """Three models with two kinds of frame (3 and 1 ms; 2 ms; 1.2 and 1.6 ms: medians 2,
    2 and 1.4 ms). Other jobs slow the machine 2-6x for stretches of 50-100 ms at random
    times, each stretch shorter than a round (about 270 ms): some round of every model's
    is quiet, so the times in turns are the quiet medians exactly, and the ranking holds.
    Timed one after another with one replay each (the comparison before), the same load
    moves a model's time by its slowdown."""
    from neural_rom.core.jobs.compare import interleaved_step_ms

    rng = np.random.default_rng(seed)
    costs = [(0.003, 0.001), (0.002, 0.002), (0.0012, 0.0016)]
    frames = 48
    busy = []
    t = float(rng.uniform(0.0, 0.05))
    while t < 2.0:  # 5 rounds of ~0.27 s, slowed: within 2 s of simulated time
        length = float(rng.uniform(0.05, 0.1))
        busy.append((t, t + length, float(rng.uniform(2.0, 6.0))))
        t += length + float(rng.uniform(0.3, 0.6))
    machine = Machine(busy)
    runs = [(FakeSim(machine, c), [None] * frames, (None, None, None)) for c in costs]
    got = interleaved_step_ms(runs, rounds=5)
    assert got == pytest.approx([2.0, 2.0, 1.4], rel=1e-9)
    # one replay each, one after another (the comparison before), and a stretch of load
    # that fell on the first model's replay (48 steps of 8 ms): its time is the slowed one
    machine = Machine([(0.0, 0.38, 4.0)])
    once = interleaved_step_ms(
        [(FakeSim(machine, c), [None] * frames, None) for c in costs], rounds=1
    )
    assert once[0] == pytest.approx(4 * 2.0) and once[1:] == pytest.approx([2.0, 1.4])


def test_the_table_takes_the_step_times_in_turns_for_every_replayed_method(tmp_path):
    """``time_steps`` gets one held-out compare spec per replayed method (a kept one too:
    all are timed in the same minutes), and the table's ms/step is its answer; a method that
    failed is not timed. Without ``time_steps`` the replays' own median is kept."""
    spec = _spec(tmp_path, {"a": 0, "b": 0})
    asked = []

    def time_steps(specs):
        asked.append([c["out"] for c in specs])
        return [7.0, 0.5][: len(specs)]

    rows = mc.run_comparison(spec, train=Trainer(), compare=_compare, time_steps=time_steps)["rows"]
    assert asked == [[str(tmp_path / "a_v1.npz"), str(tmp_path / "b_v1.npz")]]
    assert [r["step_ms"] for r in rows] == [7.0, 0.5]
    assert mc.read_state(spec["state"])["methods"]["b"]["step_ms"] == 0.5
    # a re-run keeps both methods and times both again
    rows = mc.run_comparison(spec, train=Trainer(), compare=_compare, time_steps=time_steps)["rows"]
    assert len(asked) == 2 and asked[1] == asked[0]
    (tmp_path / "plain").mkdir()
    plain = _spec(tmp_path / "plain", {"a": 0})
    rows = mc.run_comparison(plain, train=Trainer(), compare=_compare)["rows"]
    assert rows[0]["step_ms"] == _compare({})["step_ms"]
