"""An object's animation as Blender plays it, read as rigid world frames: what a bake draws
its training motion from (:mod:`core.motion`). A cloth bake reads its owner's (the object
the cloth hangs from, or a bone of it: :mod:`.clothbake`), an FEM bake its pinned object's
(:func:`.bakes.drawn_motion`).
"""

from __future__ import annotations

import bpy
import numpy as np

from ...core.kinds.cloth.source import rigid
from . import mesh as bm


def owner_frame(owner, bone: str) -> np.ndarray:
    """(4, 4) the rigid world frame of ``owner`` (scale divided out), or of its pose bone
    ``bone`` when one is named (what a cloth hangs from)."""
    M = bm.matrix(owner)
    if bone:
        M = M @ np.array(owner.pose.bones[bone].matrix, dtype=np.float64)
    return rigid(M)


def animation_range(owner) -> tuple[int, int] | None:
    """The frames the owner's animation (its action and NLA strips, its parents' too)
    covers, or None when it has none."""
    lo, hi = np.inf, -np.inf
    o = owner
    while o is not None:
        ad = o.animation_data
        if ad is not None:
            if ad.action is not None:
                a, b = ad.action.frame_range
                lo, hi = min(lo, a), max(hi, b)
            for track in ad.nla_tracks:
                if track.mute:
                    continue
                for strip in track.strips:
                    if not strip.mute:
                        lo, hi = min(lo, strip.frame_start), max(hi, strip.frame_end)
        o = o.parent
    if not np.isfinite(lo) or hi - lo < 2:
        return None
    return int(np.floor(lo)), int(np.ceil(hi))


def sample_frames(scene, owner, bone: str, frames) -> np.ndarray:
    """(len(frames), 4, 4) the owner's frame (:func:`owner_frame`) at each scene frame."""
    out = []
    for f in frames:
        scene.frame_set(int(f))
        out.append(owner_frame(owner, bone))
    return np.array(out)


def other_actions(owner) -> list:
    """The actions of the file made for the owner (a slot of theirs names it) other than
    the one it plays."""
    ad = owner.animation_data
    playing = ad.action if ad is not None else None
    ident = "OB" + owner.name
    out = []
    for act in bpy.data.actions:
        if act is playing:
            continue
        slots = getattr(act, "slots", None)
        if slots is not None and any(sl.identifier == ident for sl in slots):
            out.append(act)
    return out


def owner_animation(scene, owner, bone: str, start: int) -> list[dict]:
    """The owner's motions in the file, each ``{"name", "frames": [a, b], "track": (F, 4, 4)}``
    (:func:`owner_frame` at every frame from ``a`` to ``b``): the animation as the file plays
    it (its action and NLA strips) from the bake's first frame ``start`` on, then each other
    action made for the owner, played alone over its own range. Empty when nothing moves
    the owner. The scene is left at some frame: the caller sets the one it wants."""
    sources = []
    span = animation_range(owner)
    if span is not None and span[1] > start + 1:
        a, b = max(start, span[0]), span[1]
        sources.append(("animation", a, b, sample_frames(scene, owner, bone, range(a, b + 1))))
    ad = owner.animation_data
    for act in other_actions(owner):
        a, b = (int(round(v)) for v in act.frame_range)
        if b - a < 2:
            continue
        keep = (ad.action, ad.use_nla, getattr(ad, "action_slot", None))
        try:
            ad.use_nla = False
            ad.action = act
            if getattr(ad, "action_slot", None) is None and len(getattr(act, "slots", ())):
                ad.action_slot = next(
                    (sl for sl in act.slots if sl.identifier == "OB" + owner.name), act.slots[0]
                )
            sources.append(
                (f"action {act.name}", a, b, sample_frames(scene, owner, bone, range(a, b + 1)))
            )
        except (RuntimeError, TypeError, AttributeError):
            continue  # an action Blender refuses on this object: not a motion of it
        finally:
            ad.action = keep[0]
            if keep[2] is not None:
                ad.action_slot = keep[2]
            ad.use_nla = keep[1]
    out = []
    for name, a, b, track in sources:
        moved = np.abs(track - track[0]).max()
        if moved > 1e-6:
            out.append({"name": name, "frames": [a, b], "track": track})
    return out
