"""Build the capstone's corpus: the prose of the ten chapters DL0027-DL0036, code cells stripped.

    python tools/build_course_prose.py          # writes src/transformer_course/_data/course_prose.txt
    python tools/build_course_prose.py --check  # fails if the shipped snapshot is out of date

The snapshot ships with the package (package data), so the capstone chapter reads it in Colab too,
without the repository and without a download. It is rebuilt by hand, not at run time: the
chapter's trained numbers depend on its exact text. ``prose_from_myst`` is the whole recipe.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "chapters").glob("dl00[23][0-9]_*.myst.md"))
CHAPTERS = [path for path in SOURCES if "dl0027" <= path.name[:6] <= "dl0036"]
TARGET = ROOT / "src" / "transformer_course" / "_data" / "course_prose.txt"


def prose_from_myst(text: str) -> str:
    """The Markdown prose of a MyST notebook: no front matter, no code cells, no directive fences or options."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # jupytext front matter
    text = re.sub(r"^(`{3,})\{code-cell\}.*?^\1[ \t]*$", "", text, flags=re.S | re.M)  # code cells
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "+++", ":::")) or re.match(r"^:[\w-]+:", stripped) or stripped.startswith("<!--"):
            continue  # directive fences, cell separators, directive options, comments
        kept.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip() + "\n"


def build() -> str:
    return "\n".join(prose_from_myst(path.read_text(encoding="utf-8")) for path in CHAPTERS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the snapshot differs from a fresh build")
    args = parser.parse_args()
    text = build()
    if args.check:
        same = TARGET.is_file() and TARGET.read_text(encoding="utf-8") == text
        print("course_prose.txt is up to date" if same else "course_prose.txt is out of date: rebuild it")
        return 0 if same else 1
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(text)} characters from {len(CHAPTERS)} chapters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
