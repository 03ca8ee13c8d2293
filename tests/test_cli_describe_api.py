"""``flashhub describe-api``: a kernel's public functions and layers, read from its source
(the verified cache entry, downloaded first when missing, or a local directory) and
never run: each kernel here writes a marker file and raises if any of its code runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import assert_terminal_safe
from support.cdn_server import CdnServer
from support.cli_runner import OFFLINE, flashhub, flashhub_process, ok_json
from support.trees import b64sha256, write_variant

REPO = "acme/sly"
UNIVERSAL = "torch-universal"
TRIPWIRE = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\nraise RuntimeError('ran')\n"


def sly_files(marker: Path) -> dict[str, str]:
    """A kernel package whose every module trips the wire: writes ``marker`` and raises."""
    wire = TRIPWIRE.format(marker=str(marker))
    return {
        "__init__.py": wire
        + '''"""A kernel that must never run here."""
import torch
from torch.nn.functional import gelu

from ._ops import add_one, scale as scaled
from . import helpers, layers

__all__ = ["add_one", "scaled", "fused", "gelu", "VERSION", "helpers", "layers", "missing"]
VERSION = "1"


def fused(x: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """Fuse the ops.

    Details that are not shown."""
    return x


def not_exported(x):
    return x
''',
        "_ops.py": wire
        + '''
def add_one(x, /, y=1, *args, **kwargs):
    """Add one."""
    return x + 1


async def scale(x, factor: int = 2):
    return x * factor
''',
        "helpers.py": wire + "def shout():\n    return 'hi'\n",
        "_base.py": wire
        + '''from torch import nn


class Base(nn.Module):
    can_torch_compile = True

    def forward(self, x, mask=None):
        """Apply with a mask."""
        return x
''',
        "layers.py": wire
        + '''import torch
from torch import nn
import somelib

from ._base import Base

FLAG = bool(1)


class SiluAndMul(nn.Module):
    """Silu, then multiply."""

    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Inherits(Base):
    pass


class Annotated(Base):
    has_backward: bool  # annotated, not set: Base's (unset: the default)


class Plain(torch.nn.Module):
    def forward(self, x):
        return x


class External(somelib.Layer):
    def forward(self, x):
        return x


class Computed(nn.Module):
    has_backward = FLAG

    def forward(self, x):
        return x


class _Hidden(nn.Module):
    def forward(self, x):
        return x


class NotALayer:
    pass
''',
    }


def publish_sly(cdn_root: Path, marker: Path, files: dict[str, str] | None = None) -> None:
    """``acme/sly`` v1 and v2 (the same source), ``torch-universal`` only, as the
    builder flattens a variant (the package is the variant directory)."""
    for version in (1, 2):
        write_variant(
            cdn_root,
            REPO,
            version,
            UNIVERSAL,
            {path: text.encode() for path, text in (files or sly_files(marker)).items()},
        )
        version_dir = cdn_root / "kernels" / REPO / f"v{version}"
        (version_dir / "variants.json").write_text(json.dumps([UNIVERSAL]))
    (cdn_root / "kernels" / REPO / "versions.json").write_text("[1, 2]")


EXPECTED_FUNCTIONS = [
    {"name": "add_one", "signature": "(x, /, y=1, *args, **kwargs)", "doc": "Add one."},
    {
        "name": "fused",
        "signature": "(x: torch.Tensor, *, eps: float=1e-06) -> torch.Tensor",
        "doc": "Fuse the ops.",
    },
    {"name": "scaled", "signature": "(x, factor: int=2)", "doc": None},
]


def layer(name: str, signature: str, doc: str | None, backward: object, compile_: object) -> dict:
    attributes = {"has_backward": backward, "can_torch_compile": compile_}
    return {"name": name, "signature": signature, "doc": doc, "attributes": attributes}


EXPECTED_LAYERS = [
    # Imported into layers from another module of the kernel: kernelize finds it there.
    layer("Annotated", "(self, x, mask=None)", "Apply with a mask.", True, True),
    layer("Base", "(self, x, mask=None)", "Apply with a mask.", True, True),
    layer("Computed", "(self, x)", None, None, False),  # has_backward = FLAG: unknown
    layer("External", "(self, x)", None, None, None),  # a base outside the kernel
    layer("Inherits", "(self, x, mask=None)", "Apply with a mask.", True, True),
    layer("Plain", "(self, x)", None, True, False),  # nn.Module's defaults
    layer(
        "SiluAndMul",
        "(self, x: torch.Tensor) -> torch.Tensor",
        "Silu, then multiply.",
        False,
        True,
    ),
]


def kernel_modules() -> list[str]:
    return [name for name in sys.modules if name.startswith(("flashhub.acme", "flashhub_local"))]


def test_describe_api_reads_the_source_and_runs_none_of_it(
    cdn: CdnServer, tmp_path: Path, cache_dir: Path
) -> None:
    marker = tmp_path / "ran"
    publish_sly(cdn.root, marker)

    document = ok_json(flashhub("describe-api", REPO, "--version", "1", "--json"))

    assert not marker.exists()
    assert kernel_modules() == []
    assert (document["repo_id"], document["version"], document["variant"]) == (REPO, 1, UNIVERSAL)
    assert document["revision"] == "v1"  # as Hugging Face's command names it
    assert document["functions"] == EXPECTED_FUNCTIONS
    assert document["layers"] == EXPECTED_LAYERS
    # It read the verified cache entry the cold path wrote: offline, the same answer.
    assert (cache_dir / "kernels" / REPO / "v1" / UNIVERSAL / ".flashhub-receipt.json").is_file()
    cdn.clear_log()
    offline = ok_json(flashhub("describe-api", REPO, "--version", "1", "--json", env=OFFLINE))
    assert offline == document
    assert cdn.gets() == []
    assert not marker.exists()


def test_describe_api_as_a_process_prints_what_hugging_face_kernels_prints(
    cdn: CdnServer, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    publish_sly(cdn.root, marker)

    result = flashhub_process("describe-api", REPO)  # the newest version: v2

    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert result.stdout.splitlines() == [
        f"Repository: {REPO}",
        "Version: 2",
        f"Variant: {UNIVERSAL}",
        "",
        "Functions:",
        "  add_one(x, /, y=1, *args, **kwargs)",
        "      Add one.",
        "  fused(x: torch.Tensor, *, eps: float=1e-06) -> torch.Tensor",
        "      Fuse the ops.",
        "  scaled(x, factor: int=2)",
        "",
        "Layers:",
        "  Annotated  has_backward=True  can_torch_compile=True",
        "      forward(self, x, mask=None)",
        "      Apply with a mask.",
        "  Base  has_backward=True  can_torch_compile=True",
        "      forward(self, x, mask=None)",
        "      Apply with a mask.",
        "  Computed  has_backward=unknown  can_torch_compile=False",
        "      forward(self, x)",
        "  External  has_backward=unknown  can_torch_compile=unknown",
        "      forward(self, x)",
        "  Inherits  has_backward=True  can_torch_compile=True",
        "      forward(self, x, mask=None)",
        "      Apply with a mask.",
        "  Plain  has_backward=True  can_torch_compile=False",
        "      forward(self, x)",
        "  SiluAndMul  has_backward=False  can_torch_compile=True",
        "      forward(self, x: torch.Tensor) -> torch.Tensor",
        "      Silu, then multiply.",
    ]


def write_local_kernel(root: Path, marker: Path) -> Path:
    """A kernel repo with ``build/<variant>/local_kern/``: no ``__all__``, so its public
    names are those without ``_``, a star import's among them; no ``layers``."""
    wire = TRIPWIRE.format(marker=str(marker))
    package = root / "build" / UNIVERSAL / "local_kern"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        wire + "from .impl import *\nfrom .impl import _kept as kept\nfrom . import loop\n"
        "def _private():\n    pass\n"
        "if True:\n    def in_a_block(a):\n        pass\n"
        "else:\n    def in_a_block(a, b):\n        pass\n"
    )
    (package / "impl.py").write_text(
        wire + "__all__ = ['listed']\n__all__ += ['also']\n"
        "def listed(a, b=2):\n    '''\n    Listed.\n    '''\n"
        "def also():\n    pass\n"
        "def unlisted():\n    pass\n"
        "def _kept(z):\n    pass\n"
    )
    # Modules importing each other in a circle: no name is bound at the end of it.
    (package / "loop.py").write_text(wire + "from .loop2 import ping\n")
    (package / "loop2.py").write_text(wire + "from .loop import ping\n")
    return root


def test_describe_api_of_a_local_directory(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    repo = write_local_kernel(tmp_path / "repo", marker)

    document = ok_json(flashhub("describe-api", repo, "--json"))
    text = flashhub_process("describe-api", repo / "build" / UNIVERSAL / "local_kern")

    assert not marker.exists()
    assert (document["path"], document["variant"]) == (str(repo), UNIVERSAL)
    assert "repo_id" not in document
    assert [(f["name"], f["signature"], f["doc"]) for f in document["functions"]] == [
        ("also", "()", None),
        ("in_a_block", "(a, b)", None),  # the last definition the source gives
        ("kept", "(z)", None),
        ("listed", "(a, b=2)", "Listed."),
    ]
    assert document["layers"] == []
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[:2] == [
        f"Path: {repo / 'build' / UNIVERSAL / 'local_kern'}",
        "Variant: -",
    ]
    assert text.stdout.endswith("Layers:\n  (none)\n")
    assert not marker.exists()


def test_a_kernel_whose_source_does_not_parse_is_an_error(cdn: CdnServer, tmp_path: Path) -> None:
    files = sly_files(tmp_path / "ran")
    files["_ops.py"] = "def add_one(x):\n    return x +\n"
    publish_sly(cdn.root, tmp_path / "ran", files)

    result = flashhub("describe-api", REPO, "--version", "1")

    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert f"{UNIVERSAL}/_ops.py:2: the kernel's source does not parse (invalid syntax)" in (
        result.stderr
    )
    assert "  hint: the kernel cannot be imported either" in result.stderr


def test_docstrings_cannot_drive_the_terminal(cdn: CdnServer, tmp_path: Path) -> None:
    files = {"__init__.py": 'def f():\n    "\\x1b]0;title\\x07 \\x1b[31mred"\n'}
    publish_sly(cdn.root, tmp_path / "ran", files)

    result = flashhub("describe-api", REPO, "--version", "1")

    assert result.returncode == 0, result.stderr
    assert_terminal_safe(result.stdout)
    assert "      \\x1b]0;title\\x07 \\x1b[31mred" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["./no-such-dir"], "'./no-such-dir' is not a kernel directory"),
        (["a/b/c"], "invalid repo id"),
        (["acme/sly", "--version", "0"], "version"),
        (["a" * 300], "is not a kernel directory: File name too long"),
    ],
)
def test_describe_api_usage_errors(args: list[str], message: str) -> None:
    result = flashhub("describe-api", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_version_with_a_local_directory_is_a_usage_error(tmp_path: Path) -> None:
    repo = write_local_kernel(tmp_path / "repo", tmp_path / "ran")
    result = flashhub("describe-api", repo, "--version", "1")
    assert result.returncode == 2
    assert "--version names a version on the CDN, not of the directory" in result.stderr


def test_a_variant_whose_file_fails_its_digest_is_not_described(
    cdn: CdnServer, tmp_path: Path
) -> None:
    # The entry is verified before it is read: a variant whose file fails its digest is
    # refused, and nothing of it is described.
    marker = tmp_path / "ran"
    publish_sly(cdn.root, marker)
    variant_dir = cdn.root / "kernels" / REPO / "v1" / "build" / UNIVERSAL
    (variant_dir / "_ops.py").write_text("def add_one(x):\n    return 'tampered'\n")
    manifest = json.loads((variant_dir / "metadata.json").read_text())
    assert manifest["digest"]["files"]["_ops.py"] != b64sha256(
        (variant_dir / "_ops.py").read_bytes()
    )

    result = flashhub("describe-api", REPO, "--version", "1", "--json")

    assert result.returncode == 1
    assert "_ops.py" in result.stderr and result.stdout == ""


def test_describe_api_reads_a_zip_build_on_the_cdn_and_in_a_directory(
    cdn: CdnServer, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    repo = write_local_kernel(tmp_path / "repo", marker)
    published = flashhub(
        "publish", repo, "--repo-id", "acme/local-kern", "--version", "1", "--out", cdn.root,
        "--layout", "zip",
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    from_files = ok_json(flashhub("describe-api", repo, "--json"))
    from_cdn = ok_json(flashhub("describe-api", "acme/local-kern", "--version", "1", "--json"))
    version_dir = cdn.root / "kernels" / "acme" / "local-kern" / "v1"
    from_directory = ok_json(flashhub("describe-api", version_dir, "--json"))
    for document in (from_cdn, from_directory):
        assert document["functions"] == from_files["functions"]
        assert document["variant"] == UNIVERSAL
    assert not marker.exists()
