"""Write the procedural demo head of the active-face method (core/face.py) with its shape keys.

    .venv/bin/python scripts/make_face.py out/face_small.npz --size small --keys 40 --held-out 8

The keys are our own simulation of expressions (a smile, a frown, a pucker, ... at 22-40%
fibre contraction) and jaw angles (15-25 deg in half the keys), seeded; the last
``--held-out`` are marked held out. The file is what ``training.active`` fits.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from neural_rom.core.kinds.face.rig import demo_head, make_shape_keys, save_face  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--size", choices=("small", "bench"), default="small")
    p.add_argument("--keys", type=int, default=40)
    p.add_argument("--held-out", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    t = time.perf_counter()
    rig = demo_head(a.size)
    keys = make_shape_keys(rig, a.keys, held_out=a.held_out, seed=a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    save_face(a.out, rig, keys)
    print(
        f"{a.out}: {len(rig.T)} tets, {len(rig.skin_V)} skin vertices, {len(keys)} keys "
        f"({a.held_out} held out), {time.perf_counter() - t:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
