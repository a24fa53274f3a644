"""Check what the job interpreter can import (numpy, scipy, torch, CUDA)."""

from __future__ import annotations

import bpy

from ...addon import prefs
from ...core import registry
from ...core.jobs import probe_interpreter
from ._common import fail


def describe_probe(info: dict) -> str:
    """Lines saying what the interpreter has and what it lacks."""
    if info.get("error"):
        return f"{info.get('executable')}: cannot run ({info['error']})"

    def has(name: str) -> str:
        v = info.get(name)
        return f"{name} {v}" if v else f"{name} MISSING"

    cuda = info.get("cuda")
    cuda_text = "CUDA yes" if cuda else ("CUDA no" if cuda is False else "CUDA unknown")
    lines = [
        f"Python {info.get('python') or '?'} ({info.get('executable')})",
        f"{has('numpy')}, {has('scipy')}, {has('torch')}, {cuda_text}",
    ]
    if not (info.get("numpy") and info.get("scipy")):
        lines.append("Bakes need numpy and scipy: install them in this Python or pick another.")
    elif not info.get("torch"):
        torch_free = [m.label for m in registry.methods() if not m.needs_torch]
        needing = [m.label for m in registry.methods() if m.needs_torch]
        can = "Baking" + (f" and training {', '.join(torch_free)}" if torch_free else "")
        if needing:
            can += f" work; training {', '.join(needing)} needs torch in this Python."
        else:
            can += " work."
        lines.append(can)
    return "\n".join(lines)


class NEURAL_ROM_OT_check_interpreter(bpy.types.Operator):
    """Report whether the job Python has numpy, scipy, torch and CUDA"""

    bl_idname = "neural_rom.check_interpreter"
    bl_label = "Check Job Python"
    bl_options = {"REGISTER"}  # reads the job Python; preferences are not undone

    def execute(self, context):
        python = prefs.job_python(context)
        info = probe_interpreter(python, check_torch=True)
        text = describe_probe(info)
        p = prefs.get_preferences(context)
        p.last_check = text
        if info.get("error") or not (info.get("numpy") and info.get("scipy")):
            return fail(self, text.replace("\n", "; "))
        self.report({"INFO"}, text.replace("\n", "; "))
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_check_interpreter,)
