"""Every lower bound in ``pyproject.toml`` is the oldest release the package and the chapters can use.

``FLOORS`` below is the table: for each dependency, the APIs the code might use that are newer
than the dependency's first releases, each with a pattern that finds it in the code (``src/`` and
the chapters' ``.myst.md`` sources) and the first release that has it. A dependency's honest lower
bound is the newest first release among the APIs the code actually uses, and never below the first
release with wheels for the oldest Python the package supports (``requires-python``; CPython 3.10,
checked with ``pip download --only-binary=:all: --python-version 310 --platform manylinux2014_x86_64``:
numpy 1.21.1 has no cp310 wheel, 1.21.2 has; pandas 1.3.2 none, 1.3.3 has; matplotlib 3.4.3 none,
3.5.0 has; PyYAML 5.4.1 none, 6.0 has). The tests fail when a bound is lower
(the code would break on the oldest release allowed) or higher (it would refuse, or replace,
Colab's PyTorch for no reason) than that, when a dependency has no row, and when an API of the table
does not exist under the name given in the installed release (a typo would make its row useless).

When you use a newer API of a dependency, add its row (first release from the dependency's
release notes) and raise the bound; the student edition's install cell reads the torch bound
(``tools/student_edition.py``) and says in one line when the runtime's PyTorch is older.
"""

from __future__ import annotations

import importlib
import inspect
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@dataclass(frozen=True)
class Floor:
    api: str  # what the code uses, in words
    pattern: str  # a regular expression that finds that use in the code
    first: str  # the first release that has it
    check: str | None = None  # "module:attribute.path" or "module:callable(parameter)" that must exist now


PYTHON_310 = r"(?m)^requires-python = \">=3\.10\"$"  # found in pyproject.toml (see _code below)

FLOORS: dict[str, list[Floor]] = {
    "torch": [
        Floor("FlexAttention (flex_attention, create_block_mask)",
              r"torch\.nn\.attention\.flex_attention", "2.5",
              "torch.nn.attention.flex_attention:flex_attention"),
        Floor("create_block_mask", r"\bcreate_block_mask\b", "2.5",
              "torch.nn.attention.flex_attention:create_block_mask"),
        Floor("scaled_dot_product_attention(enable_gqa=...)", r"\benable_gqa\b", "2.5",
              "torch.nn.functional:scaled_dot_product_attention(enable_gqa)"),
        Floor("torch.nn.RMSNorm", r"\b(?:torch\.)?nn\.RMSNorm\b", "2.4", "torch.nn:RMSNorm"),
        Floor("torch.utils.flop_counter.FlopCounterMode", r"\bFlopCounterMode\b", "2.1",
              "torch.utils.flop_counter:FlopCounterMode"),
        Floor("torch.compile", r"\btorch\.compile\(", "2.0", "torch:compile"),
        Floor("torch.func", r"\btorch\.func\b", "2.0", "torch.func:functional_call"),
        Floor("scaled_dot_product_attention", r"\bscaled_dot_product_attention\b", "2.0",
              "torch.nn.functional:scaled_dot_product_attention"),
        Floor("torch.load(weights_only=...)", r"\bweights_only=", "1.13", "torch:load(weights_only)"),
        Floor("nn.MultiheadAttention(batch_first=...)", r"MultiheadAttention\([^)]*batch_first", "1.9",
              "torch.nn:MultiheadAttention(batch_first)"),
        Floor("torch.inference_mode", r"\binference_mode\b", "1.9", "torch:inference_mode"),
    ],
    "numpy": [
        Floor("wheels for CPython 3.10", PYTHON_310, "1.21.2"),
    ],
    "matplotlib": [
        Floor("Figure(layout='constrained')", r"Figure\([^)]*layout=", "3.5", "matplotlib.figure:Figure(layout)"),
        Floor("Axes.set_xticks(ticks, labels)", r"\.set_[xy]ticks\([^()]*(?:\([^()]*\))?[^()]*,", "3.5",
              "matplotlib.axes:Axes.set_xticks(labels)"),
        Floor("wheels for CPython 3.10", PYTHON_310, "3.5.0"),
    ],
    "pandas": [
        Floor("DataFrame.attrs (the exhibit stamp)", r"\.attrs\b", "1.0", "pandas:DataFrame.attrs"),
        Floor("wheels for CPython 3.10", PYTHON_310, "1.3.3"),
    ],
    "tqdm": [
        Floor("tqdm(iterable, desc=, leave=, disable=)", r"\btqdm\(", "4.1.0", "tqdm:tqdm.__init__(disable)"),
    ],
    "PyYAML": [
        Floor("yaml.safe_load", r"\byaml\.safe_load\b", "3.10", "yaml:safe_load"),
        Floor("wheels for CPython 3.10", PYTHON_310, "6.0"),
    ],
}


def _code() -> str:
    """The package's sources, the chapters' MyST sources and pyproject.toml, as one text."""
    paths = sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "chapters").glob("*.myst.md"))
    return "\n".join(p.read_text(encoding="utf-8") for p in paths + [ROOT / "pyproject.toml"])


def _bounds() -> dict[str, Version]:
    bounds = {}
    for line in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(line)
        lower = [s.version for s in requirement.specifier if s.operator == ">="]
        assert len(lower) == 1, f"{line}: one lower bound (>=) expected"
        bounds[requirement.name] = Version(lower[0])
    return bounds


def required_floor(floors: list[Floor], code: str) -> tuple[Version | None, list[str]]:
    """The newest first release among the APIs ``code`` uses, and those APIs."""
    used = [f for f in floors if re.search(f.pattern, code)]
    if not used:
        return None, []
    newest = max(Version(f.first) for f in used)
    return newest, [f.api for f in used if Version(f.first) == newest]


def test_every_dependency_has_a_row():
    assert set(_bounds()) == set(FLOORS), (sorted(_bounds()), sorted(FLOORS))


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_the_lower_bound_is_the_oldest_release_with_every_api_the_code_uses(name):
    code = _code()
    floor, binding = required_floor(FLOORS[name], code)
    assert floor is not None, f"{name}: no API of the table is used; is the dependency still needed?"
    bound = _bounds()[name]
    assert bound == floor, (f"pyproject.toml says {name}>={bound}, but the code uses {binding}, first in "
                            f"{name} {floor}: make the bound {name}>={floor}")


def _resolve(check: str):
    module, _, path = check.partition(":")
    path, _, parameter = path.partition("(")
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj, parameter.rstrip(")")


@pytest.mark.parametrize("name,floor", [(n, f) for n, fs in FLOORS.items() for f in fs if f.check],
                         ids=[f"{n}:{f.api}" for n, fs in FLOORS.items() for f in fs if f.check])
def test_every_api_of_the_table_exists_under_its_name(name, floor):
    obj, parameter = _resolve(floor.check)
    if parameter:
        try:
            parameters = inspect.signature(obj).parameters
        except ValueError:  # a builtin without a signature (scaled_dot_product_attention): its docs
            parameters = {}
        documented = re.search(rf"\b{parameter}\b", obj.__doc__ or "")
        assert parameter in parameters or documented, f"{floor.check}: no parameter {parameter!r}"


def test_the_floor_follows_the_code():
    """The rule itself: an API starts to count once the code uses it, and the newest one binds."""
    floors = FLOORS["torch"]
    assert required_floor(floors, "x = torch.compile(f)")[0] == Version("2.0")
    assert required_floor(floors, "torch.compile(f); norm = torch.nn.RMSNorm(8)") == \
        (Version("2.4"), ["torch.nn.RMSNorm"])
    assert required_floor(floors, "F.scaled_dot_product_attention(q, k, v, enable_gqa=True)")[0] == Version("2.5")
    assert required_floor(floors, "print('no torch API here')") == (None, [])


def test_the_installed_releases_are_not_older_than_the_bounds():
    from importlib.metadata import version

    for name, bound in _bounds().items():
        assert Version(version(name)) >= bound, f"{name} {version(name)} < {bound}"
