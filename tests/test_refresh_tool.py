import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("refresh_notebooks", ROOT / "tools" / "refresh_notebooks.py")
refresh_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(refresh_notebooks)


def test_pair_names_both_files(tmp_path):
    ipynb, md = refresh_notebooks.pair(tmp_path / "dl0001_x.myst.md")
    assert (ipynb.name, md.name) == ("dl0001_x.ipynb", "dl0001_x.myst.md")
    assert refresh_notebooks.pair(tmp_path / "dl0001_x.ipynb") == (ipynb, md)


def test_refresh_executes_in_order_and_writes_both(tmp_path):
    md = tmp_path / "demo.myst.md"
    md.write_text("---\nkernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
                  "# Demo\n\n```{code-cell} ipython3\nx = 20 + 1\n```\n\n```{code-cell} ipython3\nprint(x * 2)\n```\n")
    refresh_notebooks.refresh(md)
    import nbformat
    notebook = nbformat.read(tmp_path / "demo.ipynb", as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2]
    assert code[1].outputs[0].text == "42\n"
