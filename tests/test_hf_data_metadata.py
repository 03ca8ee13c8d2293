"""Hugging Face kernels' own ``tests/test_data_metadata.py`` and ``tests/test_data_version.py``
(the ``kernels-data`` types: ``Metadata``, ``KernelName``, ``Backend``, ``Version``),
ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0; the newest stored versions of the
test files; 0.19.1 ships these types in ``kernels._rust``). Test names follow the
original; what differs:

- ``Metadata.read_from_file`` / ``Metadata.from_bytes`` are this client's public
  ``flashhub_kernels.Metadata``. Its lists are tuples, versions and the backend type are
  the strings the document holds (README, ``Metadata``; docs/layers.md: "a field the
  document lacks is ``None``, the lists are tuples, and versions, the backend type and
  ``build_layout`` are strings"), so ``== []`` becomes ``== ()``, ``Backend.CUDA`` becomes
  ``"cuda"``, ``Version.from_str("0.17.0")`` becomes ``"0.17.0"``.
- ``Version`` has no public counterpart; its ordering (numeric, trailing zeros equal) is
  what a ``kernels-minver`` check compares, so those cases are loads of a kernel asking
  for a ``kernels-minver`` around 0.19.1, the API level this client implements.

Left out: ``KernelName`` validation, ``Backend`` repr/casing, ``KernelVersion``,
``KernelDependency`` (types with no public counterpart here; ``name`` is a ``str``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import flashhub_kernels as fk
from flashhub_kernels import Metadata
from support.cdn_server import CdnServer
from support.hf_kernels import package, this_machine, write_hf_kernel

# The fields HF's tests give most of their metadata.json files.
BASIC: dict[str, object] = {
    "id": "_my_kernel_8a3be8f",
    "version": 1,
    "name": "my-kernel",
    "license": "Apache-2.0",
}


def _write_metadata(path: Path, **fields: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields))
    return path


def test_kernel_name_valid(tmp_path: Path) -> None:
    path = _write_metadata(
        tmp_path / "metadata.json",
        **BASIC,
        **{"python-depends": []},
        backend={"type": "cpu"},
    )
    n = Metadata.read_from_file(path).name
    assert str(n) == "my-kernel"
    assert n.python_name == "my_kernel"


def test_metadata_load_full(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text(
        json.dumps(
            {
                "id": "_my_kernel_8a3be8f",
                "version": 1,
                "name": "my-kernel",
                "license": "Apache-2.0",
                "kernels-minver": "0.17.0",
                "upstream": "https://github.com/example/kernel",
                "source": "https://github.com/example/kernel-builder",
                "python-depends": ["torch"],
                "backend": {"type": "cuda", "archs": ["9.0", "10.0"]},
            }
        )
    )
    m = Metadata.read_from_file(path)
    assert m.id == "_my_kernel_8a3be8f"
    assert m.name == "my-kernel"
    assert m.version == 1
    assert m.kernels_minver == "0.17.0"
    assert m.license == "Apache-2.0"
    assert m.upstream == "https://github.com/example/kernel"
    assert m.source == "https://github.com/example/kernel-builder"
    assert list(m.python_depends) == ["torch"]
    assert m.backend.backend_type == "cuda"
    assert list(m.backend.archs) == ["9.0", "10.0"]


def test_metadata_load_minimal(tmp_path: Path) -> None:
    path = _write_metadata(
        tmp_path / "metadata.json",
        **BASIC,
        **{"python-depends": []},
        backend={"type": "cpu"},
    )
    m = Metadata.read_from_file(path)
    assert m.version == 1
    assert m.kernels_minver is None
    assert m.license == "Apache-2.0"
    assert m.upstream is None
    assert m.source is None
    assert list(m.python_depends) == []
    assert m.backend.backend_type == "cpu"


def test_metadata_load_cann(tmp_path: Path) -> None:
    path = _write_metadata(
        tmp_path / "metadata.json",
        **BASIC,
        **{"python-depends": []},
        backend={"type": "cann"},
    )
    assert Metadata.read_from_file(path).backend.backend_type == "cann"


def test_metadata_load_unknown_field_accepted(tmp_path: Path) -> None:
    path = _write_metadata(
        tmp_path / "metadata.json",
        **BASIC,
        **{"python-depends": []},
        backend={"type": "cpu"},
        surprise="not allowed",
    )
    Metadata.read_from_file(path)


def test_metadata_load_malformed(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text("{not json")
    with pytest.raises(ValueError):
        Metadata.read_from_file(path)


def test_metadata_load(tmp_path: Path) -> None:
    path = _write_metadata(
        tmp_path / "variant" / "metadata.json",
        **BASIC,
        **{"python-depends": ["torch"]},
        backend={"type": "cuda"},
    )
    assert Metadata.read_from_file(path).backend.backend_type == "cuda"


def test_metadata_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        Metadata.read_from_file(tmp_path / "does-not-exist.json")


def test_metadata_from_bytes_as_hf_calls_it() -> None:
    """HF's tests build metadata with ``Metadata.from_bytes(json.dumps(...).encode())``."""
    document = {
        "name": "relu",
        "id": "_relu",
        "version": 1,
        "license": "mit",
        "python-depends": [],
        "backend": {"type": "cuda", "archs": None},
    }
    m = Metadata.from_bytes(json.dumps(document).encode("utf-8"))
    assert m.name == "relu"
    assert m.backend.backend_type == "cuda"
    assert not m.backend.archs


# -- test_data_version.py: as a kernels-minver check compares versions ----------------------


def _publish_minver(root: Path, repo: str, minver: str) -> None:
    write_hf_kernel(
        root,
        repo,
        1,
        this_machine(),
        package(repo.split("/")[1].replace("-", "_"), {"__init__.py": "VALUE = 1\n"}),
        {"kernels-minver": minver},
    )


@pytest.mark.parametrize("minver", ["0.19.1", "0.19.1.0", "0.19.1.0.0", "0.19", "0.9.9", "0.19.0"])
def test_version_trailing_zeros_compare_equal(cdn: CdnServer, minver: str) -> None:
    _publish_minver(cdn.root, "acme/minver-ok", minver)
    assert fk.get_kernel("acme/minver-ok", version=1).VALUE == 1


@pytest.mark.parametrize("minver", ["0.19.1.1", "0.19.2", "0.20", "0.100.0", "1"])
def test_version_ordering_and_hash(cdn: CdnServer, minver: str) -> None:
    """Numeric, not lexicographic: ``0.100.0`` > ``0.19.1`` (a string compare says less)."""
    _publish_minver(cdn.root, "acme/minver-new", minver)
    with pytest.raises(RuntimeError, match=r"requires kernels>="):
        fk.get_kernel("acme/minver-new", version=1)


@pytest.mark.parametrize("minver", ["abc", ""])
def test_version_invalid(cdn: CdnServer, minver: str) -> None:
    """HF's ``Version.from_str`` raises ValueError; a kernel whose kernels-minver is no
    version is refused (docs/kernel-requirements.md: a field present must have its type,
    else ``ManifestError``)."""
    _publish_minver(cdn.root, "acme/minver-bad", minver)
    with pytest.raises(ImportError) as caught:
        fk.get_kernel("acme/minver-bad", version=1)
    assert "kernels-minver" in str(caught.value)
