"""The course-prose corpus: shipped as package data, prose only, encoded and split without overlap."""

import importlib.util
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
import torch

from transformer_course.experiments.corpus import (CharVocabulary, load_course_prose, split_corpus, text_windows)

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("build_course_prose", ROOT / "tools" / "build_course_prose.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_course_prose"] = module
    spec.loader.exec_module(module)
    return module


def test_the_snapshot_is_package_data_that_the_wheel_includes():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["transformer_course"]
    assert any(fnmatch("_data/course_prose.txt", pattern) for pattern in patterns)
    assert (ROOT / "src" / "transformer_course" / "_data" / "course_prose.txt").is_file()


def test_the_snapshot_is_the_prose_of_the_ten_chapters_without_code():
    text = load_course_prose()
    assert len(text) > 100_000
    for chapter in ("DL0027 · ", "DL0036 · "):
        assert chapter in text
    for code in ("{code-cell}", "jupytext:", "import torch", "nbgrader:", "\n+++"):
        assert code not in text, code


def test_prose_from_myst_strips_front_matter_code_cells_and_directives():
    tool = _tool()
    myst = ("---\njupytext:\n  x: 1\n---\n\n# Title\n\nSome prose.\n\n```{code-cell} ipython3\n:tags: [x]\n"
            "import torch\n```\n\n+++ {\"tags\": []}\n\n:::{exercise} Do it\n:label: ex1\n\nThe task.\n:::\n")
    assert tool.prose_from_myst(myst) == "# Title\n\nSome prose.\n\nThe task.\n"


def test_vocabulary_round_trips_and_refuses_unknown_characters():
    vocabulary = CharVocabulary.of("hello world")
    assert vocabulary.chars == " dehlorw" and vocabulary.size == 8
    ids = vocabulary.encode("low")
    assert ids.tolist() == [4, 5, 7] and vocabulary.decode(ids) == "low"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocabulary.encode("hex")
    with pytest.raises(ValueError, match="sorted"):
        CharVocabulary("ba")
    with pytest.raises(ValueError, match="ids"):
        vocabulary.decode([8])


def test_split_holds_out_the_end_and_windows_stay_inside():
    ids = torch.arange(100)
    train, held_out = split_corpus(ids)
    assert train.tolist() == list(range(90)) and held_out.tolist() == list(range(90, 100))
    windows = text_windows(train, 50, 7, torch.Generator().manual_seed(0))
    assert windows.shape == (50, 7)
    assert torch.equal(windows[:, 1:] - windows[:, :-1], torch.ones(50, 6, dtype=torch.long))  # contiguous
    assert int(windows.max()) < 90
    with pytest.raises(ValueError, match="length"):
        text_windows(train, 1, 91, torch.Generator())
    with pytest.raises(ValueError, match="held_out_fraction"):
        split_corpus(ids, 1.0)
