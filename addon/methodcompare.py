"""Compare Methods on an object: the plan (which methods its data allows, each one's train
job and its replays of the held-out bakes, as ``train`` and ``compare`` make them), the job
that runs it (:func:`..core.methodcompare.run_comparison` in the worker), and recording the
recommended method's model on the object when it is done.

Every method of the registry is in the plan: one that cannot take the object's data (a face
method on FEM bakes, a method whose training needs torch in a job Python without it, one
whose train job refuses the bakes) is listed with the reason. Each trains with the object's
settings of it (its defaults unless the user changed them), ``settings`` on top where the
method has them, and an equal share of ``budget_s`` as its ``time_budget``; a method that
would keep the linear model in its place when that replays better (``keep_linear``) does
not here, the table being that comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import bpy

from ..core import registry
from ..core.errors import NeuralRomError
from . import compare, prefs, training
from .paths import cache_dir, load_path

FOLDER = "compare_methods"
#: Where the last comparison's table goes (JSON), next to the state.
TABLE_FILE = "table.json"


def folder_of(obj: bpy.types.Object) -> Path:
    return cache_dir(obj) / FOLDER


def _refusal(record, kind: str, python: str) -> str | None:
    """Why ``record`` cannot train on the object's data of ``kind`` in ``python``, or None."""
    from ..core.jobs import check_interpreter

    try:
        record.check_trains_on(kind)
        check_interpreter(python, tuple(training.job_needs(record)))
    except NeuralRomError as e:
        return str(e)
    return None


def _held_out(paths: list[str], settings: dict) -> list[int]:
    """The bakes the trainer will hold out (every trainer splits whole bakes the same way:
    :meth:`..core.cache.BakeDataset.split` with the method's validation fraction and seed)."""
    from ..core.cache import BakeDataset

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
) -> dict:
    """The worker job that compares every method on ``obj`` (JSON-able). Nothing on the
    object changes until the job is done (:func:`on_compare_methods_done`).

    ``settings``: method settings applied to each method that has them (e.g. ``epochs`` for
    a quick look); ``restart`` forgets the finished methods of an earlier comparison;
    ``only`` names the methods to train (the others are listed as not asked for); ``shot``
    names one of the object's bakes that is the user's own shot (e.g. ``bake --motion
    scenario``: the animation as it plays): no method trains on it, every one replays it.

    Raises NeuralRomError (nothing changed) when the object is not deformable, trains on
    another kind of data than FEM bakes, or has fewer than two bakes (nothing held out).
    """
    from ..core.methodcompare import STATE_FILE, budget_shares

    s = obj.neural_rom
    if s.role != "DEFORMABLE":
        raise NeuralRomError(
            f"'{obj.name}' is not deformable; set its Neural ROM role to Deformable."
        )
    kind = s.training_data_kind()
    if kind != "fem":
        raise NeuralRomError(
            f"Compare Methods compares models of FEM bakes; '{obj.name}' trains on its "
            f"{kind} data (train its one method with Train)."
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
    learned = [
        r.name
        for r in records
        if reasons[r.name] is None and any(st.name == "time_budget" for st in r.settings)
    ]
    shares = budget_shares(learned, float(budget_s))
    folder = folder_of(obj)
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / STATE_FILE
    if restart and state.exists():
        state.unlink()
    by_path = {str(load_path(rec.path)): rec for rec in s.bakes}
    keep_pending = s.pending_train
    plan, pca = [], None
    try:
        for record in records:
            entry = {"method": record.name, "label": record.label}
            if reasons[record.name] is not None:
                plan.append({**entry, "status": "refused", "reason": reasons[record.name]})
                continue
            names = {st.name for st in record.settings}
            own = {k: v for k, v in (settings or {}).items() if k in names}
            if record.name in shares:
                own["time_budget"] = shares[record.name]
            if "keep_linear" in names:  # the table compares the methods: each keeps its own
                own["keep_linear"] = False
            try:
                job = training.make_train_job(
                    obj, scene, method=record.name, settings=own, device=device
                )
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
                {**entry, "status": "run", "reason": "", "train": job, "compares": compares}
            )
            if record.baseline:  # PCA at each method's size: the baseline with k = its DOFs
                pca = {
                    "train": {**job, "out": str(folder / "pca.nrmodel")},
                    "compares": [
                        {**c, "method": record.name} for c in compares if c["role"] != "shot"
                    ],
                }
                pca["train"]["settings"] = {**job["settings"], "tolerance": None}
    finally:
        s.pending_train = keep_pending  # the plan's train jobs are not this object's Train
    needs = {"numpy", "scipy"}
    for e in plan:
        if e["status"] == "run":
            needs.update(e["train"].get("needs") or ())
    return {
        "kind": "compare_methods",
        "needs": sorted(needs),
        "object": obj.name,
        "budget_s": float(budget_s),
        "shot": shot or "",
        "state": str(state),
        "table": str(folder / TABLE_FILE),
        "methods": plan,
        "pca": pca,
        "log_dir": str(folder / "logs"),
    }


def _bake_path(entry) -> str:
    """A train job's bake entry's path (a path, or ``{"path", ...}`` for a family method)."""
    return str(entry["path"] if isinstance(entry, dict) else entry)


def on_compare_methods_done(obj: bpy.types.Object, job: dict, result: dict) -> str | None:
    """Write the table (``table.json`` beside the state) and record the recommended method's
    model on ``obj`` as its Train would have (the model file its training wrote). Returns
    the recommended method's name (None when none replayed, or the job was cancelled)."""
    from ..core.files import json_default, write_atomic

    if not result or result.get("cancelled") or "rows" not in result:
        return None
    table = {
        "object": obj.name,
        "file": bpy.data.filepath,
        "budget_s": job.get("budget_s"),
        "rows": result["rows"],
        "recommendation": result["recommendation"],
    }
    text = json.dumps(table, indent=2, default=json_default)
    write_atomic(Path(job["table"]), (text + "\n").encode("utf-8"))
    obj["neural_rom_methods"] = panel_lines(result["rows"], result["recommendation"])
    best = result["recommendation"].get("method")
    if best is not None:
        use_method(obj, job, result, best)
    return best


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
            )
        else:
            out.append(f"{r['label']}: {r['reason'][:90]}")
    return [*out, "Use " + recommendation["reason"]]


def use_method(obj: bpy.types.Object, job: dict, result: dict, method: str) -> None:
    """Record ``method``'s model of the comparison on ``obj``, as its training would have."""
    entry = next(e for e in job["methods"] if e["method"] == method)
    train = entry["train"]
    s = obj.neural_rom
    s.pending_train = json.dumps(
        {
            "out": train["out"],
            "method": method,
            "mesh_hash": train["mesh_hash"],
            "tets_hash": s.tets_hash,
            "source_hash": s.source_hash,
            "bakes": len(train["bakes"]),
            "kind": "fem",
        }
    )
    training.on_train_done(obj, {**result["results"][method], "model": train["out"]})


def read_table(obj: bpy.types.Object) -> dict | None:
    """The object's last comparison table (``table.json``), None when there is none."""
    try:
        return json.loads((folder_of(obj) / TABLE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
