"""Command-line options generated from a config dataclass: a flag per field, named after it, typed by
its annotation, its choices from a `Literal`, its comment the `--help`. A setting is declared once, in
its config, and a command adds the config's fields with `add_fields` and builds the config back with
`field_values`.

Written here rather than taken from tyro or draccus, the two libraries the field uses for this, because
both own the whole command line and its errors: tyro ends a bad value with a multi-line panel and
draccus decodes every value as YAML and spells flags with underscores, where nacdrive is one argparse
tree (shared flags, subcommands) whose bad values end in one line saying what is allowed. What this
adds to argparse is what both libraries read from a dataclass: the field comments and the types.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import json
import textwrap
import tokenize
import types
import typing
from typing import Any, Iterable, Literal

from nac.config import NON_NEGATIVE
from scripts.args import key_value, number

MISSING = dataclasses.MISSING


@functools.cache
def field_help(cls: type) -> dict[str, str]:
    """{field: its comment}: the comment on the field's line and the comment-only lines right after it."""
    src = textwrap.dedent(inspect.getsource(cls))
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(src).readline) if tok.type == tokenize.COMMENT}
    lines = src.splitlines()
    docs: dict[str, str] = {}
    for node in ast.parse(src).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.end_lineno in comments:
            text, line = [comments[node.end_lineno]], node.end_lineno + 1
            while line <= len(lines) and lines[line - 1].lstrip().startswith("#"):
                text.append(comments[line])
                line += 1
            docs[node.target.id] = " ".join(text)
    for base in cls.__mro__[1:]:  # a subclass keeps the comments of the fields it inherits
        if dataclasses.is_dataclass(base):
            docs = {**field_help(base), **docs}
    return docs


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) if value else "none"
    if isinstance(value, dict):
        return json.dumps(value) if value else "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


class KeyValues(argparse.Action):
    """KEY=VALUE flags gathered into one dict (a dict field), on top of its default."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, value: Any, option: Any = None) -> None:
        key, item = value
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest) or {}), key: item})


def _argument(name: str, hint: Any, default: Any, doc: str, unset: bool, metadata: Any) -> dict[str, Any]:
    """argparse's add_argument(**kwargs) for one field. unset: the flag's absence leaves the field to its
    config (the value is None on the namespace), for settings whose default depends on others."""
    choices = metadata.get("choices")
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    optional = origin in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    help_text = doc + ("" if default is MISSING or default is None else f" (default {_shown(default)})")
    kw: dict[str, Any] = {"help": help_text.replace("%", "%%"), "default": None if unset else default}
    if default is MISSING and not unset:
        kw.update(required=True, default=None)
    if hint is bool:
        if default is True or unset:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["action"] = "store_true"
        return kw
    one = name[:-1] if origin is list and name.endswith("s") else name  # a list's items: heads -> HEAD
    if choices is not None:  # a field's metadata names its choices (a sequence, or a function returning one)
        kw.update(choices=list(choices() if callable(choices) else choices), type=args[0] if origin is list else hint)
        if origin is list:
            kw["nargs"] = "+"
        if len(kw["choices"]) > 8:  # a long list reads better in the help than in the usage line
            kw.update(metavar=one.upper(), help=f"{kw['help']}; from: {', '.join(map(str, kw['choices']))}")
    elif origin is Literal:
        kw.update(choices=list(args), type=type(args[0]))
    elif origin is list:
        kw.update(type=args[0], nargs="+", metavar=one.upper())
    elif origin is tuple:
        kw.update(type=args[0], nargs=len(args), metavar={float: "X", int: "N"}.get(args[0], "VALUE"))
    elif origin is dict:
        kw.update(type=key_value, action=KeyValues, metavar="KEY=VALUE")
        kw["help"] += "; repeat the flag for several"
    elif hint in (int, float, str):
        kw.update(type=hint, metavar=metadata.get("metavar", {int: "N", float: "X", str: name.upper()}[hint]))
        if "const" in metadata:  # the flag given alone means this value (--ray: a new local instance)
            kw.update(nargs="?", const=metadata["const"])
    else:
        raise TypeError(f"{name}: no command-line form for {hint!r}")
    if kw.get("type") in (int, float):
        kw["type"] = number(kw["type"], metadata.get("range", NON_NEGATIVE))
    return kw


class _Retired(argparse.Action):
    """A flag that no longer exists: using it ends the command line with one line saying what to give instead."""

    def __init__(self, option_strings: list[str], dest: str, message: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, help=argparse.SUPPRESS)
        self.message = message

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string} is gone: {self.message}")


def add_fields(p: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, skip: Iterable[str] = (),
               unset: Iterable[str] | bool = (), only: Iterable[str] | None = None, positional: Iterable[str] = (),
               _within: tuple[str, str, Any, dict[str, str]] = ("", "", None, {})) -> list[str]:
    """A flag per field of the dataclass cls (skipping `skip`; only `only` if given), in their order; `unset`
    fields (True: all) are None unless given (their config resolves them); `positional` ones are positional
    arguments. A field that holds a config of its own (a dataclass: a job's rollouts, a recipe's parts) gives its
    fields' flags in its place, named with the field's metadata "prefix" (none: the inner field's own name), their
    defaults the field's default's and their help the inner comments unless its metadata "help" gives a job's own;
    they are named PART.FIELD in skip, unset and only. Returns the fields added (PART.FIELD for those), for field_values."""
    hints, docs = typing.get_type_hints(cls), field_help(cls)
    path, prefix, defaults, helps = _within
    docs = {**docs, **helps}
    skip, positional = set(skip), set(positional)
    unset = unset if unset is True else set(unset or ())
    wanted = None if only is None else list(only)
    added = []
    own = set(cls.__dict__.get("__annotations__", {}))  # a job's own fields first, then those of the config it extends
    for f in sorted(dataclasses.fields(cls), key=lambda f: f.name not in own):
        name = path + f.name
        if name in skip or (wanted is not None and name not in wanted and not any(w.startswith(name + ".") for w in wanted)) or not f.init:
            continue
        default = _default(f) if defaults is None else getattr(defaults, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            added += add_fields(p, hints[f.name], skip, unset, only, positional,
                                (name + ".", prefix + f.metadata.get("prefix", ""), default, f.metadata.get("help", {})))
            continue
        if f.name not in docs:
            raise TypeError(f"{cls.__name__}.{f.name} has no comment to be its --help")
        flags, target = [flag(prefix + f.name)], p
        if "negated" in f.metadata:  # a field on by default, turned off by a flag of its own name (continuous: --discrete)
            flags, kw = [flag(f.metadata["negated"])], {"action": "store_false", "help": f.metadata["negated_help"]}
            if "explicit_help" in f.metadata:  # and its own name accepted too, saying the default (--continuous); not both
                target = p.add_mutually_exclusive_group()
                target.add_argument(flag(f.name), dest=name, action="store_true", default=True, help=f.metadata["explicit_help"])
        else:
            kw = _argument(f.name, hints[f.name], default, docs[f.name], unset is True or name in unset, f.metadata)
        if name in positional:
            kw.pop("required", None)
            kw.setdefault("metavar", f.name.upper())
            p.add_argument(name, **kw)
        else:
            target.add_argument(*flags, dest=name, **kw)
        added.append(name)
    return added


def field_values(args: argparse.Namespace, names: Iterable[str], drop_unset: bool = False) -> dict[str, Any]:
    """The given fields' values from the namespace, PART.FIELD ones as {PART: {FIELD: value}}; drop_unset leaves out those
    that are None (not given, left to the config)."""
    values: dict[str, Any] = {}
    for name in names:
        value = getattr(args, name)
        if drop_unset and value is None:
            continue
        *parts, last = name.split(".")
        node = values
        for part in parts:
            node = node.setdefault(part, {})
        node[last] = value
    return values


def add_renamed(p: argparse.ArgumentParser | argparse._ArgumentGroup, renamed: dict[str, str]) -> None:
    """Flags of older versions ({old field name: today's}): each ends the command line with one line naming today's flag."""
    for old, new in renamed.items():
        p.add_argument(flag(old), action=_Retired, message=f"it is {flag(new)} now")
