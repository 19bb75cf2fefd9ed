"""Print the number of generated inputs per entry point at the end of the run."""

from __future__ import annotations

from ._harness import COUNTS


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not COUNTS:
        return
    tr = terminalreporter
    tr.section("fuzzed inputs per entry point")
    for name, n in sorted(COUNTS.items()):
        tr.write_line(f"{name:<40} {n:>7}")
    tr.write_line(f"{'total':<40} {sum(COUNTS.values()):>7}")
