"""Command-line flags declared on dataclass fields: one declaration gives a config field its flag, its help
text and where its default comes from, so no flag is written twice (once as a field, once in argparse).

    @dataclass
    class OptimConfig:
        lr: float = field(default=1e-4, metadata=flag("learning rate", preset="lr"))

`add_flags` turns the declared fields of several config sections into one parser's flags; `given` reads back
the values the user passed, by section, for the config's builder to merge over presets and field defaults.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Any, Callable

TAKES_VALUE = object()  # Flag.store's default: the flag takes a value (it is not a switch)


@dataclass(frozen=True)
class Flag:
    help: str
    name: str | None = None  # the flag without "--"; default: the field's name, "_" written "-"
    group: str | None = None  # the --help section (None: the parser's own options)
    advanced: bool = False  # a research or performance knob: listed by --help-all only
    choices: tuple | None = None
    metavar: str | None = None
    required: bool = False
    store: Any = TAKES_VALUE  # a switch taking no value: the value it stores when given
    parse: Callable[[str], Any] | None = None  # the flag's text (checked against choices) -> the field's value
    preset: str | None = None  # when not given: this attribute of the run's preset (else the field's default)


def flag(help: str, **kwargs) -> dict:
    """A field's metadata declaring its flag: field(default=..., metadata=flag("help", name="micro-batch"))."""
    return {"flag": Flag(help, **kwargs)}


def declared(cls) -> list[tuple[str, Flag, type]]:
    """(field name, its Flag, the value type) of every field of `cls` that declares a flag, in order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        spec = f.metadata.get("flag")
        if spec is not None:
            kinds = [t for t in typing.get_args(hints[f.name]) if t is not type(None)] or [hints[f.name]]
            out.append((f.name, spec, kinds[0]))
    return out


def _dest(section: str, name: str) -> str:
    return f"{section}.{name}" if section else name


def add_flags(parser, sections: dict[str, type], groups: tuple[str | None, ...]) -> None:
    """Add every declared flag of `sections` ({section name: dataclass}; "" for the top level) to `parser`,
    under its group's heading in the order of `groups`, each flag in declaration order. Every flag's
    argparse default is None: "not given", so presets and field defaults fill in later (`given`)."""
    targets = {g: (parser if g is None else parser.add_argument_group(g)) for g in groups}
    for group in groups:
        for section, cls in sections.items():
            for name, spec, kind in declared(cls):
                if spec.group != group:
                    continue
                option = spec.name or name.replace("_", "-")
                kw: dict[str, Any] = {
                    "dest": _dest(section, name),
                    "default": None,
                    "help": spec.help,
                    "advanced": spec.advanced,
                }
                if spec.store is not TAKES_VALUE:
                    kw.update(action="store_const", const=spec.store)
                else:
                    kw.update(
                        type=str if spec.parse else kind,
                        choices=spec.choices,
                        metavar=spec.metavar or (None if spec.choices else option.upper().replace("-", "_")),
                        required=spec.required,
                    )
                targets[group].add_argument(f"--{option}", **kw)


def given(args, sections: dict[str, type]) -> dict[str, dict[str, Any]]:
    """{section: {field: value}} of the flags present on the command line (argparse default None: absent)."""
    out: dict[str, dict[str, Any]] = {}
    for section, cls in sections.items():
        out[section] = {}
        for name, spec, _ in declared(cls):
            value = getattr(args, _dest(section, name))
            if value is not None:
                out[section][name] = spec.parse(value) if spec.parse and spec.store is TAKES_VALUE else value
    return out


def preset_defaults(cls, preset) -> dict[str, Any]:
    """{field: value} of the fields of `cls` whose default is an attribute of `preset`."""
    return {name: getattr(preset, spec.preset) for name, spec, _ in declared(cls) if spec.preset}
