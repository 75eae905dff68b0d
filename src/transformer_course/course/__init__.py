"""The course machinery: ``notebook`` (chapter setup), ``checks`` (exercise feedback), ``ipynb`` (the
reader of ``.ipynb`` files and ``_toc.yml``), ``coursework`` (exercise tables, student versions),
``grading`` (the sandboxed grader), ``provenance`` (which function made each figure and table).
The top layer: nothing imports it.
"""
