"""The result of check(): one row per (backend, scenario, operator), printed as a table."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

from ..core.operator import FAMILY
from ._scenario import OPERATORS

# the table has one column per operator family (value_and_ variants included)
COLUMNS = tuple(dict.fromkeys(FAMILY[op] for op in OPERATORS))


@dataclasses.dataclass(frozen=True)
class Result:
    """One run: status is "pass", "fail", "error" (it raised) or "skip" (with a reason)."""

    backend: str
    scenario: str
    family: str
    operator: str
    status: str
    error: float | None = None
    tolerance: float | None = None
    reason: str = ""
    seconds: float | None = None
    f_calls: int | None = None


class Report:
    """The results of :func:`~diffiface.testing.check` (or of
    :func:`~diffiface.testing.run_matrix`).

    ``str(report)`` is a table: a row per (backend, scenario family; for the matrix,
    scenario), a column per operator (its value_and_ variants included), each cell
    "ok" with the largest error, "FAIL" with it, "ERROR", "skip", or "-" where the
    operator does not apply.

    Examples:
        >>> r = Report([Result("FD", "s", "array->scalar", "gradient", "pass", 1e-9)],
        ...            ("gradient",))
        >>> r.ok, len(r.rows())
        (True, 1)
    """

    def __init__(self, results: list, operators: tuple = (), group: str = "family") -> None:
        self.results = list(results)
        self.operators = tuple(operators) or tuple({r.operator: None for r in results})
        self.group = group  # the heading of the rows' second column (what ``family`` holds)

    @property
    def ok(self) -> bool:
        """No run failed or raised."""
        return not self.failures()

    def failures(self) -> list:
        return [r for r in self.results if r.status in ("fail", "error")]

    def rows(self) -> list:
        """One dict per run."""
        return [dataclasses.asdict(r) for r in self.results]

    def to_json(self) -> str:
        return json.dumps(self.rows(), indent=1)

    def to_csv(self) -> str:
        out = io.StringIO()
        fields = [f.name for f in dataclasses.fields(Result)]
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows())
        return out.getvalue()

    def raise_on_failure(self) -> None:
        """Raise AssertionError naming every failing cell (a pytest failure)."""
        bad = self.failures()
        if bad:
            lines = [f"{r.backend} {r.scenario} {r.operator}: {r.status} ({r.reason})" for r in bad]
            raise AssertionError(f"{len(bad)} failing runs:\n" + "\n".join(lines))

    def __str__(self) -> str:
        columns = [c for c in COLUMNS if any(FAMILY[op] == c for op in self.operators)]
        cells: dict = {}
        for r in self.results:
            column = FAMILY[r.operator]
            cells.setdefault((r.backend, r.family), {}).setdefault(column, []).append(r)
        header = ["backend", self.group, *columns]
        table = [header]
        for (backend, family), row in cells.items():
            table.append([backend, family, *(_cell(row.get(c, [])) for c in columns)])
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in table]
        done = [r for r in self.results if r.status != "skip"]
        summary = f"{len(done)} runs, {len(self.failures())} failing"
        return "\n".join([*lines, summary])


def _cell(runs: list) -> str:
    ran = [r for r in runs if r.status != "skip"]
    if not ran:
        applies = [r for r in runs if r.reason != "does not apply to these shapes"]
        return "skip" if applies else "-"
    if any(r.status == "error" for r in ran):
        return "ERROR"
    worst = max(r.error or 0.0 for r in ran)
    return ("FAIL " if any(r.status == "fail" for r in ran) else "ok ") + f"{worst:.0e}"
