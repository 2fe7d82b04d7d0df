"""The red-team suite: every case in its own subprocess, bounded in time, its peak RSS measured.

One test per case (`tests/redteam/cases.py` lists them; `harness.py` says how
they run and what each outcome means). The cases selected for a session run
up front, two subprocesses at a time, and each test asserts its case's outcome
is one the case accepts.

Set ``REDTEAM_TABLE=<file>`` to write the figures and the per-case table
(markdown) that docs/hostile-input.md records.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.redteam.cases import CASES, CASES_BY_ID
from tests.redteam.harness import Result, run_cases, summary
from tests.redteam.hostile_server import HostileServer

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs a fork server, /proc, RLIMIT_AS, FIFOs"
)
MINIMUM_CASES = 150
# Cases written before their fix (issue 50's remote items), failing until it lands: strict,
# so a fix that lands without removing its mark fails here too.
KNOWN_FAILURES: dict[str, str] = {}


@pytest.fixture(scope="session")
def redteam_results(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Result]]:
    """Run the selected cases once, two at a time, against a hostile server of this session."""
    selected = [
        item.callspec.params["case_id"]
        for item in request.session.items
        if hasattr(item, "callspec") and "case_id" in item.callspec.params
    ]
    cases = [CASES_BY_ID[case_id] for case_id in dict.fromkeys(selected)]
    workdir = tmp_path_factory.mktemp("redteam")
    with HostileServer(workdir) as server:
        results = run_cases(cases, workdir=workdir, server=server.url)
    yield results
    table = os.environ.get("REDTEAM_TABLE")
    if table:
        Path(table).write_text(summary(results.values(), cases))


@pytest.mark.parametrize(
    "case_id",
    [
        pytest.param(
            case.id,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[case.id])]
            if case.id in KNOWN_FAILURES
            else [],
        )
        for case in CASES
    ],
)
def test_redteam(case_id: str, redteam_results: dict[str, Result]) -> None:
    case = CASES_BY_ID[case_id]
    result = redteam_results[case_id]
    assert result.accepted, (
        f"{case.kind}: {case_id}: {result.outcome} (acceptable: {', '.join(sorted(case.accept))}) "
        f"after {result.seconds:.1f} s, peak RSS +{result.peak_bytes >> 20} MiB: {result.detail}"
    )


def test_enough_distinct_cases() -> None:
    assert len(CASES) >= MINIMUM_CASES
    assert len(CASES_BY_ID) == len(CASES), "case ids must be unique"
