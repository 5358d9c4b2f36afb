"""Loads python/ferry/_measure.py on its own, so the tests that use it need neither the built C++
module nor the rest of the `ferry` package (whose __init__ imports the compiled `ferry._ferry`)."""

import importlib.util
import pathlib
import sys

MEASURE_PATH = pathlib.Path(__file__).resolve().parents[2] / "python" / "ferry" / "_measure.py"


def load():
    """The `_measure` module (loaded once per process as `ferry_measure`)."""
    if "ferry_measure" not in sys.modules:
        spec = importlib.util.spec_from_file_location("ferry_measure", MEASURE_PATH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["ferry_measure"] = module
    return sys.modules["ferry_measure"]
