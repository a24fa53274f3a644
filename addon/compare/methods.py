"""Compare Methods on an object: the plan (which methods its data allows, each one's train
job and its replays of the held-out bakes, as ``train`` and ``compare`` make them), the job
that runs it (:func:`..core.methodcompare.run_comparison` in the worker), and recording the
recommended method's model on the object when it is done.

Every method of the registry is in the plan: one that cannot take the object's data (a face
method on FEM bakes, a method whose training needs torch in a job Python without it, one
whose train job refuses the bakes) is listed with the reason. Each trains with the object's
settings of it (its defaults unless the user changed them), ``settings`` on top where the
method has them, and its share of ``budget_s`` as its ``time_budget`` (planned across the
methods and the cores: :func:`make_compare_methods_job`); a method that
would keep the baseline's model in its place when that replays better (its record's
``keeps_baseline_setting``, the autoencoder's ``keep_linear``) does not here, the table
being that comparison.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import bpy

from ...core import registry
from ...core.data.cache import BakeCache, BakeDataset
from ...core.data.files import json_default, write_atomic
from ...core.errors import NeuralRomError
from ...core.jobs import check_interpreter, usable_cores
from ...core.jobs.compare_methods import (
    BASELINE,
    BASELINE_FILE,
    STATE_FILE,
    estimate_cost,
    plan_budget,
)
from .. import prefs, training
from ..io.paths import cache_dir, load_path
from . import bake as compare

FOLDER = "compare_methods"
#: Where the last comparison's table goes (JSON), next to the state.
TABLE_FILE = "table.json"
#: Custom properties of the object: the table's lines for the panel, and each line's method
#: (empty for a method that did not replay), for its "use this row" button.
LINES_PROP = "neural_rom_methods"
ROWS_PROP = "neural_rom_methods_rows"


def folder_of(obj: bpy.types.Object) -> Path:
    return cache_dir(obj) / FOLDER


def _refusal(record, kind: str, python: str) -> str | None:
    """Why ``record`` cannot train on the object's data of ``kind`` in ``python``, or None."""
    try:
        record.check_trains_on(kind)
        check_interpreter(python, tuple(training.job_needs(record)))
    except NeuralRomError as e:
        return str(e)
    return None


def _held_out(paths: list[str], settings: dict) -> list[int]:
    """The bakes the trainer will hold out (every trainer splits whole bakes the same way:
    :meth:`..core.cache.BakeDataset.split` with the method's validation fraction and seed)."""
    ds = BakeDataset.open(paths)
    fraction = float(settings.get("validation_fraction", 0.2))
    return [int(i) for i in ds.split(fraction, int(settings.get("seed", 0)))[1]]


def make_compare_methods_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    *,
    budget_s: float,
    settings: dict | None = None,
    device: str | None = None,
    restart: bool = False,
    only: list[str] | None = None,
    shot: str | None = None,
    processes: int = 0,
    use: str = "best",
) -> dict:
    """The worker job that compares every method on ``obj`` (JSON-able). Nothing on the
    object changes until the job is done (:func:`on_compare_methods_done`).

    ``budget_s`` is planned across the methods and the cores
    (:func:`..core.methodcompare.plan_budget`): ``processes`` trainings at once (0: one per
    usable core, at most one per method; 1 one after another; a GPU device trains one at a
    time), each method's share in proportion to its estimated need
    (:func:`..core.methodcompare.estimate_cost`).

    ``settings``: method settings applied to each method that has them (e.g. ``epochs`` for
    a quick look); ``restart`` forgets the finished methods of an earlier comparison and
    their trainings' checkpoints (every method trains again from the start);
    ``only`` names the methods to train (the others are listed as not asked for); ``shot``
    names one of the object's bakes that is the user's own shot (e.g. ``bake --motion
    scenario``: the animation as it plays): no method trains on it, every one replays it;
    ``use`` (a method's name, "best" or "none") is checked against the plan: a method it
    does not train is refused.

    A cloth object compares the methods that train on its cloth bakes (the registry's
    ``trains_on``); the others are listed with the reason.

    Raises NeuralRomError (nothing changed) when the object is not deformable, trains on
    data without bakes (a face), or has fewer than two bakes (nothing held out).
    """

    s = obj.neural_rom
    if s.role != "DEFORMABLE":
        raise NeuralRomError(
            f"'{obj.name}' is not deformable; set its Neural ROM role to Deformable."
        )
    kind = s.training_data_kind()
    if kind not in ("fem", "cloth"):
        raise NeuralRomError(
            f"Compare Methods compares models of bakes (Bake, Cloth Bake) on bakes they "
            f"never saw; '{obj.name}' trains on its {kind} data, which has none: train its "
            "method with Train (its panel reports its held-out keys)."
        )
    paths, _ = training.object_bakes(obj, scene, kind)  # stale or missing: "re-bake"
    shot_rec = None
    if shot:
        shot_rec = next((b for b in s.bakes if b.name == shot), None)
        if shot_rec is None:
            names = ", ".join(b.name for b in s.bakes)
            raise NeuralRomError(f"'{obj.name}' has no bake named '{shot}'; its bakes are {names}.")
        paths = [p for p in paths if p != str(load_path(shot_rec.path))]
    if len(paths) < 2:
        raise NeuralRomError(
            f"'{obj.name}' has {len(paths)} bake; Compare Methods replays bakes no method was "
            "trained on, which takes 2 or more: bake more variants."
        )
    python = prefs.job_python(bpy.context)
    records = registry.methods()
    for name in only or ():
        registry.get(name)  # an unknown name: refused with the known ones
    reasons = {}
    for r in records:  # what the data refuses first, then what the user did not ask for
        reasons[r.name] = _refusal(r, kind, python)
        if reasons[r.name] is None and only and r.name not in only:
            reasons[r.name] = "not asked for (--method)"
    folder = folder_of(obj)
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / STATE_FILE
    by_path = {str(load_path(rec.path)): rec for rec in s.bakes}
    keep_pending = s.pending_train
    plan, baseline = [], None
    try:
        for record in records:
            entry = {"method": record.name, "label": record.label}
            if reasons[record.name] is not None:
                plan.append({**entry, "status": "refused", "reason": reasons[record.name]})
                continue
            names = {st.name for st in record.settings}
            own = {k: v for k, v in (settings or {}).items() if k in names}
            if record.keeps_baseline_setting:  # the table compares the methods: each its own
                own[record.keeps_baseline_setting] = False
            try:
                job = training.make_train_job(
                    obj, scene, method=record.name, settings=own, device=device
                )
                # its own file: the object's model (of Train) stays as it is until one is used
                job["out"] = str(folder / f"{record.name}.nrmodel")
                if shot_rec is not None:  # never trained on
                    job["bakes"] = [b for b in job["bakes"] if _bake_path(b) in paths]
                held = [by_path[paths[i]] for i in _held_out(paths, job["settings"])]
                compares = []
                for rec, role in [(r, "held out") for r in held] + [(shot_rec, "shot")]:
                    if rec is None:
                        continue
                    c = compare.make_compare_job(
                        obj, scene, bake_path=rec.path, show=False, model=(job["out"], record.name)
                    )
                    c["out"] = str(folder / f"{record.name}_{Path(c['out']).name}")
                    c["role"] = role
                    compares.append(c)
            except NeuralRomError as e:
                plan.append({**entry, "status": "refused", "reason": str(e)})
                continue
            plan.append(
                {
                    **entry,
                    "status": "run",
                    "reason": "",
                    "train": job,
                    "compares": compares,
                }
            )
            if record.baseline:  # PCA at each method's size: the baseline with k = its DOFs
                baseline = {
                    "train": {**job, "out": str(folder / BASELINE_FILE)},
                    "compares": [
                        {**c, "method": record.name} for c in compares if c["role"] != "shot"
                    ],
                }
                baseline["train"]["settings"] = {**job["settings"], "tolerance": None}
    finally:
        s.pending_train = keep_pending  # the plan's train jobs are not this object's Train
    # the budget planned across the methods the data allows and the cores
    runs = [e for e in plan if e["status"] == "run"]
    nodes = len(BakeCache.open(paths[0]).X)
    frames = sum(int(b.frames) for b in s.bakes if str(load_path(b.path)) in set(paths))
    costs = {
        e["method"]: estimate_cost(registry.get(e["method"]), e["train"]["settings"], nodes, frames)
        for e in runs
    }
    lanes = int(processes) if processes and int(processes) > 0 else usable_cores()
    if device not in (None, "", "auto", "cpu"):
        lanes = 1  # one accelerator: one training at a time
    lanes = max(1, min(lanes, len(runs)))
    shares = plan_budget(costs, float(budget_s), lanes) if runs else {}
    for e in runs:
        e.update(lane=shares[e["method"]]["lane"], share_s=shares[e["method"]]["share_s"])
        if shares[e["method"]]["budget_s"] is not None:
            e["train"]["settings"]["time_budget"] = shares[e["method"]]["budget_s"]
    if use not in ("best", "none"):  # the row to use must be one this comparison trains
        registry.get(use)  # an unknown name: refused with the known ones
        entry = next(e for e in plan if e["method"] == use)
        if entry["status"] != "run":
            raise NeuralRomError(
                f"Use {use}: '{obj.name}' does not train it ({entry['reason']}); use the "
                "best, none, or a method the comparison trains."
            )
    if restart:  # the plan is good: forget the finished methods and their trainings
        state.unlink(missing_ok=True)
        for checkpoints in folder.glob("*.checkpoints"):  # else each would resume from its
            shutil.rmtree(checkpoints)  # last one, the same model: nothing trained again
    needs = {"numpy", "scipy"}
    for e in plan:
        if e["status"] == "run":
            needs.update(e["train"].get("needs") or ())
    return {
        "kind": "compare_methods",
        "data_kind": kind,
        "needs": sorted(needs),
        "object": obj.name,
        "budget_s": float(budget_s),
        "lanes": lanes,
        "shot": shot or "",
        "state": str(state),
        "table": str(folder / TABLE_FILE),
        "methods": plan,
        BASELINE: baseline,
        "log_dir": str(folder / "logs"),
    }


def _bake_path(entry) -> str:
    """A train job's bake entry's path (a path, or ``{"path", ...}`` for a family method)."""
    return str(entry["path"] if isinstance(entry, dict) else entry)


def on_compare_methods_done(
    obj: bpy.types.Object, job: dict, result: dict, use: str = "best"
) -> str | None:
    """Write the table (``table.json`` beside the state, with what :func:`use_row` needs to
    make any done row's model the object's) and record the model of ``use`` on ``obj`` as
    its Train would have: "best" the recommended method, "none" none, or a method's name
    (when its row is done). Returns the method whose model was recorded (None when none
    was, or the job was cancelled)."""
    if not result or result.get("cancelled") or "rows" not in result:
        return None
    done = {r["method"] for r in result["rows"] if r["status"] == "done"}
    models = {}
    for e in job["methods"]:
        if e["method"] in done:
            t = e["train"]
            models[e["method"]] = {
                "out": t["out"],
                "mesh_hash": t["mesh_hash"],
                "bakes": len(t["bakes"]),
                "kind": job.get("data_kind", "fem"),
                "result": result["results"][e["method"]],
            }
    table = {
        "object": obj.name,
        "file": bpy.data.filepath,
        "budget_s": job.get("budget_s"),
        "lanes": job.get("lanes", 1),
        "rows": result["rows"],
        "recommendation": result["recommendation"],
        "models": models,
    }
    text = json.dumps(table, indent=2, default=json_default)
    write_atomic(Path(job["table"]), (text + "\n").encode("utf-8"))
    obj[LINES_PROP] = panel_lines(result["rows"], result["recommendation"])
    obj[ROWS_PROP] = [r["method"] if r["status"] == "done" else "" for r in result["rows"]]
    pick = result["recommendation"].get("method") if use == "best" else use
    if pick is None or pick == "none" or pick not in done:
        return None
    use_row(obj, pick)
    return pick


def panel_lines(rows: list[dict], recommendation: dict) -> list[str]:
    """The table in short lines for the panel (Blender labels do not wrap)."""
    out = []
    for r in rows:
        if r["status"] == "done":
            closest, pca = r.get("closest_mean_m"), r.get("pca_mean_m")
            out.append(
                f"{r['label']}: {r['dofs']} DOFs, replay {1000 * r['mean_m']:.3g} mm mean "
                f"({r['mean_pct']:.2g}%), {1000 * r['max_m']:.3g} max"
                + (f", closest {1000 * closest:.3g}" if closest is not None else "")
                + (f", PCA {1000 * pca:.3g}" if pca is not None else "")
                + f", {r['step_ms']:.2g} ms/step"
                + (
                    f", {r['memory_bytes'] / 2**20:.2g} MB at runtime"
                    if r.get("memory_bytes") is not None
                    else ""
                )
            )
        else:
            out.append(f"{r['label']}: {r['reason'][:90]}")
    return [*out, "Use " + recommendation["reason"]]


def use_method(obj: bpy.types.Object, job: dict, result: dict, method: str) -> None:
    """Record ``method``'s model of the comparison ``job`` (its ``result``) on ``obj``, as
    its training would have."""
    entry = next(e for e in job["methods"] if e["method"] == method)
    train = entry["train"]
    _record(
        obj,
        method,
        train["out"],
        train["mesh_hash"],
        len(train["bakes"]),
        job.get("data_kind", "fem"),
        result["results"][method],
    )


def use_row(obj: bpy.types.Object, method: str) -> None:
    """Make ``method``'s model of the object's last comparison (its table) the object's
    model: the panel's "use this row" and ``compare-methods --use``.

    Raises NeuralRomError (nothing changed) when the object has no comparison, the method's
    row is not a done one, or its model file changed or went since the comparison.
    """
    table = read_table(obj)
    if not table:
        raise NeuralRomError(f"'{obj.name}' has no Compare Methods table; run Compare Methods.")
    got = (table.get("models") or {}).get(method)
    if got is None:
        rows = {r["method"]: r for r in table.get("rows", [])}
        why = rows.get(method, {}).get("reason") or "it is not in the table"
        raise NeuralRomError(
            f"The last comparison of '{obj.name}' has no {method} model ({why}); pick a row "
            "with numbers, or compare again."
        )
    if not Path(got["out"]).is_file():
        raise NeuralRomError(
            f"The {method} model of the last comparison is gone ({got['out']}); run Compare "
            "Methods again (finished methods are kept)."
        )
    _record(
        obj,
        method,
        got["out"],
        got["mesh_hash"],
        got["bakes"],
        got.get("kind", "fem"),
        got["result"],
    )


def _record(obj, method: str, out: str, mesh_hash: str, bakes: int, kind: str, result: dict):
    s = obj.neural_rom
    s.pending_train = json.dumps(
        {
            "out": out,
            "method": method,
            "mesh_hash": mesh_hash,
            "tets_hash": s.tets_hash,
            "source_hash": s.source_hash,
            "bakes": bakes,
            "kind": kind,
        }
    )
    training.on_train_done(obj, {**result, "model": out})


def read_table(obj: bpy.types.Object) -> dict | None:
    """The object's last comparison table (``table.json``), None when there is none."""
    try:
        return json.loads((folder_of(obj) / TABLE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
