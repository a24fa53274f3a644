"""Active faces: the rig (muscles, jaw, markers) and its inputs."""

from __future__ import annotations

from ...registry.kinds import DataKind

#: a face's frame is a quasistatic equilibrium of that frame's sliders or markers alone
DESCRIPTION = "a face file: skin, skull, jaw and the sculpted shape keys (Face Set-up)"
HANDLER = "core.jobs.face:run_face_setup"
KIND = DataKind(
    "face",
    "Face",
    DESCRIPTION,
    data_job="face_setup",
    handler=HANDLER,
    stepping="equilibrium",
    order=20,
)
