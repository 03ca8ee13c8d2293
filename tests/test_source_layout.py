"""The layout stays readable: no module grows past 500 lines, no directory past 20
Python files (a module that does is several concerns, to split along them), and a
subpackage's ``__init__.py`` says in one line what the package is (the rest belongs to
the module it describes, or to docs/)."""

from __future__ import annotations

import ast
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


def test_each_subpackage_docstring_is_one_line() -> None:
    inits = list(SRC.glob("*/*/__init__.py"))
    assert inits, f"no subpackages found under {SRC}"
    long = {
        str(path.relative_to(SRC)): len(docstring.splitlines())
        for path in inits
        if (docstring := ast.get_docstring(ast.parse(path.read_text()))) is not None
        and len(docstring.splitlines()) > 1
    }
    assert not long, f"subpackage docstrings over one line: {long}"
