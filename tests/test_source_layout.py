"""The layout stays readable: no module grows past 500 lines, and no directory past 20
Python files (a module that does is several concerns, to split along them)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MOST_LINES = 500
MOST_FILES = 20


def test_no_module_is_over_500_lines() -> None:
    sizes = {path: len(path.read_text().splitlines()) for path in SRC.rglob("*.py")}
    assert sizes, f"no modules found under {SRC}"
    over = {str(p.relative_to(SRC)): lines for p, lines in sizes.items() if lines > MOST_LINES}
    assert not over, f"modules over {MOST_LINES} lines: {over}"


def test_no_directory_holds_more_than_20_python_files() -> None:
    directories = {path.parent for path in SRC.rglob("*.py")}
    counts = {directory: len(list(directory.glob("*.py"))) for directory in directories}
    crowded = {str(d.relative_to(SRC)): n for d, n in counts.items() if n > MOST_FILES}
    assert not crowded, f"directories with more than {MOST_FILES} Python files: {crowded}"
