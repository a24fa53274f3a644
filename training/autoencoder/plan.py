"""The autoencoder's cost before anything trains: the epochs of a run's networks sized to the
time budget (:class:`TrainingPlan`), and the coarse-to-fine latent-size search
(:func:`search_latent_size`; :mod:`training.autoencoder`'s docstring, point 3)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

# The fewest epochs a cut plan gives a search network / the final network.
_MIN_SEARCH_EPOCHS, _MIN_EPOCHS = 20, 50


# ------------------------------------------------------------------------------------------
# The plan: the cost before anything trains
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingPlan:
    """The epochs of a run's networks, sized to the time budget before any trains
    (checkpoint stage ``plan``: a resumed run follows the plan of the run it continues).

    Attributes
    ----------
    search_epochs : most epochs of each search network
    epochs : most epochs of the final network
    searches : most networks the latent-size search can train (its worst case,
        :func:`search_worst_case`; 0 when the latent size is given)
    epoch_s : seconds per epoch (training and the held-out loss), timed on this machine
    estimate_s : seconds of the worst case as planned
    wanted_s : seconds of the worst case with the epochs of the settings (every search
        network trained ``epochs`` when ``search_epochs`` is automatic)
    cut : the budget cut epochs the settings ask for (the final network's, or an explicit
        ``search_epochs``)
    """

    search_epochs: int
    epochs: int
    searches: int
    epoch_s: float
    estimate_s: float
    wanted_s: float
    cut: bool

    @property
    def reuse_search(self) -> bool:
        """The search networks train as long as the final one, so the chosen size's search
        network is the final network (not trained again)."""
        return self.searches > 0 and self.search_epochs >= self.epochs

    def to_arrays(self) -> dict:
        return {f.name: np.array(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_arrays(cls, d: dict) -> TrainingPlan:
        return cls(**{f.name: d[f.name].item() for f in fields(cls)})


def plan_training(
    epochs: int,
    search_epochs: int | None,
    searches: int,
    epoch_s: float,
    time_budget: float,
) -> TrainingPlan:
    """Epochs that fit ``time_budget`` seconds at ``epoch_s`` seconds per epoch.

    The worst case is ``searches`` networks of ``search_epochs`` epochs, then one of
    ``epochs`` (none when the search networks are as long: the chosen one is kept).

    * ``search_epochs`` None (automatic): every search network gets ``epochs`` when that
      fits the budget; else the final network keeps ``epochs`` and the search networks
      share the rest, when that gives each at least a quarter of ``epochs`` (fewer rank the
      sizes poorly: on the swung bar of ``bench/autoencoder.py`` 300 of 2,000 epochs left
      r = 2 at 74 mm, against 25 mm fully trained); else both are scaled down to fit.
    * ``search_epochs`` given (at most ``epochs``): over the budget, both counts are scaled
      by ``time_budget / worst case``.

    No network gets fewer than :data:`_MIN_SEARCH_EPOCHS` / :data:`_MIN_EPOCHS` (or the
    settings' own counts when smaller), so a tiny budget can be exceeded (the deadline of
    :func:`train` still holds to the plan's estimate).
    """
    E, S, t = int(epochs), int(searches), float(epoch_s)
    n = time_budget / t if t > 0 else math.inf  # epochs the budget affords

    def floor_s(x: float) -> int:
        return max(min(E, _MIN_SEARCH_EPOCHS), int(x))

    def floor_e(x: float) -> int:
        return max(min(E, _MIN_EPOCHS), int(x))

    def cost(se: int, e: int) -> float:
        return t * (S * se + (0 if S and se >= e else e))

    if S == 0:
        se = e = E if E <= n else floor_e(n)
        wanted = cost(E, E)
        cut = e < E
    elif search_epochs is None:
        wanted = cost(E, E)
        if S * E <= n:
            se = e = E
        elif E + S * E / 4 <= n:
            se, e = floor_s((n - E) / S), E
        else:
            f = n / (E + S * E / 4)
            se, e = floor_s(E / 4 * f), floor_e(E * f)
        cut = e < E
    else:
        se, e = min(int(search_epochs), E), E
        wanted = cost(se, e)
        if wanted > time_budget:
            f = time_budget / wanted
            same = se == e  # keep "the search network is the final one"
            se, e = floor_s(se * f), floor_e(e * f)
            se = e if same else min(se, e)
        cut = cost(se, e) < wanted
    return TrainingPlan(se, e, S, t, cost(se, e), wanted, bool(cut))


def duration(seconds: float) -> str:
    """'about 40 seconds', 'about 3 minutes'."""
    if seconds < 90:
        return f"about {max(seconds, 1):.0f} seconds"
    return f"about {seconds / 60:.0f} minutes"


def search_latent_size(
    lo: int,
    hi: int,
    fit: Callable,
    target: float,
    *,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[int, object, list[dict]]:
    """The smallest latent size in ``lo .. hi`` whose error meets ``target``, coarse to fine.

    Doubling ``r = lo, 2 lo, 4 lo, ...`` (the last one ``hi``) until one meets ``target``,
    then bisection between the last size that missed it and the first that met it. With
    errors that fall as ``r`` grows this finds the smallest size (Fulton 2019 sec. 4.3 tries
    every one) with ``O(log(hi / lo))`` trainings.

    Parameters
    ----------
    lo, hi : the sizes searched (``1 <= lo <= hi``)
    fit : ``fit(r) -> (model, max_error_m, history_dict)`` trains one latent size
    target : metres
    stop : polled between trainings; True ends the search with what it has (the deadline)

    Returns
    -------
    r, model, searched
        The smallest size tried that met ``target`` (the most accurate one tried when none
        did), its model, and one dict per size tried, in order (``latent_dim``,
        ``max_error_val_m`` and the history).
    """
    searched: list[dict] = []
    models: dict[int, tuple[object, float]] = {}

    def meets(r: int) -> bool:
        model, err, hist = fit(r)
        models[r] = (model, err)
        searched.append({"latent_dim": r, "max_error_val_m": err, **hist})
        return err <= target

    miss = met = None
    r = lo
    while True:
        if meets(r):
            met = r
            break
        miss = r
        if r >= hi or stop():
            break
        r = min(2 * r, hi)
    while met is not None and miss is not None and met - miss > 1 and not stop():
        mid = (miss + met) // 2
        if meets(mid):
            met = mid
        else:
            miss = mid
    if met is None:
        met = min(models, key=lambda r: models[r][1])
    return met, models[met][0], searched


def search_worst_case(lo: int, hi: int) -> int:
    """Most trainings :func:`search_latent_size` does between ``lo`` and ``hi``: the largest
    count over every size where the error could first meet the target (each outcome of the
    bisection is one of these)."""

    def trainings(first: int) -> int:
        def fit(r):
            return None, 0.0 if r >= first else 1.0, {}

        return len(search_latent_size(lo, hi, fit, 0.5)[2])

    return max(trainings(first) for first in range(lo, hi + 2))  # hi + 1: none meets it
