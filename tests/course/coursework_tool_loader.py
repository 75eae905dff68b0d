"""``tools/coursework.py`` loaded once, as the module ``coursework_tool``, for the coursework tests."""

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "coursework_tool", Path(__file__).resolve().parents[2] / "tools" / "coursework.py")
tool = importlib.util.module_from_spec(_spec)
sys.modules["coursework_tool"] = tool
_spec.loader.exec_module(tool)
