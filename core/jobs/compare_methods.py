"""Compare Methods: train every method an object's data allows, replay its held-out bakes
with each model, and say which to use (no bpy, no torch).

The add-on plans the comparison (:mod:`addon.compare.methods`: which methods can take the
object's data, each one's train job and compare jobs, as ``train`` and ``compare`` would
make them); the worker runs it here as one job (:func:`run_comparison`), calling the same
train and compare runners those commands' jobs call, so each method's numbers are its own
``compare``'s. Beside each method, the closest shapes of a linear (PCA) model with as many
DOFs (a linear model trained with ``k`` set to the method's DOFs): what a learned method's
extra machinery buys over PCA at equal size.

The budget (:func:`plan_budget`): the user's seconds of wall time for all the trainings.
Each method's cost is estimated (:func:`estimate_cost`): a fixed part no budget shortens (the
job's start, the PCA and cubature every method fits: a cost model of the bakes' nodes x
frames) and a need (the record's own default time budget, scaled by the epochs asked for).
The methods are spread over ``lanes`` processes (the costliest first, each to the least
loaded lane); in each lane the fixed parts are set aside and the rest is shared in
proportion to the needs, as each method's ``time_budget``. Several lanes train at once, each
training in a child worker with one thread (the worker's runner), each passing its
training's progress on to the comparison's (weighted by the planned shares, so the bar moves
while the lanes train). The replays come after every training, one at a time.

Resume: the state file (``<cache dir>/<object>/compare_methods/state.json``, written
atomically after each training and each method's replays) keeps each finished method's
training result, model-file stamp and replays under the key of what it was given (bakes, settings, held-out bakes); a
re-run, after a cancel or a crash, keeps every finished method whose key and model file are
unchanged (a trained one not yet replayed is replayed) and trains only the others. A cancelled comparison thus keeps what it finished.

Step times: timed one method after another, each model met whatever else the machine ran
in its own minute, and a jelly's Shen and LiCROM swapped places from run to run (2.43 vs
1.43 ms, then 4.18 vs 11.3). After the replays every model is timed again with the others,
in turns (:func:`.compare.step_times`: the least of several rounds, each round's
median step); the table's ms/step is that.

Recommendation (:func:`recommend`): among the methods that replayed, the lowest mean
replay error over the held-out bakes; a method within :data:`NEAR_BEST` of it that steps
at least :data:`CLEARLY_FASTER` times faster is preferred (the difference in error is within
what another seed or bake moves; a smaller difference in speed is within what the machine's
load still moves).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..data.files import json_default, write_atomic
from ..errors import JobCancelled, NeuralRomError
from .compare import compare_with_bake, step_times
from .events import Progress, log, should_cancel
from .train import run_train, train_in_child

SCHEMA = 1
STATE_FILE = "state.json"
#: The state's section of the baseline at equal DOFs (:func:`.registry.baseline`, the PCA
#: models), by DOF count; state files written before issue 29 name it :data:`OLD_BASELINE`,
#: which :func:`read_state` still reads.
BASELINE = "baseline"
OLD_BASELINE = "pca"
#: The baseline's train job's model file (its folder holds the ``pca_k<dofs>.nrmodel``
#: models): a name on disk, kept.
BASELINE_FILE = "pca.nrmodel"

#: A method whose mean replay error is within this factor of the best one's counts as as
#: good: the faster of them is recommended.
NEAR_BEST = 1.1
#: ... and it is preferred only when its median step is at least this many times faster.
CLEARLY_FASTER = 1.5

#: Statuses of a method in the table (and ``trained``: in the state, trained but not yet
#: replayed, which a re-run keeps and replays).
DONE, REFUSED, FAILED, TRAINED = "done", "refused", "failed", "trained"

#: Steps the runtime's memory is measured over (:func:`.compare.runtime_memory`).
MEMORY_STEPS = 10
#: The trainings' part of the comparison's progress (the replays and PCA the rest).
TRAINING = 0.8
#: The PCA models at equal DOFs give their closest shapes alone (the basis, whatever the
#: cubature): one cubature element, not the linear method's fit. At 29 modes on a 10,192-tet
#: stalk the fit took 83 of the training's 86 s; with this, 2.5 s (load 5-6).
PCA_SETTINGS = {"max_cubature": 1}


#: A method's seconds that no time budget shortens (the job starting, the PCA and the
#: cubature every method fits before any network trains), as a cost model of the training
#: data's size: ``FIXED_S + FIXED_S_PER_NODE_FRAME * nodes * frames``. Fitted to linear
#: (which is nothing but that), timed in Compare Methods' lanes at load 10-17 on 2 cores:
#: 3.9 s on a 158-node board and 4.4 s on a 1,131-node sphere, 4 x 49 frames each (31k and
#: 222k node-frames); the job's start is most of it. Each record scales it by its
#: ``setup_cost`` (the seconds its training took beyond its budget over linear's, on the board
#: and on the README's tail: autoencoder 2.1-2.3, Shen 3.2-4.6, snp 0.9-3.4, LiCROM 1.0-2.1).
FIXED_S = 3.5
FIXED_S_PER_NODE_FRAME = 5e-6
#: The least time budget a method trains with (its setting's minimum).
MIN_BUDGET_S = 1.0


def estimate_cost(record, settings: dict, nodes: int, frames: int) -> dict:
    """What training ``record`` (a :class:`.registry.Method`) with ``settings`` on ``frames``
    frames of ``nodes`` nodes costs, in seconds: ``fixed_s`` (what no budget shortens: the
    linear method's cost model, :data:`FIXED_S` and the data's size, times the record's
    ``setup_cost``) and ``need_s`` (the network
    training its settings ask for: the record's own default ``time_budget``, what its
    author measured its default epochs take, scaled by the ``epochs`` asked for over the
    default; 0 for a method without a time budget, whose cost is all fixed)."""
    fixed = (FIXED_S + FIXED_S_PER_NODE_FRAME * float(nodes) * float(frames)) * float(
        record.setup_cost
    )
    defaults = record.defaults()
    if "time_budget" not in defaults:
        return {"fixed_s": fixed, "need_s": 0.0}
    need = float(defaults["time_budget"])
    asked, default = settings.get("epochs"), defaults.get("epochs")
    if asked and default:
        need *= min(1.0, float(asked) / float(default))
    return {"fixed_s": fixed, "need_s": need}


def plan_budget(costs: dict[str, dict], total_s: float, lanes: int = 1) -> dict[str, dict]:
    """Share ``total_s`` seconds of wall time among the methods of ``costs`` trained in
    ``lanes`` processes at once.

    Each method goes to a lane, the costliest first, each to the lane with the least cost so
    far (so the lanes end together). In a lane, every method's ``fixed_s`` is set aside
    first (a method with a fixed cost is never starved of it); what is left is shared by
    the lane's methods with a ``need_s`` in proportion to it, as their time budgets.

    Parameters
    ----------
    costs : ``{name: {"fixed_s", "need_s"}}`` (:func:`estimate_cost`), in the order to train
    total_s : seconds of wall time for the whole comparison (> 0)
    lanes : trainings at once (>= 1)

    Returns
    -------
    ``{name: {"lane", "budget_s", "share_s"}}`` in the order of ``costs``: ``budget_s`` the
    time budget to train with (None for a method without a need; at least
    :data:`MIN_BUDGET_S`), ``share_s`` its ``fixed_s`` plus that. In every lane the shares sum to ``total_s`` at most, exactly when
    a method of the lane has a need.

    Raises
    ------
    NeuralRomError
        ``total_s`` is not positive, or is below a lane's fixed seconds (names the least
        budget that fits).
    """
    if not (total_s > 0):
        raise NeuralRomError(f"The time budget must be positive seconds, got {total_s}.")
    lanes = max(1, int(lanes))
    load = [0.0] * lanes
    lane_of = {}
    for name in sorted(costs, key=lambda n: -(costs[n]["fixed_s"] + costs[n]["need_s"])):
        i = min(range(lanes), key=lambda j: (load[j], j))
        lane_of[name] = i
        load[i] += costs[name]["fixed_s"] + costs[name]["need_s"]

    def least(j: int) -> float:  # what lane j takes at the least
        return sum(
            costs[n]["fixed_s"] + (MIN_BUDGET_S if costs[n]["need_s"] > 0 else 0.0)
            for n in costs
            if lane_of[n] == j
        )

    plan = {}
    for i in range(lanes):
        mine = [n for n in costs if lane_of[n] == i]
        fixed = sum(costs[n]["fixed_s"] for n in mine)
        if least(i) > total_s:
            least_s = max(least(j) for j in range(lanes))
            raise NeuralRomError(
                f"A time budget of {total_s:g} s is less than the methods take whatever their "
                f"budget ({least_s:.0f} s estimated: starting, PCA and cubature): give "
                f"{math.ceil(1.5 * least_s)} s or more, or fewer methods (--method)."
            )
        budgets = _proportional(
            {n: costs[n]["need_s"] for n in mine if costs[n]["need_s"] > 0}, total_s - fixed
        )
        for n in mine:
            budget = budgets.get(n)
            plan[n] = {
                "lane": i,
                "budget_s": budget,
                "share_s": costs[n]["fixed_s"] + (budget or 0.0),
            }
    return {n: plan[n] for n in costs}


def _proportional(need: dict[str, float], seconds: float) -> dict[str, float]:
    """``seconds`` shared in proportion to ``need``, each share at least
    :data:`MIN_BUDGET_S` (those below it get it, the others share the rest); the shares
    sum to ``seconds`` (which the caller checked covers the least)."""
    floored: set[str] = set()
    while True:
        rest = seconds - MIN_BUDGET_S * len(floored)
        total = sum(v for n, v in need.items() if n not in floored)
        share = {n: rest * v / total for n, v in need.items() if n not in floored}
        low = {n for n, v in share.items() if v < MIN_BUDGET_S}
        if not low:
            return {n: share.get(n, MIN_BUDGET_S) for n in need}
        floored |= low


def _key(entry: dict) -> str:
    """What a method's result depends on (its train spec's bakes, settings, method and mesh;
    the bakes it replays), as a string."""
    train = entry.get("train") or {}
    return json.dumps(
        [
            entry["method"],
            train.get("bakes"),
            train.get("settings"),
            train.get("mesh_hash"),
            [c.get("bake") for c in entry.get("compares") or ()],
        ],
        sort_keys=True,
        default=json_default,
    )


def _stamp(path: str | os.PathLike) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def read_state(path: str | os.PathLike) -> dict:
    """The state file at ``path`` (an empty state when it is missing or unreadable: the
    comparison then starts over)."""
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"schema": SCHEMA, "methods": {}, BASELINE: {}}
    if not isinstance(state, dict) or state.get("schema") != SCHEMA:
        return {"schema": SCHEMA, "methods": {}, BASELINE: {}}
    state.setdefault("methods", {})
    if OLD_BASELINE in state:  # written before issue 29
        state.setdefault(BASELINE, state.pop(OLD_BASELINE))
    state.setdefault(BASELINE, {})
    return state


def _write_state(path: Path, state: dict) -> None:
    text = json.dumps(state, indent=1, default=json_default)
    write_atomic(path, (text + "\n").encode("utf-8"))


def _finished(state: dict, section: str, name: str, key: str) -> dict | None:
    """The kept result of ``name`` when its key and model file are unchanged."""
    got = state.get(section, {}).get(name)
    if not got or got.get("key") != key:
        return None
    if _stamp(got.get("model", "")) != got.get("stamp"):
        return None
    return got


def summarize(replays: list[dict]) -> dict:
    """A method's numbers over its replays of the held-out bakes (each a compare job's
    result): the largest error of any, the frame-weighted mean (the mean over every frame
    and vertex of them all, as one ``compare`` of every bake), the same of the closest
    shapes, the mean step time; metres and milliseconds."""
    frames = [int(r["frames"]) for r in replays]
    total = sum(frames) or 1

    def mean_of(key):
        vals = [r.get(key) for r in replays]
        if any(v is None for v in vals):
            return None
        return sum(float(v) * f for v, f in zip(vals, frames)) / total

    def max_of(key):
        vals = [r.get(key) for r in replays]
        return None if any(v is None for v in vals) else max(float(v) for v in vals)

    return {
        "max_m": max_of("max"),
        "mean_m": mean_of("mean"),
        "closest_max_m": max_of("closest_max"),
        "closest_mean_m": mean_of("closest_mean"),
        "step_ms": sum(float(r["step_ms"]) for r in replays) / max(len(replays), 1),
        "diagonal_m": float(replays[0]["diagonal"]) if replays else 0.0,
        "frames": sum(frames),
    }


def run_comparison(
    spec: dict,
    *,
    train: Callable[[dict], dict],
    compare: Callable[[dict], dict],
    say: Callable[[float, str], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    time_steps: Callable[[list[dict]], list[float]] | None = None,
) -> dict:
    """Train and replay every method of the plan ``spec`` (from :mod:`addon.compare.methods`),
    keeping finished ones from the state file.

    The trainings run first, ``spec["lanes"]`` at once (default 1): the methods of each lane
    (``entry["lane"]``, :func:`plan_budget`) one after another, each lane in a thread that
    calls ``train`` (the worker's runs each training in a child process with one thread when
    there are several lanes). Then, with nothing else running (the step times are measured),
    each trained model replays the held-out bakes, and last the PCA models at equal DOFs
    train and replay. A method's state is written when it is trained and again when it has
    replayed, so a cancel keeps both.

    Parameters
    ----------
    spec : ``state`` (the state file), ``lanes``, ``methods``: a list of ``{"method",
        "label", "status": "run" or "refused", "reason", "lane", "train": a train job spec,
        "compares": compare job specs, one per held-out bake and one for the user's shot
        (``role`` "held out" or "shot")}``; ``baseline``: ``{"train": the baseline's train job spec,
        "compares": compare job specs}`` (the model and result paths are set per DOF count),
        or None
    train, compare : ``train(spec, progress=)`` and ``compare(spec)`` run one train /
        compare job spec (the worker's runners); they raise :class:`JobCancelled` on a
        cancel. ``train`` is called from several threads at once when there are several
        lanes; it passes its training's progress on as ``progress(fraction, message)``
        (0..1), which goes into the comparison's, weighted by each method's planned share.
    say : ``say(fraction, message)``, the comparison's progress (0..1)
    time_steps : ``time_steps(compare specs) -> ms per step``, each model's step timed
        with the others' in turns (:func:`.compare.step_times`), after every
        replay; the table's ms/step. None: each replay's own median step.

    Returns
    -------
    dict: ``rows`` (:func:`table_rows`), ``recommendation`` (:func:`recommend`), ``state``,
    ``trained`` and ``kept`` (method names), ``results`` (each done method's training
    result, for the add-on to record the recommended one on the object).

    Raises
    ------
    JobCancelled
        With ``result`` set to what was kept so far (the state file holds it too).
    """
    import threading

    lock = threading.Lock()  # the state, the lists and the progress, shared by the lanes
    _say = say or (lambda fraction, message: None)

    def say(fraction: float, message: str) -> None:
        with lock:
            _say(fraction, message)

    state_path = Path(spec["state"])
    state = read_state(state_path)
    plan = list(spec["methods"])
    runnable = [e for e in plan if e["status"] == "run"]
    n = max(len(runnable), 1)
    trained, kept = [], []
    keys = {e["method"]: _key(e) for e in runnable}
    to_train = []
    for entry in runnable:
        name = entry["method"]
        got = _finished(state, "methods", name, keys[name])
        if got is not None:  # done, trained (replays next) or failed (its reason kept)
            kept.append(name)
            say(0.0, f"{name}: kept from the last comparison")
        else:
            state["methods"].pop(name, None)
            to_train.append(entry)
    stop = threading.Event()  # a lane was cancelled: the others start nothing more
    cancels: list[JobCancelled] = []
    crashes: list[BaseException] = []
    # the trainings' share of the bar (0..TRAINING): each method's progress weighted by its
    # planned seconds, so the lanes training at once move it together
    weight = {e["method"]: float(e.get("share_s") or 1.0) for e in to_train}
    trained_part = {name: 0.0 for name in weight}

    def training_progress(entry: dict) -> Callable[[float, str], None]:
        name, label = entry["method"], entry["label"]

        def progress(fraction: float, message: str) -> None:
            with lock:  # one lock for the sum and the report: the bar never steps back
                trained_part[name] = max(trained_part[name], min(max(float(fraction), 0.0), 1.0))
                done = sum(weight[m] * f for m, f in trained_part.items())
                _say(TRAINING * done / sum(weight.values()), f"training {label}: {message}")

        return progress

    def run_lane(entries: list[dict]) -> None:
        for entry in entries:
            name = entry["method"]
            if stop.is_set() or (should_cancel is not None and should_cancel()):
                stop.set()
                return
            progress = training_progress(entry)
            progress(0.0, "starting")
            t0 = time.perf_counter()
            try:
                result = train(entry["train"], progress=progress)
            except JobCancelled as exc:
                with lock:
                    cancels.append(exc)
                stop.set()
                return
            except NeuralRomError as exc:  # listed with its reason, never silently missing
                with lock:
                    state["methods"][name] = {
                        "key": keys[name],
                        "status": FAILED,
                        "reason": str(exc),
                    }
                    _write_state(state_path, state)
                progress(1.0, "failed")
                continue
            except BaseException as exc:  # a bug: raised in the caller's thread
                with lock:
                    crashes.append(exc)
                stop.set()
                return
            model = entry["train"]["out"]
            with lock:
                state["methods"][name] = {
                    "key": keys[name],
                    "status": TRAINED,
                    "model": model,
                    "stamp": _stamp(model),
                    "train": _jsonable(result),
                    "seconds": time.perf_counter() - t0,
                }
                _write_state(state_path, state)
                trained.append(name)
            progress(1.0, "trained")

    lanes: dict[int, list[dict]] = {}
    for entry in to_train:
        lanes.setdefault(int(entry.get("lane") or 0), []).append(entry)
    if len(lanes) <= 1:
        for entries in lanes.values():
            run_lane(entries)
    else:
        threads = [
            threading.Thread(target=run_lane, args=(e,), daemon=True) for e in lanes.values()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if crashes:
        raise crashes[0]
    if cancels or stop.is_set():
        raise _cancelled(state_path, trained, kept) from (cancels[0] if cancels else None)

    # the replays, one at a time (nothing else running while their memory is measured)
    for i, entry in enumerate(runnable):
        name = entry["method"]
        got = state["methods"].get(name)
        if not got or got.get("status") != TRAINED:
            continue
        if should_cancel is not None and should_cancel():
            raise _cancelled(state_path, trained, kept)
        replays = []
        try:
            for j, c in enumerate(entry["compares"]):
                say(TRAINING + 0.13 * i / n, f"{entry['label']} replays {c['bake_name']}")
                if j == 0:  # the runtime's memory, once per method
                    c = {**c, "memory_steps": MEMORY_STEPS}
                replays.append({**compare(c), "role": c.get("role", "held out")})
        except JobCancelled as exc:
            raise _cancelled(state_path, trained, kept) from exc
        except NeuralRomError as exc:
            got.update(status=FAILED, reason=str(exc))
            _write_state(state_path, state)
            continue
        got.update(status=DONE, replays=replays)
        _write_state(state_path, state)
    if time_steps is not None:
        _time_steps(runnable, state, state_path, time_steps, say, trained, kept)
    baseline = spec.get(BASELINE)
    if baseline:
        _baseline_at_equal_dofs(
            baseline, state, state_path, say, should_cancel, train, compare, trained, kept
        )
    rows = table_rows(plan, state)
    return {
        "rows": rows,
        "recommendation": recommend(rows),
        "state": str(state_path),
        "trained": trained,
        "kept": kept,
        "results": {
            r["method"]: state["methods"][r["method"]]["train"] for r in rows if r["status"] == DONE
        },
    }


def _time_steps(runnable, state, state_path, time_steps, say, trained, kept) -> None:
    """Every replayed method's ms per step, timed with the others in turns on its first
    held-out bake (the kept methods' too: the table's step times come from the same
    minutes), written to the state as ``step_ms``."""
    timed = [
        (e, next(c for c in e["compares"] if c.get("role", "held out") != "shot"))
        for e in runnable
        if state["methods"].get(e["method"], {}).get("status") == DONE
    ]
    if not timed:
        return
    say(0.93, f"timing the steps of {len(timed)} model(s) in turns")
    try:
        ms = time_steps([c for _, c in timed])
    except JobCancelled as exc:
        raise _cancelled(state_path, trained, kept) from exc
    for (entry, _), v in zip(timed, ms):
        state["methods"][entry["method"]]["step_ms"] = float(v)
    _write_state(state_path, state)


def _cancelled(state_path: Path, trained: list, kept: list) -> JobCancelled:
    exc = JobCancelled(
        f"Compare Methods cancelled: {len(trained) + len(kept)} method(s) finished are kept "
        "and a re-run resumes after them."
    )
    exc.result = {"state": str(state_path), "trained": trained, "kept": kept}
    return exc


def _jsonable(result: dict) -> dict:
    return json.loads(json.dumps(result, default=json_default))


def _dofs(entry: dict) -> int:
    r = entry.get("train") or {}
    return int(r.get("dofs") or r.get("latent_dim") or r.get("k") or 0)


def _baseline_at_equal_dofs(
    baseline, state, state_path, say, should_cancel, train, compare, trained, kept
):
    """A linear model with ``k`` = each done method's DOFs: its closest shapes on the same
    held-out bakes (kept in the state under :data:`BASELINE`, by DOF count). Only its basis is used:
    it is trained with one cubature element (:data:`PCA_SETTINGS`) and not replayed
    (``closest_only``)."""
    wanted = sorted({_dofs(e) for e in state["methods"].values() if e.get("status") == DONE} - {0})
    folder = Path(baseline["train"]["out"]).parent
    for d in wanted:
        model = str(folder / f"pca_k{d}.nrmodel")
        base = baseline["train"]["settings"]
        settings = {**base, **PCA_SETTINGS, "k": d, "max_k": max(int(base.get("max_k") or d), d)}
        job = {**baseline["train"], "out": model, "settings": settings, "quiet": True}
        compares = [
            {
                **c,
                "model": model,
                "out": str(folder / f"pca_k{d}_{Path(c['out']).name}"),
                "closest_only": True,
            }
            for c in baseline["compares"]
        ]
        key = _key({"method": f"pca_k{d}", "train": job, "compares": compares})
        if _finished(state, BASELINE, str(d), key) is not None:
            continue
        if should_cancel is not None and should_cancel():
            raise _cancelled(state_path, trained, kept)
        say(0.95, f"PCA with {d} modes (a linear model of each method's size)")
        try:
            train(job)
            replays = [compare(c) for c in compares]
        except JobCancelled as exc:
            raise _cancelled(state_path, trained, kept) from exc
        except NeuralRomError as exc:
            state[BASELINE][str(d)] = {"key": key, "reason": str(exc)}
            _write_state(state_path, state)
            continue
        state[BASELINE][str(d)] = {
            "key": key,
            "model": model,
            "stamp": _stamp(model),
            "replays": replays,
        }
        _write_state(state_path, state)


def table_rows(plan: list[dict], state: dict) -> list[dict]:
    """One row per method of the plan, in the registry's order: ``method``, ``label``,
    ``status`` (done, refused, failed) and ``reason``; for a done one ``dofs``,
    ``model_bytes`` (the model file's size: what it takes on disk and to load),
    ``train_seconds``, the :func:`summarize` numbers and their percentages of the
    diagonal (``*_pct``), ``pca_max_m`` / ``pca_mean_m`` (a linear model's closest shapes
    at as many DOFs; None when it could not be made), and ``replays`` (each held-out
    bake's); with a shot, ``shot_max_m``, ``shot_mean_m`` and ``shot_replays``."""
    rows = []
    for entry in plan:
        name = entry["method"]
        row = {"method": name, "label": entry["label"], "status": entry["status"]}
        got = state["methods"].get(name) if entry["status"] == "run" else None
        if entry["status"] != "run":
            row.update(status=REFUSED, reason=entry["reason"])
        elif got is None:
            row.update(status=FAILED, reason="not run (cancelled before it)")
        elif got["status"] != DONE:
            row.update(status=FAILED, reason=got["reason"])
        else:
            result = got["train"]
            held = [r for r in got["replays"] if r.get("role") != "shot"]
            shot = [r for r in got["replays"] if r.get("role") == "shot"]
            row.update(
                status=DONE,
                reason="",
                dofs=_dofs(got),
                model_bytes=int((got.get("stamp") or [0, 0])[1]),
                **_memory(got["replays"]),
                train_seconds=float(result.get("train_seconds") or got.get("seconds") or 0.0),
                **summarize(held),
                replays=held,
            )
            if got.get("step_ms") is not None:  # timed in turns (_time_steps)
                row["step_ms"] = float(got["step_ms"])
            if shot:  # the user's own shot, never trained on
                row["shot_max_m"] = summarize(shot)["max_m"]
                row["shot_mean_m"] = summarize(shot)["mean_m"]
                row["shot_replays"] = shot
            pca = state.get(BASELINE, {}).get(str(row["dofs"])) or {}
            shapes = summarize(pca["replays"]) if pca.get("replays") else {}
            row["pca_max_m"] = shapes.get("closest_max_m")
            row["pca_mean_m"] = shapes.get("closest_mean_m")
            d = row["diagonal_m"]
            for k in ("max", "mean", "closest_max", "closest_mean", "pca_max", "pca_mean"):
                v = row.get(f"{k}_m")
                row[f"{k}_pct"] = None if v is None or d <= 0 else 100.0 * v / d
        rows.append(row)
    return rows


def _memory(replays: list[dict]) -> dict:
    m = next((r["memory"] for r in replays if r.get("memory")), None) or {}
    return {"memory_bytes": m.get("peak_bytes"), "memory_loaded_bytes": m.get("loaded_bytes")}


def recommend(rows: list[dict]) -> dict:
    """``{"method", "reason"}``: the method to use and why in one line (module docstring);
    ``method`` None when none replayed."""
    done = [r for r in rows if r["status"] == DONE and r.get("mean_m") is not None]
    if not done:
        return {
            "method": None,
            "reason": "No method replayed the held-out bakes; see each one's reason.",
        }
    best = min(done, key=lambda r: r["mean_m"])
    faster = [
        r
        for r in done
        if r["mean_m"] <= NEAR_BEST * best["mean_m"]
        and CLEARLY_FASTER * r["step_ms"] <= best["step_ms"]
    ]
    pick = min(faster, key=lambda r: (r["step_ms"], r["mean_m"])) if faster else best
    text = (
        f"{pick['label']}: held-out replay {_mm(pick['mean_m'])} mean, "
        f"{_mm(pick['max_m'])} max ({pick['mean_pct']:.3g}% of the diagonal mean)"
    )
    if pick is best:
        text += ", the lowest of the methods"
        others = [r for r in done if r is not pick]
        if others:
            second = min(others, key=lambda r: r["mean_m"])
            text += f" ({second['label']} next at {_mm(second['mean_m'])})"
    else:
        text += (
            f", within {100 * (NEAR_BEST - 1):.0f}% of the lowest ({best['label']}, "
            f"{_mm(best['mean_m'])}) and faster per step ({pick['step_ms']:.3g} ms against "
            f"{best['step_ms']:.3g})"
        )
    return {"method": pick["method"], "reason": text + "."}


def _mm(v: float | None) -> str:
    return "-" if v is None else f"{1000.0 * v:.3g} mm"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}%"


def _mb(v: int | None) -> str:
    return "-" if v is None else f"{v / 2**20:.3g}"


def _shot(row: dict) -> str:
    if row.get("shot_mean_m") is None:
        return "-"
    return f"{_mm(row['shot_mean_m'])} (max {_mm(row['shot_max_m'])})"


def table_text(rows: list[dict], recommendation: dict) -> str:
    """The table as text (the CLI prints it; the panel shows its lines)."""
    head = (
        "method",
        "DOFs",
        "train s",
        "replay max",
        "replay mean",
        "closest max",
        "PCA@DOFs max",
        "ms/step",
        "runtime MB",
    )
    lines = [head]
    notes = []
    for r in rows:
        if r["status"] != DONE:
            lines.append((r["method"], *["-"] * (len(head) - 1)))
            notes.append(f"  {r['method']}: {r['status']}: {r['reason']}")
            continue
        lines.append(
            (
                r["method"],
                str(r["dofs"]),
                f"{r['train_seconds']:.1f}",
                f"{_mm(r['max_m'])} ({_pct(r['max_pct'])})",
                f"{_mm(r['mean_m'])} ({_pct(r['mean_pct'])})",
                f"{_mm(r['closest_max_m'])} ({_pct(r['closest_max_pct'])})",
                f"{_mm(r['pca_max_m'])} ({_pct(r['pca_max_pct'])})",
                f"{r['step_ms']:.3g}",
                _mb(r.get("memory_bytes")),
            )
        )
    if any("shot_mean_m" in r for r in rows):  # the user's shot, beside the held-out bakes
        lines = [
            (*line, "shot mean" if i == 0 else _shot(r))
            for i, (line, r) in enumerate(zip(lines, [None, *rows]))
        ]
        head = lines[0]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    if notes:
        text += ["not compared:", *notes]
    text.append(
        f"runtime MB: the peak memory of loading the model and {MEMORY_STEPS} steps (numpy "
        "and Python allocations; a sparse LU's own are not seen), not the file's size"
    )
    text.append(f"use: {recommendation['reason']}")
    return "\n".join(text)


def run_compare_methods(spec: dict) -> dict:
    """``kind: "compare_methods"``: train every method of the add-on's plan and replay the
    held-out bakes with each model (:func:`run_comparison`), through this
    module's train and compare runners; finished methods are kept in the state file, so a
    cancel keeps them and a re-run resumes after them. With ``lanes`` > 1 the plan's lanes
    train at once, each training in a child worker with one thread (:func:`.train.train_in_child`);
    with one lane they train one after another in this process. The trainings' progress is
    the comparison's (a progress event at most every :data:`COMPARE_PROGRESS_S`)."""
    meter = Progress(1000, min_interval=COMPARE_PROGRESS_S)
    logged: set[str] = set()

    def say(fraction: float, message: str) -> None:
        meter.update(int(1000 * fraction), message)
        stage = message.split(":")[0]  # the log has each stage once, not every epoch
        if stage not in logged:
            logged.add(stage)
            log(message)

    def compare(c: dict) -> dict:
        return compare_with_bake(c, should_cancel=should_cancel)

    def time_steps(specs: list[dict]) -> list[float]:
        return step_times(specs, should_cancel=should_cancel)

    train = run_train
    if int(spec.get("lanes") or 1) > 1:

        def train(child: dict, progress=None) -> dict:
            return train_in_child(child, spec, progress)

    return run_comparison(
        spec,
        train=train,
        compare=compare,
        say=say,
        should_cancel=should_cancel,
        time_steps=time_steps,
    )


#: Seconds between two of Compare Methods' progress events (its trainings report often).
COMPARE_PROGRESS_S = 0.25
