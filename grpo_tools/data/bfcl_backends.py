"""BFCL's executable API classes as the data layer knows them: which are refused, importing the others from the
installed bfcl-eval, and checking a BFCL multi-turn row's `env` before anything runs it.

The classes that need packages grpo-tools does not carry (the memory backends, web search) are refused by name
(`REFUSED_BACKENDS`). Importing bfcl-eval's modules can create folders inside the installed package unless
`BFCL_PROJECT_ROOT` is set, so every import goes through `bfcl_module`, which points it at a temporary folder first
when the user has not set it. `check_bfcl_env` is what `check_rows` (so `check-data`, training and `eval`) and
`score` run on every row whose `env.name` is `bfcl`: it names the field of anything the executor could not start from.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any


__all__ = [
    "REFUSED_BACKENDS",
    "UnsupportedBackend",
    "api_class",
    "bfcl_module",
    "check_bfcl_env",
    "is_stateless",
]


# Backends of BFCL's executable suite that need packages grpo-tools does not install, with what each needs.
REFUSED_BACKENDS: dict[str, str] = {
    "WebSearchAPI": "requests, beautifulsoup4, html2text and serpapi (and the network)",
    "MemoryAPI_kv": "rank_bm25 and overrides",
    "MemoryAPI_vector": "sentence-transformers, faiss and overrides",
    "MemoryAPI_rec_sum": "overrides",
}


class UnsupportedBackend(ValueError):
    """An API class grpo-tools does not run: a refused backend, or a name bfcl-eval does not know."""


def bfcl_module(name: str) -> Any:
    """Import a module of the installed bfcl-eval with `BFCL_PROJECT_ROOT` set (to a temporary folder unless the user
    set it), so that no import writes into site-packages."""
    if "BFCL_PROJECT_ROOT" not in os.environ:
        os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp(prefix="grpo-tools-bfcl-")
    if importlib.util.find_spec("bfcl_eval") is None:
        raise UnsupportedBackend("bfcl-eval is not installed (`pip install --no-deps bfcl-eval`)")
    return importlib.import_module(name)


def _backend_config() -> Any:
    return bfcl_module("bfcl_eval.constants.executable_backend_config")


@functools.cache
def api_class(name: str) -> type:
    """BFCL's API class of that name, imported from the installed bfcl-eval; `UnsupportedBackend` for a refused one.

    >>> api_class("MathAPI").__name__
    'MathAPI'
    >>> api_class("WebSearchAPI")
    Traceback (most recent call last):
    ...
    grpo_tools.data.bfcl_backends.UnsupportedBackend: WebSearchAPI is not supported: it needs requests, beautifulsoup4, html2text and serpapi (and the network)
    """
    if name in REFUSED_BACKENDS:
        raise UnsupportedBackend(f"{name} is not supported: it needs {REFUSED_BACKENDS[name]}")
    paths = _backend_config().CLASS_FILE_PATH_MAPPING
    if name not in paths:
        known = ", ".join(sorted(set(paths) - set(REFUSED_BACKENDS)))
        raise UnsupportedBackend(f"{name!r} is not one of BFCL's API classes ({known})")
    return getattr(bfcl_module(paths[name]), name)


def is_stateless(name: str) -> bool:
    """Whether BFCL treats the API class as stateless (it then loads no scenario: `MathAPI`)."""
    return name in _backend_config().STATELESS_CLASSES


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


# What loading a class's state found, by class, long_context and the state as JSON: per-turn rows repeat their
# whole row's state once per turn. At most 1,024 states are kept.
_LOADED: dict[tuple[str, bool, str], str | None] = {}


def _load_problem(name: str, config: dict[str, Any], long_context: bool) -> str | None:
    """Why BFCL's class `name` cannot load `config` as its state (what the executor does for every session), or None."""
    key = (name, long_context, json.dumps(config, sort_keys=True, default=repr))
    if key not in _LOADED:
        if len(_LOADED) >= 1024:
            _LOADED.clear()
        try:
            api_class(name)()._load_scenario(copy.deepcopy(config), long_context=long_context)
            _LOADED[key] = None
        # What BFCL's loading code raises on a state of the wrong shape (a number where it iterates, a missing key).
        except (AttributeError, TypeError, KeyError, IndexError, ValueError, RecursionError) as error:
            _LOADED[key] = f"BFCL's {name} cannot load it ({type(error).__name__}: {error})"
    return _LOADED[key]


def _check_classes(classes: Any) -> Iterator[tuple[str, str]]:
    if not isinstance(classes, list) or not classes:
        yield "env.involved_classes", f"expected a non-empty list of BFCL API class names, got {_json_type(classes)}"
        return
    for i, name in enumerate(classes):
        try:
            if not isinstance(name, str):
                raise UnsupportedBackend(f"expected a class name, got {_json_type(name)}")
            api_class(name)
        except UnsupportedBackend as error:
            yield f"env.involved_classes[{i}]", str(error)


def _check_config(config: Any, classes: list[Any], long_context: bool) -> Iterator[tuple[str, str]]:
    if config is None:
        return
    if not isinstance(config, dict):
        yield "env.initial_config", f"expected an object {{API class: its state}}, got {_json_type(config)}"
        return
    known = _backend_config().CLASS_FILE_PATH_MAPPING
    for name, state in config.items():
        where = f"env.initial_config.{name}"
        if name not in known:
            # BFCL ignores it, so a misspelt class name would leave that class in its default state without a word.
            yield where, f"{name!r} is not one of BFCL's API classes ({', '.join(sorted(known))})"
        elif not isinstance(state, dict):
            yield where, f"expected an object (the state of {name}), got {_json_type(state)}"
        elif name in classes and name not in REFUSED_BACKENDS and not is_stateless(name):
            problem = _load_problem(name, state, long_context)
            if problem is not None:
                yield where, problem


def check_bfcl_env(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The problems of a BFCL multi-turn row's `env` (whole rows and per-turn rows), as `(field, message)` pairs;
    `[]` when a session can start from it.

    Checked: `involved_classes` names classes grpo-tools runs (`api_class`); `initial_config` is an object whose keys
    are BFCL's class names, each holding an object the class loads as its state (the class's own loading code is run
    on a copy, as every session runs it); `long_context` is true or false; `missed_function` maps turn indexes to
    lists of function names.

    >>> check_bfcl_env({"involved_classes": ["MathAPI", "WebSearchAPI"]})[0][0]
    'env.involved_classes[1]'
    """
    problems = list(_check_classes(env.get("involved_classes")))
    long_context = env.get("long_context", False)
    if not isinstance(long_context, bool):
        problems.append(("env.long_context", f"expected true or false, got {_json_type(long_context)}"))
        long_context = False
    classes = env.get("involved_classes") if isinstance(env.get("involved_classes"), list) else []
    if not any(field.startswith("env.involved_classes") for field, _ in problems):
        problems += _check_config(env.get("initial_config"), classes, long_context)
    missed = env.get("missed_function", {})
    if not isinstance(missed, dict) or not all(
        isinstance(turn, str) and turn.isdigit() and isinstance(names, list) and all(isinstance(n, str) for n in names)
        for turn, names in missed.items()
    ):
        problems.append(("env.missed_function", "expected {turn index: [function names]}"))
    return problems
