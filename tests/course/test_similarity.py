"""The similarity report: copies between students and from the package are reported, independent work is not."""

import csv
import inspect

import nbformat
import pytest

from transformer_course.course.similarity import compare_chapter, package_sources, student_code, write_similarity_csv
from transformer_course.nn import normalization

STUB = "def my_layer_norm(x, gamma, beta, eps=1e-5):\n    raise NotImplementedError()"
MINE = '''def my_layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    normed = (x - mean) / torch.sqrt(var + eps)
    out = gamma * normed + beta
    return out
'''
RENAMED = MINE.replace("normed", "z").replace("out", "y").replace("mean", "mu")  # a copy with new names
OWN_WAY = '''def my_layer_norm(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    scale = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    return centred * scale * gamma + beta
'''


def notebook(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    return nbformat.writes(nb).encode()


@pytest.fixture
def released(tmp_path):
    path = tmp_path / "released.ipynb"
    path.write_bytes(notebook("import torch", STUB))
    return path


def test_a_students_code_is_what_the_released_notebook_did_not_hold(released):
    assert student_code(notebook("import torch", MINE, "  "), released) == MINE
    assert student_code(notebook("import torch", STUB), released) == STUB  # a stub is still in: boilerplate handles it


def test_copies_are_reported_and_independent_work_is_not(released, tmp_path):
    pasted = "class Pasted:\n" + inspect.getsource(normalization.LayerNorm.forward)
    submissions = {"s1": notebook("import torch", MINE), "s2": notebook("import torch", RENAMED),
                   "s3": notebook("import torch", OWN_WAY), "s4": notebook("import torch", pasted),
                   "s5": notebook("import torch", STUB), "s6": b"{not a notebook"}
    matches = compare_chapter("dl0034_layer_norm", submissions, released, report=tmp_path / "r" / "dl0034.html")
    pairs = {(m.student, m.other) for m in matches}
    assert ("s1", "s2") in pairs or ("s2", "s1") in pairs  # renaming hides nothing
    assert ("s4", "package:normalization.py") in pairs  # the package's own LayerNorm, pasted
    assert not any("s3" in pair or "s5" in pair for pair in pairs)  # own work; the untouched stub is boilerplate
    assert all(max(m.student_share, m.other_share) >= 0.5 and m.tokens > 0 for m in matches)
    assert (tmp_path / "r" / "dl0034.html").is_file()
    write_similarity_csv(matches, tmp_path / "similarity.csv")
    rows = list(csv.DictReader((tmp_path / "similarity.csv").open()))
    assert len(rows) == len(matches) and rows[0].keys() >= {"student", "similar_to", "share_of_student_code"}


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="threshold"):
        compare_chapter("x", {}, None, threshold=0)
    with pytest.raises(TypeError, match="submissions"):
        compare_chapter("x", [("s1", b"")], None)
    assert compare_chapter("x", {}, None) == []
    assert any(path.name == "normalization.py" for path in package_sources())


def test_padded_code_is_compared_only_up_to_the_bound(released):
    from transformer_course.course.similarity import MAX_CODE_CHARS

    padded = MINE + "\n" + "x = 1\n" * (MAX_CODE_CHARS // 6 + 10)
    matches = compare_chapter("dl0034", {"big": notebook("import torch", padded), "s1": notebook(MINE)}, released)
    assert [m.other for m in matches if m.student == "big"][0].startswith("not compared past 200,000 characters")
