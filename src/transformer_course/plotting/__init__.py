"""Plotting: one module per concern. Functions take data or modules and return a ``Figure``.

They build ``matplotlib.figure.Figure`` objects directly (never pyplot), so they neither show
anything nor change global state; a notebook displays the returned figure. Diagrams read their
boxes and labels off real module instances from ``transformer_course.nn``.
"""
