"""The README's API and settings tables are what the code has.

Users (and tests written from the documentation) call the functions with the parameter
names the API table shows, and set the variables the settings table lists, expecting its
defaults: each table is checked against the code, so neither can drift from it.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import flashhub_kernels as fk
from flashhub_kernels._config import get_config

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown tables in ``text``, but their header rows."""
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows if not row[0].startswith("--")]


def documented_signatures() -> list[tuple[str, str]]:
    """``(name, "(parameters)")`` for each call the API table's first column shows."""
    calls = []
    for row in table_rows(section("API")):
        calls += re.findall(r"`([A-Za-z_.]+)(\([^`]*\))`", row[0])
    return calls


def plain_signature(obj: object) -> str:
    """``obj``'s signature as the table writes it: names, ``*`` and defaults, no types."""
    signature = inspect.signature(obj)  # type: ignore[arg-type]
    parameters = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=signature.empty))


def resolve(dotted: str) -> object:
    obj: object = fk
    for name in dotted.split("."):
        obj = getattr(obj, name)
    return obj


def test_the_api_table_shows_every_call_it_names() -> None:
    assert len(documented_signatures()) >= 12  # the table parses: a change to it shows


@pytest.mark.parametrize(("name", "shown"), documented_signatures(), ids=lambda v: v)
def test_the_api_table_shows_each_signature_as_the_code_has_it(name: str, shown: str) -> None:
    assert shown == plain_signature(resolve(name))


def settings_rows() -> list[tuple[list[str], str]]:
    """``(variables, default cell)`` of each row of the settings table that names one of
    this project's variables."""
    own = re.compile(r"`(FLASHHUB_[A-Z_]+|LOCAL_KERNELS|DISABLE_KERNEL_MAPPING)`")
    rows = [(own.findall(row[0]), row[1]) for row in table_rows(section("Settings"))]
    return [(names, default) for names, default in rows if names]


def documented_variables() -> set[str]:
    return {name for names, _default in settings_rows() for name in names}


def variables_read() -> set[str]:
    """The ``FLASHHUB_*`` variables that the source names as string literals."""
    sources = (path.read_text() for path in (ROOT / "src").rglob("*.py"))
    return {name for text in sources for name in re.findall(r"\"(FLASHHUB_[A-Z_]+)\"", text)}


def test_the_settings_table_lists_every_variable_the_code_reads() -> None:
    documented = {name for name in documented_variables() if name.startswith("FLASHHUB_")}
    assert documented == variables_read()


@pytest.mark.parametrize("name", sorted(documented_variables() - variables_read()))
def test_each_other_variable_of_the_settings_table_is_read(name: str) -> None:
    sources = " ".join(path.read_text() for path in (ROOT / "src").rglob("*.py"))
    assert f'"{name}"' in sources


# The setting each documented default is the default of.
SETTING = {
    "FLASHHUB_CDN_URL": "cdn_url",
    "FLASHHUB_CDN_PREFIX": "prefix",
    "FLASHHUB_CONNECT_TIMEOUT": "connect_timeout",
    "FLASHHUB_READ_TIMEOUT": "read_timeout",
    "FLASHHUB_MAX_FILE_BYTES": "max_file_bytes",
}


def documented_defaults() -> dict[str, str]:
    """The variables whose default the table states as values, one per variable."""
    defaults = {}
    for names, cell in settings_rows():
        values = [v for v in re.findall(r"`([^`]+)`", cell) if not v.startswith(("$", "~"))]
        if len(values) == len(names):
            defaults.update(zip(names, values, strict=True))
    return defaults


def test_the_settings_table_states_the_defaults_it_is_checked_for() -> None:
    assert documented_defaults().keys() == SETTING.keys()


@pytest.mark.parametrize(("name", "default"), sorted(documented_defaults().items()))
def test_each_documented_default_is_the_code_s(
    monkeypatch: pytest.MonkeyPatch, name: str, default: str
) -> None:
    monkeypatch.delenv(name, raising=False)
    value = getattr(get_config(), SETTING[name])
    assert default == (f"{value:g}" if isinstance(value, float) else str(value))
