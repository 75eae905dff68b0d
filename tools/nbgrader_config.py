# nbgrader configuration of a "Transformers, Executed" course folder.
#
# `python tools/coursework.py release --out course/` copies this file to course/nbgrader_config.py,
# and tools/coursework.py loads it from there for every step, so the tool and nbgrader's own CLI
# (run inside course/, e.g. `nbgrader db student list` or `nbgrader formgrade`) share one setup.
import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

# The course folder is the folder holding this file: source/, release/, submitted/, autograded/,
# feedback/ and the gradebook (gradebook.db, sqlite) live in it.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "transformers-executed"

# Student versions: the solution becomes this stub; hidden tests are removed; outputs are cleared.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Autograding executes a whole chapter, and a chapter may train a model for up to a minute:
# allow five minutes per cell before a cell counts as failed (an endless loop costs its exercise).
c.Execute.timeout = 300
# A student who deleted a test cell gets it back (and is graded on it) instead of skipping it.
c.OverwriteCells.add_missing_cells = True


# Feedback: nbgrader's report shows the autograded notebook, whose test cells hold the hidden
# tests again (autograde restored them). Hide them, so a course can be reused next term: each
# test cell loses its hidden region, and a failed test shows its message ("allowed_pairs(5):
# expected 15, got 10"), not a traceback whose code context would quote the hidden test.
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import ClearHiddenTests, GetGrades  # noqa: E402
from nbgrader.utils import is_grade  # noqa: E402


class HideHiddenTestsInFeedback(ClearHiddenTests):
    """Drop hidden test regions and shorten failed tests' tracebacks to their message."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if is_grade(cell):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources


c.GenerateFeedback.preprocessors = [HideHiddenTestsInFeedback, GetGrades, CSSHTMLHeaderPreprocessor]
