"""The variant a system takes, recorded in the cache's index by the load that chose it
(``picks``): a warm load of the same system then judges no variant name. A pick is
recorded only where the device takes no part in it, and is dropped when the variants the
index knows change."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_python
from flashhub_kernels._cache.layout import Cache, VariantIndex
from flashhub_kernels._cache.staging import merge_indexes, record_index
from flashhub_kernels._models.names import RepoInfo
from flashhub_kernels._variants.compat import BuildTarget, pick_by_name, pick_cached_variant
from flashhub_kernels._variants.system import SystemInfo
from support.cdn_server import CdnServer
from support.trees import local_variant, write_kernel

REPO = "acme/tensor-tricks"
CPU = SystemInfo((2, 13), True, "cpu", "cpu", "x86_64", "linux")
H100 = SystemInfo((2, 13), True, "cuda", "cu126", "x86_64", "linux", probe_device=True)
CPU_BUILD = "torch213-cxx11-cpu-x86_64-linux"
CUDA_BUILD = "torch213-cxx11-cu126-x86_64-linux"
UNIVERSAL = "torch-universal"

LOAD = """
import json, sys
import flashhub.acme.tensor_tricks.v1 as k
from flashhub_kernels import get_loaded_kernels
judged = [m for m in ("flashhub_kernels._variants.compat",) if m in sys.modules]
print(json.dumps([get_loaded_kernels()[0].variant, judged]))
"""


def _index_file(cache_dir: Path) -> Path:
    return cache_dir / "kernels/acme/tensor-tricks/v1/variants-index.json"


def test_a_cold_load_records_the_pick_and_a_warm_load_judges_nothing(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1, [local_variant(), UNIVERSAL])
    cold_variant, _ = json.loads(run_python(LOAD))
    picks = json.loads(_index_file(cache_dir).read_text())["picks"]
    assert list(picks.values()) == [cold_variant]

    warm_variant, judged = json.loads(run_python(LOAD))
    assert warm_variant == cold_variant
    assert judged == []


def test_a_pick_naming_no_recorded_variant_is_passed_over(cdn: CdnServer, cache_dir: Path) -> None:
    """A hand-edited or damaged index: the warm load judges the variants it records."""
    write_kernel(cdn.root, REPO, 1, [local_variant()])
    run_python(LOAD)
    index = _index_file(cache_dir)
    document = json.loads(index.read_text())
    document["picks"] = {key: "torch-nowhere" for key in document["picks"]}
    index.write_text(json.dumps(document))
    gets = len(cdn.gets())

    variant, judged = json.loads(run_python(LOAD))
    assert variant == local_variant()
    assert "flashhub_kernels._variants.compat" in judged
    assert len(cdn.gets()) == gets  # still warm: nothing fetched


def test_a_pick_by_name_is_what_the_judge_picks() -> None:
    index = VariantIndex(True, frozenset({CPU_BUILD, UNIVERSAL, CUDA_BUILD}))
    assert pick_by_name(index, CPU) == pick_cached_variant(index, CPU) == CPU_BUILD


def test_no_pick_is_recorded_where_the_device_decides() -> None:
    listed = BuildTarget("cuda", ("9.0",))
    index = VariantIndex(True, frozenset({CUDA_BUILD, UNIVERSAL}), targets={CUDA_BUILD: listed})
    assert pick_by_name(index, H100) is None
    no_archs = index._replace(targets={CUDA_BUILD: BuildTarget("cuda", ())})
    assert pick_by_name(no_archs, H100) == CUDA_BUILD  # its metadata lists no archs
    not_read = index._replace(targets={})
    assert pick_by_name(not_read, H100) is None


def test_picks_go_when_the_variants_known_change() -> None:
    probed = VariantIndex(False, frozenset({UNIVERSAL}), frozenset({CPU_BUILD}))
    with_pick = probed._replace(picks={CPU.key: UNIVERSAL})
    assert merge_indexes(with_pick, probed).picks == {CPU.key: UNIVERSAL}
    more = VariantIndex(False, frozenset({CUDA_BUILD}))
    assert merge_indexes(with_pick, more).picks == {}


def test_each_system_records_its_own_pick(tmp_path: Path) -> None:
    cache, info = Cache(tmp_path / "cache"), RepoInfo(REPO, 1)
    index = VariantIndex(True, frozenset({CPU_BUILD, UNIVERSAL}))
    record_index(cache, info, index, CPU)
    other = CPU._replace(torch=(2, 14))  # no build of its own: the universal one
    recorded = record_index(cache, info, index, other)
    assert recorded.picks == {CPU.key: CPU_BUILD, other.key: UNIVERSAL}
    assert cache.read_index(info) == recorded
