"""What a student reads: the message of each exercise and the feedback page; safe text for files.

A hidden check's message names only the property that failed (the name the instructor gave the
check), never a value or a name the student's code chose. A visible check's full message (what the
student saw in the notebook) is shown only while the kernel has not yet run a hidden check, so that
nothing a hidden check showed the student's code can come back through a later visible message.
"""

from __future__ import annotations

import builtins
import html
from typing import Any

_BUILTIN_ERRORS = frozenset(name for name, value in vars(builtins).items()
                            if isinstance(value, type) and issubclass(value, BaseException))


def safe_text(text: Any, limit: int = 2000) -> str:
    """``text`` as a string that any UTF-8 writer accepts (lone surrogates escaped), cut to ``limit``."""
    text = str(text)[:limit]
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def csv_cell(value: Any) -> Any:
    """A CSV cell that no spreadsheet reads as a formula (text starting with = + - @ or a control
    character gets a leading apostrophe); numbers pass unchanged."""
    if not isinstance(value, str):
        return value
    value = safe_text(value, 10_000)
    if value and (value[0] in "=+-@\t\r\n" or value[0] in "\uff1d\uff0b\uff0d\uff20"):
        return "'" + value
    return value


def describe_error(error: BaseException, hidden: bool, clean: bool, check_name: str | None = None) -> str:
    """The student's message for a failed check.

    Args:
        hidden: the failure happened in a hidden part of the test cell.
        clean: no hidden check has run in this kernel yet (a visible message may show values).
        check_name: the name the instructor gave the failing check, when a ``check_*`` raised.
    """
    from transformer_course.course.checks import ExerciseError
    from transformer_course.course.kernel import RemoteError

    if isinstance(error, NameError) and not hidden:
        return safe_text(f"{error} (keep the name the exercise asks for, and run your solution cell without "
                         "errors)", 400)
    if isinstance(error, RemoteError) and error.type_name == "NotImplementedError":
        return "not answered: your function still raises NotImplementedError"
    if not hidden and clean:
        if isinstance(error, ExerciseError):
            return safe_text(error, 600)
        if isinstance(error, RemoteError):
            return safe_text(f"your code raised {error}", 400)
        return safe_text(f"the test could not use your answer: {type(error).__name__}: {error}", 400)
    where = "a hidden check" if hidden else "a visible check (run the test cell in your notebook to see why)"
    if isinstance(error, ExerciseError) and check_name:
        return safe_text(f"{check_name}: wrong, in {where}", 400)
    if isinstance(error, RemoteError):
        kind = error.type_name if error.type_name in _BUILTIN_ERRORS else "an exception"
        return f"your code raised {kind} in {where}"
    if isinstance(error, ExerciseError):
        return f"wrong answer in {where}"
    return f"the test could not use your answer ({type(error).__name__ if type(error).__name__ in _BUILTIN_ERRORS else 'an error'}) in {where}"


def feedback_html(student: str, chapter: str, result: Any) -> str:
    """A student's feedback page: per exercise the result, the points and a message. Nothing else."""
    def text(value: Any) -> str:
        return html.escape(safe_text(value))

    rows = "\n".join(
        f"<tr><td>{text(e.label)}</td><td>{text(e.title)}</td>"
        f"<td>{text(e.result)}</td><td>{e.points:g} / {e.max_points:g}</td>"
        f"<td>{text(e.message)}</td></tr>" for e in result.exercises)
    total = sum(e.points for e in result.exercises)
    maximum = sum(e.max_points for e in result.exercises)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Feedback: {text(chapter)}</title>
<style>body{{font-family:sans-serif;max-width:60rem;margin:2rem auto}}td,th{{border:1px solid #999;
padding:.3rem .5rem;text-align:left;vertical-align:top}}table{{border-collapse:collapse}}</style></head>
<body><h1>{text(chapter)}</h1>
<p>Student: {text(student)}. Score: <strong>{total:g} / {maximum:g}</strong>. Status: {text(result.status)}.</p>
<table><thead><tr><th>exercise</th><th>title</th><th>result</th><th>points</th><th>message</th></tr></thead>
<tbody>
{rows}
</tbody></table>
<p>Each exercise was checked with the visible tests of your notebook and further hidden tests.</p>
</body></html>
"""
