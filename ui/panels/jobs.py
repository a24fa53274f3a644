"""The running jobs' rows that every panel box shows (progress and Cancel), in a module of
their own so that the sidebar and the kinds' boxes import it without importing each other."""

from __future__ import annotations

from ...addon import jobs


def draw_jobs(layout, owner: str, kind: str | None = None) -> None:
    """Progress and a Cancel button for each running job of ``owner`` (of ``kind``)."""
    for state in jobs.active_jobs(owner):
        if kind is not None and state.kind != kind:
            continue
        box = layout.box()
        row = box.row(align=True)
        row.progress(factor=float(state.progress), type="BAR", text=jobs.format_state(state))
        row.operator("neural_rom.cancel_job", text="", icon="CANCEL").job = state.id
