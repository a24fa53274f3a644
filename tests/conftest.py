import importlib.util

import numpy as np
import pytest

#: Blender 5's line (Python 3.13, .venv313) has no torch in this process; its jobs train
#: with NEURAL_ROM_PYTHON's (README "Development").
TORCH_HERE = importlib.util.find_spec("torch") is not None


NO_TORCH = (
    "Skipped: trains with torch in this process; this Python has none (Blender 5's line: "
    "its jobs train with the Python in NEURAL_ROM_PYTHON)"
)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """Where this Python has no torch, a test module that imports it (directly or through
    training/) is skipped, saying so, instead of failing to collect."""
    report = yield
    if not TORCH_HERE and report.failed and "No module named 'torch'" in str(report.longrepr):
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, NO_TORCH)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The same for a test (or its fixture) that imports torch when it runs."""
    report = yield
    exc = call.excinfo
    if (
        not TORCH_HERE
        and exc is not None
        and exc.errisinstance(ModuleNotFoundError)
        and exc.value.name == "torch"
    ):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, NO_TORCH)
    return report


@pytest.fixture
def rng():
    return np.random.default_rng(0)
