"""The kernels a kernel depends on, and theirs, for ``flashhub info --dep-tree``.

Each kernel of the tree is judged as a load judges it: the variant this system (or the
CPU, with ``backend="cpu"``) would load, whose ``metadata.json`` names the kernels it
depends on (``kernel-depends``), each at a version. Only those ``metadata.json`` are
read; nothing is downloaded or imported. Offline, the cache answers: the variant list it
recorded, and the chosen variant's cached entry.
"""

from __future__ import annotations

from .._cache.layout import Cache
from .._config import get_config
from .._models.kernel_metadata import check_dependency, dependency_label, read_kernel_metadata
from .._models.manifest import manifest_source
from .._models.names import RepoInfo
from .._models.record import Record
from .._variants.verdicts import best_variant
from ..errors import NoCompatibleVariantError
from .api import get_kernel_variants

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


class DependencyNode(Record):
    """A kernel of the tree: the variant this system loads (``None``: none fits, so what
    it depends on is unknown) and the kernels that variant depends on, by repo id."""

    info: RepoInfo
    variant: str | None
    depends: tuple[DependencyNode, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "repo_id": self.info.repo_id,
            "version": self.info.version,
            "variant": self.variant,
            "depends": [node.to_dict() for node in self.depends],
        }


def dependency_tree(info: RepoInfo, *, backend: str | None = None) -> DependencyNode:
    """``info`` and the kernels it depends on, directly or not.

    A kernel that several others depend on is read once and appears under each.

    Raises:
        KernelDependencyError: the dependencies form a cycle, or go more than 64 levels
            deep (the message spells the chain out).
        OfflineError: offline, and the cache lacks the variant list of a kernel of the
            tree or the chosen variant's entry.
    """
    return _node(info, backend, (), {})


def _node(
    info: RepoInfo,
    backend: str | None,
    chain: tuple[str, ...],
    known: dict[RepoInfo, DependencyNode],
) -> DependencyNode:
    if info in known:
        return known[info]
    chain = (*chain, dependency_label(info))
    try:
        variant = best_variant(get_kernel_variants(info.repo_id, info.version, backend=backend))
    except NoCompatibleVariantError:  # a version without variants.json, with no build for this
        variant = None
    depends: tuple[DependencyNode, ...] = ()
    if variant is not None:
        source = manifest_source(info, variant)
        metadata = read_kernel_metadata(_manifest(info, variant), source=source)
        for dep in metadata.kernel_depends:
            check_dependency(chain, str(dep))
        depends = tuple(_node(dep.info, backend, chain, known) for dep in metadata.kernel_depends)
    known[info] = DependencyNode(info, variant, depends)
    return known[info]


def _manifest(info: RepoInfo, variant: str) -> Mapping[str, Any]:
    """The ``metadata.json`` document of one variant: the CDN's, or offline the cached
    entry's."""
    config = get_config()
    if config.offline:
        from .offline import cached_variants

        return cached_variants(Cache.from_config(config), info, [variant])[
            variant
        ].manifest.document
    from .._network.documents import get_listed_manifest
    from .._network.transport import remote

    with remote(config) as fetcher:
        return get_listed_manifest(fetcher, info, variant).manifest.document
