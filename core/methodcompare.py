"""Compare Methods: train every method an object's data allows, replay its held-out bakes
with each model, and say which to use (no bpy, no torch).

The add-on plans the comparison (:mod:`..addon.methodcompare`: which methods can take the
object's data, each one's train job and compare jobs, as ``train`` and ``compare`` would
make them); the worker runs it here as one job (:func:`run_comparison`), calling the same
train and compare runners those commands' jobs call, so each method's numbers are its own
``compare``'s. Beside each method, the closest shapes of a linear (PCA) model with as many
DOFs (a linear model trained with ``k`` set to the method's DOFs): what a learned method's
extra machinery buys over PCA at equal size.

Resume: the state file (``<cache dir>/<object>/compare_methods/state.json``, written
atomically after each method) keeps each finished method's training result, model-file
stamp and replays under the key of what it was given (bakes, settings, held-out bakes); a
re-run, after a cancel or a crash, keeps every finished method whose key and model file are
unchanged and trains only the others. A cancelled comparison thus keeps what it finished.

Recommendation (:func:`recommend`): among the methods that replayed, the lowest mean
replay error over the held-out bakes; a method within :data:`NEAR_BEST` of it that steps
faster is preferred (the difference is within what another seed or bake moves).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from .errors import JobCancelled, NeuralRomError
from .files import json_default, write_atomic

SCHEMA = 1
STATE_FILE = "state.json"

#: A method whose mean replay error is within this factor of the best one's counts as as
#: good: the faster of them is recommended.
NEAR_BEST = 1.1

#: Statuses of a method in the table.
DONE, REFUSED, FAILED = "done", "refused", "failed"


def budget_shares(names: list[str], total_s: float) -> dict[str, float]:
    """Seconds of training each method of ``names`` (those with a ``time_budget`` setting)
    gets out of ``total_s`` for the whole comparison: an equal share (the methods without a
    budget, linear, take seconds and are not counted)."""
    if not names:
        return {}
    if not (total_s > 0):
        raise NeuralRomError(f"The time budget must be positive seconds, got {total_s}.")
    share = max(1.0, float(total_s) / len(names))
    return {n: share for n in names}


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
        return {"schema": SCHEMA, "methods": {}, "pca": {}}
    if not isinstance(state, dict) or state.get("schema") != SCHEMA:
        return {"schema": SCHEMA, "methods": {}, "pca": {}}
    state.setdefault("methods", {})
    state.setdefault("pca", {})
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
) -> dict:
    """Train and replay every method of the plan ``spec`` (from :mod:`..addon.methodcompare`),
    keeping finished ones from the state file.

    Parameters
    ----------
    spec : ``state`` (the state file), ``methods``: a list of ``{"method", "label",
        "status": "run" or "refused", "reason", "train": a train job spec, "compares": compare
        job specs, one per held-out bake and one for the user's shot (``role`` "held out" or
        "shot")}``; ``pca``: ``{"train": a linear train job spec,
        "compares": compare job specs}`` (the model and result paths are set per DOF count),
        or None
    train, compare : run one train / compare job spec in this process (the worker's
        runners); they raise :class:`JobCancelled` on a cancel
    say : ``say(fraction, message)``, progress between the steps

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
    say = say or (lambda fraction, message: None)
    state_path = Path(spec["state"])
    state = read_state(state_path)
    plan = list(spec["methods"])
    runnable = [e for e in plan if e["status"] == "run"]
    trained, kept = [], []
    for i, entry in enumerate(runnable):
        name = entry["method"]
        key = _key(entry)
        at = i / max(len(runnable), 1)
        if _finished(state, "methods", name, key) is not None:
            kept.append(name)
            say(at, f"{name}: kept from the last comparison")
            continue
        if should_cancel is not None and should_cancel():
            raise _cancelled(state_path, trained, kept)
        state["methods"].pop(name, None)
        t0 = time.perf_counter()
        try:
            say(at, f"method {i + 1}/{len(runnable)}: training {entry['label']}")
            result = train(entry["train"])
            replays = []
            for c in entry["compares"]:
                say(
                    at, f"method {i + 1}/{len(runnable)}: {entry['label']} replays {c['bake_name']}"
                )
                replays.append({**compare(c), "role": c.get("role", "held out")})
        except JobCancelled as exc:
            raise _cancelled(state_path, trained, kept) from exc
        except NeuralRomError as exc:  # listed with its reason, never silently missing
            state["methods"][name] = {"key": key, "status": FAILED, "reason": str(exc)}
            _write_state(state_path, state)
            continue
        model = entry["train"]["out"]
        state["methods"][name] = {
            "key": key,
            "status": DONE,
            "model": model,
            "stamp": _stamp(model),
            "train": _jsonable(result),
            "replays": replays,
            "seconds": time.perf_counter() - t0,
        }
        _write_state(state_path, state)
        trained.append(name)
    pca = spec.get("pca")
    if pca:
        _pca_at_equal_dofs(
            pca, state, state_path, say, should_cancel, train, compare, trained, kept
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


def _pca_at_equal_dofs(pca, state, state_path, say, should_cancel, train, compare, trained, kept):
    """A linear model with ``k`` = each done method's DOFs: its closest shapes on the same
    held-out bakes (kept in the state under ``pca``, by DOF count)."""
    wanted = sorted({_dofs(e) for e in state["methods"].values() if e.get("status") == DONE} - {0})
    folder = Path(pca["train"]["out"]).parent
    for d in wanted:
        model = str(folder / f"pca_k{d}.nrmodel")
        base = pca["train"]["settings"]
        settings = {**base, "k": d, "max_k": max(int(base.get("max_k") or d), d)}
        job = {**pca["train"], "out": model, "settings": settings}
        compares = [
            {**c, "model": model, "out": str(folder / f"pca_k{d}_{Path(c['out']).name}")}
            for c in pca["compares"]
        ]
        key = _key({"method": f"pca_k{d}", "train": job, "compares": compares})
        if _finished(state, "pca", str(d), key) is not None:
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
            state["pca"][str(d)] = {"key": key, "reason": str(exc)}
            _write_state(state_path, state)
            continue
        state["pca"][str(d)] = {
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
                train_seconds=float(result.get("train_seconds") or got.get("seconds") or 0.0),
                **summarize(held),
                replays=held,
            )
            if shot:  # the user's own shot, never trained on
                row["shot_max_m"] = summarize(shot)["max_m"]
                row["shot_mean_m"] = summarize(shot)["mean_m"]
                row["shot_replays"] = shot
            pca = state.get("pca", {}).get(str(row["dofs"])) or {}
            shapes = summarize(pca["replays"]) if pca.get("replays") else {}
            row["pca_max_m"] = shapes.get("closest_max_m")
            row["pca_mean_m"] = shapes.get("closest_mean_m")
            d = row["diagonal_m"]
            for k in ("max", "mean", "closest_max", "closest_mean", "pca_max", "pca_mean"):
                v = row.get(f"{k}_m")
                row[f"{k}_pct"] = None if v is None or d <= 0 else 100.0 * v / d
        rows.append(row)
    return rows


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
    near = [r for r in done if r["mean_m"] <= NEAR_BEST * best["mean_m"]]
    pick = min(near, key=lambda r: (r["step_ms"], r["mean_m"]))
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
        "model",
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
                f"{r['model_bytes'] / 1024:.0f} KB",
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
    text.append(f"use: {recommendation['reason']}")
    return "\n".join(text)
