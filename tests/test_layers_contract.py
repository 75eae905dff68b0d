"""The package's layers (nn < measure < experiments < plotting < course), checked by import-linter.

The contracts live in pyproject.toml ([tool.importlinter]); this test runs them, so a lower layer
that imports a higher one, or an ``nn`` module that imports pandas, matplotlib, tqdm or IPython,
fails the test suite.
"""

from pathlib import Path

from importlinter.cli import lint_imports

import transformer_course

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(transformer_course.__file__).parent


def test_layer_contracts_are_kept():
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0


def test_a_reversed_layer_order_is_reported_as_broken(tmp_path):
    """The check can fail: the same layers listed upside down must break (plotting imports nn)."""
    config = tmp_path / "reversed.ini"
    config.write_text("[importlinter]\nroot_package = transformer_course\n\n"
                      "[importlinter:contract:reversed]\nname = reversed\ntype = layers\nlayers =\n"
                      "    transformer_course.nn\n    transformer_course.plotting\n")
    assert lint_imports(config_filename=str(config), no_cache=True, no_logo=True) == 1


def test_the_top_level_holds_at_most_three_modules():
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= 3, modules
    assert {path.name for path in PACKAGE.iterdir() if path.is_dir() and not path.name.startswith("_")} == {
        "nn", "measure", "experiments", "plotting", "course"}
