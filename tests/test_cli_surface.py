"""The command line as users' scripts and farm templates call it (``blender --command
neural_rom ...``, ``neural_rom.addon.cli.main``): every command and option stored in
tests/data/legacy/cli_surface.json (argparse's own records, not its formatted help, which
differs between Python 3.11 and 3.13) is still there, the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("bpy", reason="the CLI is the add-on's: it needs the PyPI bpy (setup_env.sh)")

from .legacy_surfaces import cli_surface  # noqa: E402

STORED = Path(__file__).parent / "data" / "legacy" / "cli_surface.json"
#: what a script depends on; the rest (help texts, metavars, the parse function's name) is
#: compared by the second test
KEPT = ("option_strings", "dest", "default", "choices", "nargs", "required", "const", "action")
AGAIN = (
    "if the change is deliberate (a new option, a reworded help), rewrite the snapshot with "
    "`.venv/bin/python tests/data/legacy/make_legacy.py --surfaces` and say so in the commit"
)


@pytest.fixture(scope="module")
def surfaces():
    return json.loads(STORED.read_text(encoding="utf-8")), cli_surface()


def by_option(command: dict) -> dict:
    return {",".join(o["option_strings"]) or o["dest"]: o for o in command["options"]}


def test_every_stored_command_and_option_keeps_its_name_default_and_choices(surfaces):
    stored, live = surfaces
    changed = []
    for name, command in stored["commands"].items():
        if name not in live["commands"]:
            changed.append(f"command {name!r} is gone")
            continue
        now = by_option(live["commands"][name])
        for key, option in by_option(command).items():
            if key not in now:
                changed.append(f"{name} {key}: gone")
                continue
            changed += [
                f"{name} {key}: {field} {option[field]!r} -> {now[key][field]!r}"
                for field in KEPT
                if option[field] != now[key][field]
            ]
    assert not changed, (
        f"the CLI changed a stored command or option: {changed}; users' scripts and farm "
        "templates (farm/openjd, farm/flamenco) pass these names and rely on these defaults: "
        "keep the old ones working"
    )


def test_the_cli_surface_is_the_stored_one_help_texts_included(surfaces):
    stored, live = surfaces
    added = sorted(set(live["commands"]) - set(stored["commands"]))
    diffs = [f"new command {name!r}" for name in added]
    for name, command in stored["commands"].items():
        now_command = live["commands"].get(name)
        if now_command is None:
            continue  # the first test names it
        for field in ("help", "description"):
            if command[field] != now_command[field]:
                diffs.append(f"{name}: {field} changed")
        was, now = by_option(command), by_option(now_command)
        diffs += [f"{name} {key}: new option" for key in now.keys() - was.keys()]
        diffs += [
            f"{name} {key}: {field} {option[field]!r} -> {now[key][field]!r}"
            for key, option in was.items()
            if key in now
            for field in option
            if field not in KEPT and option[field] != now[key][field]
        ]
    assert not diffs, f"the CLI differs from its stored surface: {diffs[:30]}; {AGAIN}"
