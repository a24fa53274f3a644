"""The registry's records and the CLI's options as plain JSON: what users' files and scripts
name (method, setting and option names, defaults, choices), written once into
tests/data/legacy/ by make_legacy.py and compared with the live ones by
tests/test_registry.py and tests/test_cli_surface.py."""

from __future__ import annotations


def _plain(value):
    """JSON-able, stably: tuples and frozensets as lists (sets sorted), callables by name."""
    if isinstance(value, frozenset | set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', '?')}"
    return value


def registry_records() -> dict:
    """Every registered method's record (its fields, its settings as ``Setting.to_dict``) and
    the registry's tables (INPUTS, BAKE_INPUTS_NEEDED, KINDS, BAKE_KINDS)."""
    from neural_rom.core import registry

    methods = {}
    for m in registry.methods():
        record = {
            k: _plain(getattr(m, k))
            for k in (
                "label",
                "description",
                "trainer",
                "needs_torch",
                "inputs",
                "requires",
                "trains_on",
                "onnx",
                "order",
                "baseline",
                "setup_cost",
                "origin",
                "other_mesh",
            )
        }
        record["settings"] = [_plain(s.to_dict()) for s in m.settings]
        methods[m.name] = record
    return {
        "tables": {
            "INPUTS": dict(registry.INPUTS),
            "BAKE_INPUTS_NEEDED": sorted(registry.BAKE_INPUTS_NEEDED),
            "KINDS": list(registry.KINDS),
            "BAKE_KINDS": dict(registry.BAKE_KINDS),
        },
        "methods": methods,
    }


def cli_surface() -> dict:
    """Every CLI command's options as argparse holds them (not its formatted help, which
    differs between Python versions): per command its help line and description, and per
    option its strings, dest, default, choices, nargs, required, const, metavar, type and
    raw help string."""
    import argparse as ap

    from neural_rom.ui import cli

    parser = cli.build_parser()

    def options(p) -> list[dict]:
        rows = []
        for a in p._actions:
            if isinstance(a, ap._SubParsersAction | ap._HelpAction):
                continue
            rows.append(
                {
                    "option_strings": list(a.option_strings),
                    "dest": a.dest,
                    "default": _plain(a.default),
                    "choices": _plain(a.choices) if a.choices is not None else None,
                    "nargs": a.nargs,
                    "required": a.required,
                    "const": _plain(a.const),
                    "metavar": _plain(a.metavar),
                    "type": getattr(a.type, "__name__", None) if a.type else None,
                    "action": type(a).__name__,
                    "help": a.help,
                }
            )
        return rows

    (sub,) = [a for a in parser._actions if isinstance(a, ap._SubParsersAction)]
    helps = {c.dest: c.help for c in sub._choices_actions}
    commands = {
        name: {"help": helps.get(name), "description": p.description, "options": options(p)}
        for name, p in sub.choices.items()
    }
    return {"prog": parser.prog, "options": options(parser), "commands": commands}
