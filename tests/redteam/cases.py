"""Every red-team case, by id (the parent parametrizes over them; a child looks its case up)."""

from __future__ import annotations

from tests.redteam import (
    cases_bytes,
    cases_contract,
    cases_decode,
    cases_files,
    cases_http,
    cases_lifecycle,
    cases_scale,
    cases_threads,
)
from tests.redteam.harness import Case  # noqa: TC001 (used at runtime by the children)

CASES: tuple[Case, ...] = (
    *cases_decode.cases(),
    *cases_http.cases(),
    *cases_files.cases(),
    *cases_lifecycle.cases(),
    *cases_contract.cases(),
    *cases_bytes.cases(),
    *cases_threads.cases(),
    *cases_scale.cases(),
)
CASES_BY_ID: dict[str, Case] = {case.id: case for case in CASES}
