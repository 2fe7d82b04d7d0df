"""`napari_lazy_zarr.core.testing`: the shipped test aids import no test framework."""

from __future__ import annotations

import subprocess
import sys

from napari_lazy_zarr.core import executors, testing


def test_testing_imports_neither_pytest_nor_hypothesis() -> None:
    code = (
        "import sys, napari_lazy_zarr.core.testing;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pytest', 'hypothesis', '_pytest')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_testing_re_exports_the_executors() -> None:
    assert testing.InlineExecutor is executors.InlineExecutor
    assert testing.ManualExecutor is executors.ManualExecutor
    assert set(testing.__all__) == {
        "FaultySource",
        "InjectedFaultError",
        "InlineExecutor",
        "ManualExecutor",
    }
