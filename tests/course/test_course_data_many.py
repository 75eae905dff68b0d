"""``course_data_many``: the course's own run of several chapters, ``jobs`` at a time, each kernel in a slot
no other kernel holds at that moment."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from transformer_course.course import grading
from transformer_course.course.sandbox import Limits


def _record(log: Path):
    def fake_course_data(released_notebook, limits, slot, cgroup):
        start = time.monotonic()
        time.sleep(0.3)
        with open(log, "a") as handle:
            handle.write(json.dumps([Path(released_notebook).name, slot, start, time.monotonic()]) + "\n")
        if Path(released_notebook).name == "broken.ipynb":
            raise RuntimeError("this chapter's own run fails")
        return {Path(released_notebook).name: grading.CourseCell(seconds=float(slot))}
    return fake_course_data


def test_chapters_run_jobs_at_a_time_in_slots_no_two_share(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setattr(grading, "course_data", _record(log))  # the forked workers inherit the patch
    names = [f"ch{i}.ipynb" for i in range(5)] + ["broken.ipynb"]
    found = grading.course_data_many([tmp_path / n for n in names], Limits(), 2, {0: None, 1: None})
    assert [list(f) if f is not None else None for f in found] == [[n] for n in names[:-1]] + [None]  # in order
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r[0] for r in runs) == sorted(names)
    assert {r[1] for r in runs} == {0, 1}
    overlapping = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:] if a[2] < b[3] and b[2] < a[3]]
    assert overlapping, "two chapters at a time: some runs overlap in time"
    assert all(a[1] != b[1] for a, b in overlapping), "two kernels at once in one slot"


def test_one_job_runs_the_chapters_one_after_the_other(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setattr(grading, "course_data", _record(log))
    found = grading.course_data_many([tmp_path / "a.ipynb", tmp_path / "b.ipynb"], Limits(), 1, {0: None})
    assert [list(f) for f in found] == [["a.ipynb"], ["b.ipynb"]]
    (a, b) = sorted((json.loads(line) for line in log.read_text().splitlines()), key=lambda r: r[2])
    assert a[3] <= b[2] and a[1] == b[1] == 0


def test_no_chapters_start_no_workers_and_a_bad_jobs_is_named():
    assert grading.course_data_many([], Limits(), 2, {}) == []
    with pytest.raises(ValueError, match="jobs"):
        grading.course_data_many([Path("a.ipynb")], Limits(), 0, {})
    with pytest.raises(TypeError, match="jobs"):
        grading.course_data_many([Path("a.ipynb")], Limits(), 2.0, {})
