"""The doc tests' summary line at the end of the run (only when they ran)."""

from __future__ import annotations

from tests.docs.summary import RESULTS, summary, write_record


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    line, record = summary()
    write_record(record)
    terminalreporter.write_sep("-", line)
    for marked in record["marked"]:
        terminalreporter.write_line(
            f"  not run: {marked['where']} ({marked['kind']}): {marked['why']}"
        )
