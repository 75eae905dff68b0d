"""Licences, citation and the edition: the files an adopting instructor reads, and their agreement.

* ``CITATION.cff`` is valid against the Citation File Format 1.2.0 schema (vendored in
  ``tests/fixtures``, so no network);
* the edition is one version everywhere: the package's ``__version__`` (which ``pyproject.toml``
  reads), the top entry of ``CHANGELOG.md`` and ``CITATION.cff`` (``version`` and, with the
  changelog's date, ``date-released``); it follows the scheme ``YYYY.MM`` (``YYYY.MM.N`` for a fix);
* ``LICENSE`` is MIT, ``LICENSE-CONTENT.md`` CC BY 4.0, and the package metadata, the README and
  the site's footer say so.
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "tests" / "fixtures" / "citation-file-format-1.2.0.schema.json"
EDITION = re.compile(r"^(?P<year>20\d\d)\.(?P<month>[1-9]|1[0-2])(?:\.(?P<fix>[1-9]\d*))?$")
CHANGELOG_ENTRY = re.compile(r"^## (?P<version>\S+) \((?P<date>\d{4}-\d{2}-\d{2})\)$", re.MULTILINE)
VERSION_LINE = re.compile(r'^__version__ = "(?P<version>[^"]+)"$', re.MULTILINE)


def package_version() -> str:
    return VERSION_LINE.search((ROOT / "src" / "transformer_course" / "__init__.py").read_text())["version"]


def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def release_problems(version: str, cff: dict, changelog: str) -> list[str]:
    """Where the package version, the changelog's top entry and the citation disagree."""
    problems = []
    match = EDITION.match(version)
    if not match:
        problems.append(f"version {version!r} is not an edition YYYY.MM or YYYY.MM.N")
    entries = list(CHANGELOG_ENTRY.finditer(changelog))
    if not entries:
        return problems + ["CHANGELOG.md has no '## <version> (<YYYY-MM-DD>)' entry"]
    top = entries[0]
    if top["version"] != version:
        problems.append(f"CHANGELOG.md's top entry is {top['version']}, the package is {version}")
    if str(cff.get("version")) != version:
        problems.append(f"CITATION.cff says version {cff.get('version')!r}, the package is {version}")
    if str(cff.get("date-released")) != top["date"]:
        problems.append(f"CITATION.cff's date-released {cff.get('date-released')!r} is not the changelog's "
                        f"{top['date']}")
    if match:
        released = datetime.date.fromisoformat(top["date"])
        if (released.year, released.month) != (int(match["year"]), int(match["month"])):
            problems.append(f"edition {version} released on {top['date']}: the edition names its month")
    return problems


def test_citation_cff_is_valid_cff_1_2_0():
    schema = json.loads(SCHEMA.read_text())
    assert schema["$id"] == "https://citation-file-format.github.io/1.2.0/schema.json"
    data = citation()
    assert data["cff-version"] == "1.2.0"
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_check_catches_a_broken_citation():
    schema = json.loads(SCHEMA.read_text())
    broken = dict(citation())
    del broken["authors"]
    broken["license"] = "MIT-ish"
    broken["date-released"] = "1 December 2026"
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    messages = " ".join(e.message for e in validator.iter_errors(broken))
    assert "'authors' is a required property" in messages
    assert "MIT-ish" in messages and "1 December 2026" in messages


def test_the_package_the_changelog_and_the_citation_name_one_edition():
    problems = release_problems(package_version(), citation(), (ROOT / "CHANGELOG.md").read_text())
    assert not problems, "\n".join(problems)


def test_pyproject_reads_the_version_from_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "transformer_course.__version__"}
    import transformer_course

    assert transformer_course.__version__ == package_version()


@pytest.mark.parametrize("version,cff,changelog,expected", [
    ("2026.12", {"version": "2026.11", "date-released": "2026-12-01"}, "## 2026.12 (2026-12-01)\n",
     "CITATION.cff says version '2026.11'"),
    ("2026.12", {"version": "2026.12", "date-released": "2026-12-01"}, "## 2026.11 (2026-11-02)\n## 2026.12 (x)",
     "top entry is 2026.11"),
    ("2026.12", {"version": "2026.12", "date-released": "2026-12-02"}, "## 2026.12 (2026-12-01)\n",
     "date-released"),
    ("0.1.0", {"version": "0.1.0", "date-released": "2026-12-01"}, "## 0.1.0 (2026-12-01)\n", "not an edition"),
    ("2026.12", {"version": "2026.12", "date-released": "2027-01-05"}, "## 2026.12 (2027-01-05)\n",
     "names its month"),
    ("2026.12", {"version": "2026.12"}, "# Changelog\n", "no '## <version>"),
])
def test_a_disagreement_is_reported(version, cff, changelog, expected):
    assert any(expected in p for p in release_problems(version, cff, changelog)), \
        release_problems(version, cff, changelog)


def test_a_fix_release_is_an_edition_too():
    assert release_problems("2026.12.1", {"version": "2026.12.1", "date-released": "2026-12-20"},
                            "## 2026.12.1 (2026-12-20)\n## 2026.12 (2026-12-01)\n") == []


def test_the_licences_are_stated_everywhere():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    content = (ROOT / "LICENSE-CONTENT.md").read_text()
    assert "Creative Commons Attribution 4.0 International" in content
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in content
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT AND CC-BY-4.0"  # the wheel ships course prose (the capstone's corpus)
    assert project["license-files"] == ["LICENSE", "LICENSE-CONTENT.md"]
    assert set(citation()["license"]) == {"MIT", "CC-BY-4.0"}
    readme = (ROOT / "README.md").read_text()
    assert "CC BY 4.0" in readme and "MIT" in readme and "CITATION.cff" in readme
    footer = yaml.safe_load((ROOT / "_config.yml").read_text())["html"]["extra_footer"]
    assert "{edition}" in footer and "CC BY 4.0" in footer and ">MIT<" in footer


def test_the_site_address_comes_first_everywhere_a_reader_looks():
    site = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]
    assert site.startswith("https://") and site.endswith("/")
    assert citation()["url"] == site
    for name in ("README.md", "intro.md"):
        head = (ROOT / name).read_text().split("\n## ", 1)[0]  # before the first section
        assert site in head, f"{name} does not give the site's address before its first section"


def test_no_author_name_would_be_split_by_bibtex():
    # BibTeX reads "A, B" as "Last, First": a team named with a comma would come out as two names.
    assert all("," not in author.get("name", "") for author in citation()["authors"])
