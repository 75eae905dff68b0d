# nbgrader configuration of a "Transformers, Executed" course folder.
#
# `python tools/coursework.py release --out course/` copies this file to course/nbgrader_config.py,
# and tools/coursework.py loads it from there for every step, so the tool and nbgrader's own CLI
# (run inside course/, e.g. `nbgrader db student list` or `nbgrader formgrade`) share one setup.
import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

# The course folder is the folder holding this file: source/ (instructor versions, hidden tests),
# release/ (student versions) and nbgrader's gradebook (gradebook.db, sqlite) live in it.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "transformers-executed"

# Student versions: the solution becomes this stub; hidden tests are removed; outputs are cleared.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Grading does not use nbgrader's autograde: tools/coursework.py grades each exercise with
# transformer_course.course.grading, the student's code in a sandbox and the hidden tests outside it.
