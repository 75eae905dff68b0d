"""The course machinery: ``notebook`` (chapter setup), ``checks`` (exercise feedback), ``ipynb`` (the
reader of ``.ipynb`` files and ``_toc.yml``), ``coursework`` (exercise tables, student versions),
``grading`` (the sandboxed grader: per-notebook workers and per-exercise checkers), with ``sandbox``
(bubblewrap, limits, cgroups, regular files), ``kernel`` (the bounded protocol with the student's
process), ``view`` (the package without an exercise's references), ``plans`` (what each exercise
checks and lacks, copies of the reference source) and ``feedback`` (messages, pages, safe CSV text), ``provenance`` (which function made each figure and table).
The top layer: nothing imports it.
"""
