"""Kernel layers and functions: mapping, scoping, validation, selection and kernelize, on the CPU.

Layer kernels are published to the loopback CDN (``cdn``) or written as local kernel
directories. Every kernel layer and function appends its kernel's tag to the
module-level ``CALLS`` list of its ``layers`` module, so a test can tell which kernel
ran, if any.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import json
import logging
import os
import pickle
import re
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import FrozenInstanceError, asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import flashhub_kernels
from conftest import run_python
from flashhub_kernels.errors import (
    KernelLayerError,
    KernelNotFoundError,
    KernelWithoutBackwardWarning,
    LayerValidationError,
    LocalKernelNotFoundError,
)
from flashhub_kernels.layers import (
    BaseLayerRepository,
    CUDAProperties,
    Device,
    FuncRepository,
    KernelizeFallback,
    LayerRepository,
    LocalFuncRepository,
    LocalLayerRepository,
    LockedFuncRepository,
    LockedLayerRepository,
    Mode,
    ROCMProperties,
    _dispatch,
    _mapping,
    kernelize,
    register_kernel_mapping,
    replace_kernel_forward_from_hub,
    use_kernel_forward_from_hub,
    use_kernel_func_from_hub,
    use_kernel_mapping,
    use_kernelized_func,
    validate_layer,
)
from flashhub_kernels.layers._mapping import mode_text
from support.cdn_server import CdnHandler, CdnServer
from support.preloaded import REAP_FORKED_CHILD, run_code
from support.trees import write_variant

LAYERS_PY = '''"""Layers of test kernel {tag}."""
import torch
import torch.nn.functional as F
from torch import nn

TAG = {tag!r}
CALLS = []


class SiluAndMul(nn.Module):
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append(TAG)
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class NoBackward(nn.Module):
    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append(TAG)
        return x[..., : x.shape[-1] // 2]


class NoCompile(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append(TAG)
        return x[..., : x.shape[-1] // 2]


class WithExtraRepr(nn.Module):
    def extra_repr(self) -> str:
        return "the kernel layer's"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append(TAG)
        return x[..., : x.shape[-1] // 2]


def _first_half(self, x: torch.Tensor) -> torch.Tensor:
    CALLS.append(TAG)
    return x[..., : x.shape[-1] // 2]


class Aliased(nn.Module):
    """Its forward a function of another name, as a kernel may share one between layers."""

    forward = _first_half


class Half(nn.Module):
    """No side effect, which torch.compile would guard: compiled code runs it as traced."""

    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., : x.shape[-1] // 2]


class Scale(nn.Module):
    weight: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append(TAG)
        return x * self.weight


class WithInit(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
'''


INIT_PY = """from . import layers


def silu_and_mul(x):
    layers.CALLS.append(layers.TAG + ":func")
    d = x.shape[-1] // 2
    return layers.F.silu(x[..., :d]) * x[..., d:]


def double(x):
    layers.CALLS.append(layers.TAG + ":func")
    return x * 2


double.has_backward = False
double.can_torch_compile = True
"""


def layer_files(py_pkg: str, tag: str) -> dict[str, bytes]:
    return {
        f"{py_pkg}/__init__.py": INIT_PY.encode(),
        f"{py_pkg}/layers.py": LAYERS_PY.format(tag=tag).encode(),
    }


def publish_layers(cdn: CdnServer, repo_id: str, tag: str, version: int = 1) -> None:
    """Publish a torch-universal layer kernel to the loopback CDN."""
    py_pkg = repo_id.split("/")[1].replace("-", "_")
    write_variant(cdn.root, repo_id, version, "torch-universal", layer_files(py_pkg, tag))
    variants = cdn.root / "kernels" / repo_id / f"v{version}" / "variants.json"
    variants.write_text(json.dumps(["torch-universal"]))


def local_layers(tmp_path: Path, tag: str, layer_name: str = "SiluAndMul") -> LocalLayerRepository:
    """A local kernel package whose layers carry ``tag``."""
    for relpath, data in layer_files(f"layers_{tag}", tag).items():
        path = tmp_path / "local" / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return LocalLayerRepository(tmp_path / "local" / f"layers_{tag}", layer_name)


def calls(repo: BaseLayerRepository) -> list[str]:
    """Tags recorded by the kernel layers of ``repo``'s kernel."""
    return list(sys.modules[repo.load().__module__].CALLS)


def reference_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


class SiluAndMul(nn.Module):
    """The reference layer; counts how often its own forward runs."""

    def __init__(self) -> None:
        super().__init__()
        self.n_calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n_calls += 1
        return reference_silu_and_mul(x)


@use_kernel_forward_from_hub("SiluAndMul")
class HubSiluAndMul(SiluAndMul):
    pass


@use_kernel_forward_from_hub("SiluAndMul", use_fallback=False)
class StrictSiluAndMul(SiluAndMul):
    pass


class Scale(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.arange(1.0, size + 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the kernel layer should run instead")


pytestmark = pytest.mark.usefixtures("fresh_base_mapping")


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(0))


ArgT = TypeVar("ArgT")


def in_threads(run: Callable[[ArgT], None], args: Iterable[ArgT]) -> None:
    """``run(arg)`` for each of ``args``, each in a thread of its own; all ended on return."""
    threads = [threading.Thread(target=run, args=(arg,)) for arg in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def cpu_mapping(repo: BaseLayerRepository | dict[Mode, BaseLayerRepository]) -> dict:
    return {"SiluAndMul": {"cpu": repo}}


# -- dispatch by device --------------------------------------------------------------------


def test_mapped_device_runs_the_kernel_layer(cdn: CdnServer, x: torch.Tensor) -> None:
    publish_layers(cdn, "acme/silu-layers", "cdn")
    repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    layer = HubSiluAndMul()
    with use_kernel_mapping(cpu_mapping(repo)):
        out = layer(x)
    torch.testing.assert_close(out, reference_silu_and_mul(x))
    assert layer.n_calls == 0
    assert calls(repo) == ["cdn"]


def test_locked_layer_repository_in_a_mapping(
    cdn: CdnServer, x: torch.Tensor, tmp_path: Path
) -> None:
    from flashhub_kernels import LockedLayerRepository
    from flashhub_kernels._lockfiles.pinning import lock_project
    from support.projects import write_project

    publish_layers(cdn, "acme/silu-layers", "locked")
    (cdn.root / "kernels/acme/silu-layers/versions.json").write_text("[1]")
    project = write_project(tmp_path / "proj", {"acme/silu-layers": ">=1"})
    lock_project(project)
    repo = LockedLayerRepository(
        "acme/silu-layers", "SiluAndMul", lockfile=project / "flashhub.lock"
    )
    layer = HubSiluAndMul()
    with use_kernel_mapping(cpu_mapping(repo)):
        out = layer(x)
    torch.testing.assert_close(out, reference_silu_and_mul(x))
    assert layer.n_calls == 0 and calls(repo) == ["locked"]


def test_unmapped_device_runs_the_original_and_downloads_nothing(
    cdn: CdnServer, x: torch.Tensor
) -> None:
    publish_layers(cdn, "acme/silu-layers", "cdn")
    repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    layer = HubSiluAndMul()
    with use_kernel_mapping({"SiluAndMul": {"cuda": repo}}):
        torch.testing.assert_close(layer(x), reference_silu_and_mul(x))
    assert layer.n_calls == 1
    assert cdn.gets() == []


def test_unmarked_layer_and_input_without_tensors_run_the_original(tmp_path: Path) -> None:
    @use_kernel_forward_from_hub("SiluAndMul")
    class Echo(nn.Module):
        def forward(self, x: object) -> object:
            return ("original", x)

    repo = local_layers(tmp_path, "a")
    plain = SiluAndMul()
    with use_kernel_mapping(cpu_mapping(repo)):
        plain(torch.ones(2, 4))
        assert Echo()(1.5) == ("original", 1.5)  # no tensor, so no device to map
    assert plain.n_calls == 1
    assert calls(repo) == []


def test_kernel_layer_runs_with_the_module_as_self(tmp_path: Path) -> None:
    repo = local_layers(tmp_path, "a", layer_name="Scale")
    replace_kernel_forward_from_hub(Scale, "Scale")
    module = Scale(3)
    with use_kernel_mapping({"Scale": {"cpu": repo}}):
        out = module(torch.ones(2, 3))
    torch.testing.assert_close(out, torch.tensor([[1.0, 2.0, 3.0]] * 2))
    out.sum().backward()
    assert module.weight.grad is not None  # the module's own parameter was used
    assert calls(repo) == ["a"]


def test_layer_kernel_is_downloaded_once_for_many_layers(cdn: CdnServer, x: torch.Tensor) -> None:
    publish_layers(cdn, "acme/silu-layers", "cdn")
    repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    layers = [HubSiluAndMul() for _ in range(5)]
    register_kernel_mapping(cpu_mapping(repo))  # process-wide, so the threads see it
    barrier = threading.Barrier(len(layers))

    def run(layer: HubSiluAndMul) -> None:
        barrier.wait()  # all first calls at once: the load must still happen once
        layer(x)

    in_threads(run, layers)
    for layer in layers:
        layer(x)
    kernelize(nn.Sequential(nn.Linear(16, 16), HubSiluAndMul()))
    assert len(cdn.gets("layers.py")) == 1
    assert len(cdn.gets("metadata.json", missed_guesses=False)) == 1
    assert calls(repo) == ["cdn"] * 10
    assert all(layer.n_calls == 0 for layer in layers)


# A thread kernelizes a model (its layer kernel's layers.py held by the server) while the
# process forks; the child kernelizes a model of its own and prints the kernel's tag.
FORK_WHILE_KERNELIZING = (
    """
import os, sys, threading, time
from pathlib import Path

from torch import nn

from flashhub_kernels.layers import LayerRepository, Mode, kernelize, register_kernel_mapping
from flashhub_kernels.layers import use_kernel_forward_from_hub

@use_kernel_forward_from_hub("SiluAndMul")
class SiluAndMul(nn.Module):
    def forward(self, x):
        return x

def kernelized():
    return kernelize(nn.Sequential(SiluAndMul()), mode=Mode.INFERENCE, device="cpu")

held, forked = Path(sys.argv[1]), Path(sys.argv[2])
repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
register_kernel_mapping({"SiluAndMul": {"cpu": repo}})
loading = threading.Thread(target=kernelized)
loading.start()
while not held.exists():
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    kernelized()
    print("child:", sys.modules[repo.load().__module__].TAG, flush=True)
    os._exit(0)
forked.touch()
"""
    + REAP_FORKED_CHILD
    + "loading.join()\n"
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_thread_loads_a_layer_loads_it_too(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """The repository object the child inherits was being loaded by a thread that the
    child lacks: the child loads the layer itself instead of waiting for that thread."""
    publish_layers(cdn, "acme/silu-layers", "cdn")
    held, forked = tmp_path / "held", tmp_path / "forked"

    def hold_until_forked(handler: CdnHandler, body: bytes) -> None:
        held.touch()
        deadline = time.monotonic() + 30
        while not forked.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        handler.send_file(body)

    cdn.inject(
        "kernels/acme/silu-layers/v1/build/torch-universal/silu_layers/layers.py", hold_until_forked
    )
    child = run_code(FORK_WHILE_KERNELIZING, str(held), str(forked), env=os.environ)
    assert (child.returncode, child.stdout) == (0, "child: cdn\n"), child.stderr
    assert len(cdn.gets("layers.py")) == 1  # the child waited for the parent's download


# -- scoping -------------------------------------------------------------------------------


def test_contexts_stack_and_unwind(tmp_path: Path, x: torch.Tensor) -> None:
    outer, inner = local_layers(tmp_path, "outer"), local_layers(tmp_path, "inner")
    layer = HubSiluAndMul()
    with use_kernel_mapping(cpu_mapping(outer)):
        layer(x)
        with use_kernel_mapping(cpu_mapping(inner)):
            layer(x)
        layer(x)
        with use_kernel_mapping({"Other": {"cpu": inner}}, inherit_mapping=False):
            layer(x)  # the outer mapping is not inherited: nothing is mapped
    layer(x)
    assert calls(outer) == ["outer", "outer"]
    assert calls(inner) == ["inner"]
    assert layer.n_calls == 2


def test_one_mapping_scope_can_be_entered_again(tmp_path: Path, x: torch.Tensor) -> None:
    """As in Hugging Face kernels: the object use_kernel_mapping returns is kept and reused."""
    repo = local_layers(tmp_path, "a")
    scope = use_kernel_mapping(cpu_mapping(repo))
    model = nn.Sequential(HubSiluAndMul())
    for _ in range(2):
        with scope:
            kernelize(model, mode=Mode.INFERENCE, device="cpu")
        assert kernel_tag(model[0]) == "a"
        assert _mapping.current_mapping() == {}
    with scope, scope:  # nested too: each exit restores what its entry found
        with scope:
            assert "SiluAndMul" in _mapping.current_mapping()
        assert "SiluAndMul" in _mapping.current_mapping()
    assert _mapping.current_mapping() == {}

    @scope
    def run(layer: nn.Module) -> torch.Tensor:
        out: torch.Tensor = layer(x)
        return out

    layer = HubSiluAndMul()
    run(layer)
    run(layer)
    assert layer.n_calls == 0 and calls(repo) == ["a", "a"]


def test_context_unwinds_on_exception(tmp_path: Path, x: torch.Tensor) -> None:
    repo = local_layers(tmp_path, "a")
    with pytest.raises(RuntimeError, match="boom"), use_kernel_mapping(cpu_mapping(repo)):
        raise RuntimeError("boom")
    assert _mapping.current_mapping() == {}
    layer = HubSiluAndMul()
    layer(x)
    assert layer.n_calls == 1


def test_register_inside_a_context_lasts_until_its_end(tmp_path: Path, x: torch.Tensor) -> None:
    outer, inner = local_layers(tmp_path, "outer"), local_layers(tmp_path, "inner")
    layer = HubSiluAndMul()
    with use_kernel_mapping(cpu_mapping(outer)):
        register_kernel_mapping(cpu_mapping(inner))
        layer(x)
    layer(x)
    assert calls(inner) == ["inner"]
    assert layer.n_calls == 1


def test_register_outside_contexts_is_process_wide(tmp_path: Path, x: torch.Tensor) -> None:
    repo = local_layers(tmp_path, "a")
    register_kernel_mapping(cpu_mapping(repo))
    thread = threading.Thread(target=HubSiluAndMul(), args=(x,))
    thread.start()
    thread.join()
    assert calls(repo) == ["a"]


def test_contexts_are_isolated_across_threads(tmp_path: Path, x: torch.Tensor) -> None:
    repos = {"a": local_layers(tmp_path, "a"), "b": local_layers(tmp_path, "b")}
    both_inside = threading.Barrier(2)
    seen: dict[str, object] = {}

    def run(tag: str) -> None:
        with use_kernel_mapping(cpu_mapping(repos[tag])):
            both_inside.wait()
            HubSiluAndMul()(x)
            both_inside.wait()
            seen[tag] = _mapping.current_mapping()["SiluAndMul"][Device("cpu")]

    in_threads(run, repos)
    assert calls(repos["a"]) == ["a"]
    assert calls(repos["b"]) == ["b"]
    assert seen == {tag: {Mode.FALLBACK: repo} for tag, repo in repos.items()}
    assert _mapping.current_mapping() == {}


def test_contexts_are_isolated_across_asyncio_tasks(tmp_path: Path, x: torch.Tensor) -> None:
    repos = {"a": local_layers(tmp_path, "a"), "b": local_layers(tmp_path, "b")}

    async def run(tag: str) -> None:
        with use_kernel_mapping(cpu_mapping(repos[tag])):
            for _ in range(3):
                await asyncio.sleep(0)  # let the other task run inside its own context
                HubSiluAndMul()(x)

    async def main() -> None:
        await asyncio.gather(run("a"), run("b"))

    asyncio.run(main())
    assert calls(repos["a"]) == ["a"] * 3
    assert calls(repos["b"]) == ["b"] * 3


def test_inner_entry_replaces_only_its_device(tmp_path: Path) -> None:
    a, b = local_layers(tmp_path, "a"), local_layers(tmp_path, "b")
    with (
        use_kernel_mapping({"SiluAndMul": {"cpu": a, "cuda": a}}),
        use_kernel_mapping({"SiluAndMul": {"cpu": b}}),
    ):
        entries = _mapping.current_mapping()["SiluAndMul"]
        assert entries == {Device("cpu"): {Mode.FALLBACK: b}, Device("cuda"): {Mode.FALLBACK: a}}


# -- validation ----------------------------------------------------------------------------


class GoodLayer(nn.Module):
    weight: torch.Tensor  # annotations document what forward reads: allowed

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y


class OwnInit(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class ClassAttribute(nn.Module):
    eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class ExtraMethod(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.helper(x)

    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return x


class OverridesModuleMethod(nn.Module):
    def extra_repr(self) -> str:
        return "mine"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class MoreArguments(nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale


class KeywordOnly(nn.Module):
    def forward(self, *, x: torch.Tensor) -> torch.Tensor:
        return x


class NotAModule:
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.parametrize("check_cls", [SiluAndMul, HubSiluAndMul])
def test_validate_layer_accepts_a_pure_layer(check_cls: type[nn.Module]) -> None:
    validate_layer(GoodLayer, check_cls)


def test_validate_layer_accepts_evaluated_annotations_once_read() -> None:
    # No __future__ import: Python 3.14 keeps them in __annotate_func__, and once read in
    # __annotations_cache__ (nn.Module's stay unread); earlier Pythons in __annotations__.
    source = (
        "import torch\nfrom torch import nn\n\n"
        "class Layer(nn.Module):\n    weight: torch.Tensor\n\n"
        "    def forward(self, y):\n        return y\n"
    )
    namespace: dict[str, object] = {}
    exec(compile(source, "<layer>", "exec", dont_inherit=True), namespace)
    layer = namespace["Layer"]
    assert isinstance(layer, type)
    assert layer.__annotations__ == {"weight": torch.Tensor}
    validate_layer(layer, SiluAndMul)


@pytest.mark.parametrize(
    ("bad", "rule", "detail"),
    [
        (OwnInit, "no own __init__", "defines __init__"),
        (ClassAttribute, "no extra members", "defines eps besides forward"),
        (ExtraMethod, "no extra members", "defines helper besides forward"),
        (MoreArguments, "same forward arity", "takes 3 parameters"),
        (KeywordOnly, "same forward parameter kinds", "'x' is keyword-only"),
        (NotAModule, "subclass of torch.nn.Module", "not a torch.nn.Module subclass"),
        (len, "subclass of torch.nn.Module", "not a torch.nn.Module subclass"),
    ],
)
def test_validate_layer_rejects_each_bad_shape(bad: object, rule: str, detail: str) -> None:
    # HubSiluAndMul's forward is a (*args, **kwargs) wrapper; the original is the reference.
    with pytest.raises(TypeError, match=f"breaks the rule '{rule}': .*{detail}") as info:
        validate_layer(bad, HubSiluAndMul)
    assert isinstance(info.value, LayerValidationError)
    assert info.value.rule == rule
    assert (getattr(bad, "__qualname__", "") or "len") in str(info.value)


def test_a_layer_overriding_a_module_member_is_accepted_and_only_its_forward_runs(
    tmp_path: Path, x: torch.Tensor
) -> None:
    """As Hugging Face kernels accepts it: only ``forward`` is bound to the module."""
    validate_layer(OverridesModuleMethod, HubSiluAndMul)
    repo = local_layers(tmp_path, "r", layer_name="WithExtraRepr")
    model = nn.Sequential(HubSiluAndMul())
    with use_kernel_mapping(cpu_mapping(repo)):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    torch.testing.assert_close(model(x), x[..., : x.shape[-1] // 2])
    assert calls(repo) == ["r"]
    assert "the kernel layer's" not in repr(model)


def test_a_bad_kernel_layer_is_rejected_before_it_runs(tmp_path: Path, x: torch.Tensor) -> None:
    repo = local_layers(tmp_path, "a", layer_name="WithInit")
    layer = HubSiluAndMul()
    with use_kernel_mapping(cpu_mapping(repo)), pytest.raises(TypeError, match="no own __init__"):
        layer(x)


def test_missing_layer_names_what_the_kernel_has(tmp_path: Path, x: torch.Tensor) -> None:
    repo = local_layers(tmp_path, "a", layer_name="Missing")
    with (
        use_kernel_mapping(cpu_mapping(repo)),
        pytest.raises(KernelLayerError, match=r"no layer 'Missing'(.|\n)*SiluAndMul"),
    ):
        HubSiluAndMul()(x)


# -- kernelize, modes, fallback ------------------------------------------------------------


def make_models() -> tuple[nn.Sequential, nn.Sequential]:
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(8, 16), SiluAndMul(), nn.Linear(8, 4), SiluAndMul())
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul(), nn.Linear(8, 4), HubSiluAndMul())
    model.load_state_dict(reference.state_dict())
    return reference, model


def test_kernelize_swaps_marked_layers(cdn: CdnServer) -> None:
    publish_layers(cdn, "acme/silu-layers", "cdn")
    repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    reference, model = make_models()
    x = torch.randn(3, 8)
    with use_kernel_mapping(cpu_mapping(repo)):
        assert kernelize(model) is model
    # kernelize decided once: leaving the mapping's scope changes nothing
    torch.testing.assert_close(model(x), reference(x))
    kernel_forward = repo.load().forward
    assert model[1].forward.__func__ is kernel_forward
    assert model[3].forward.__self__ is model[3]
    assert [model[i].n_calls for i in (1, 3)] == [0, 0]
    assert calls(repo) == ["cdn", "cdn"]
    assert len(cdn.gets("layers.py")) == 1


def test_kernelize_without_a_mapping_keeps_the_original(tmp_path: Path) -> None:
    reference, model = make_models()
    kernelize(model)
    x = torch.randn(3, 8)
    torch.testing.assert_close(model(x), reference(x))
    assert model[1].n_calls == 1
    with use_kernel_mapping(cpu_mapping(local_layers(tmp_path, "a"))):
        model(x)  # fixed by kernelize: a mapping added later is not used
    assert model[1].n_calls == 2


@pytest.fixture
def mode_repos(tmp_path: Path) -> dict[str, LocalLayerRepository]:
    names = ["inference", "training", "compile", "fallback"]
    return {name: local_layers(tmp_path, name) for name in names}


def kernel_tag(module: nn.Module) -> str:
    """The tag of the kernel whose forward kernelize bound to ``module``."""
    return sys.modules[module.forward.__func__.__module__].TAG


def test_kernelize_picks_the_repository_for_the_mode(
    mode_repos: dict[str, LocalLayerRepository],
) -> None:
    mapping = cpu_mapping(
        {
            Mode.INFERENCE: mode_repos["inference"],
            Mode.TRAINING: mode_repos["training"],
            Mode.INFERENCE | Mode.TORCH_COMPILE: mode_repos["compile"],
        }
    )
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul())
    with use_kernel_mapping(mapping):
        assert kernel_tag(kernelize(model, mode=Mode.INFERENCE)[1]) == "inference"
        assert kernel_tag(kernelize(model, mode=Mode.TRAINING)[1]) == "training"
        compiled = kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        assert kernel_tag(compiled[1]) == "compile"
        kernelize(model, mode=Mode.TRAINING | Mode.TORCH_COMPILE)  # nothing covers it
        assert model[1].forward.__func__ is SiluAndMul.forward


def test_a_compile_capable_kernel_serves_plain_runs_and_fallback_the_rest(
    mode_repos: dict[str, LocalLayerRepository],
) -> None:
    mapping = cpu_mapping(
        {
            Mode.FALLBACK: mode_repos["fallback"],
            Mode.INFERENCE | Mode.TORCH_COMPILE: mode_repos["compile"],
        }
    )
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul())
    with use_kernel_mapping(mapping):
        assert kernel_tag(kernelize(model, mode=Mode.INFERENCE)[1]) == "compile"
        assert kernel_tag(kernelize(model, mode=Mode.TRAINING)[1]) == "fallback"


def test_a_bare_repository_serves_every_mode(mode_repos: dict[str, LocalLayerRepository]) -> None:
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul())
    with use_kernel_mapping(cpu_mapping(mode_repos["fallback"])):
        for mode in (Mode.INFERENCE, Mode.TRAINING | Mode.TORCH_COMPILE):
            assert kernel_tag(kernelize(model, mode=mode)[1]) == "fallback"


def test_marked_forward_follows_train_and_eval(
    mode_repos: dict[str, LocalLayerRepository], x: torch.Tensor
) -> None:
    layer = HubSiluAndMul()
    mapping = cpu_mapping(
        {Mode.INFERENCE: mode_repos["inference"], Mode.TRAINING: mode_repos["training"]}
    )
    with use_kernel_mapping(mapping):
        layer.train()(x)
        layer.eval()(x)
    assert calls(mode_repos["training"]) == ["training"]
    assert calls(mode_repos["inference"]) == ["inference"]


def test_each_call_runs_what_its_device_mode_and_mapping_pick_whatever_the_last_call_ran(
    mode_repos: dict[str, LocalLayerRepository], x: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A layer reuses its last choice only for a call like the last: calls that alternate
    # mode, device, the switch and the mapping each get their own.
    layer = HubSiluAndMul()
    inference, training = mode_repos["inference"], mode_repos["training"]
    meta = torch.empty(4, 16, device="meta")  # not mapped: the original forward
    with use_kernel_mapping(cpu_mapping({Mode.INFERENCE: inference, Mode.TRAINING: training})):
        for _ in range(2):
            layer.eval()(x)
            layer(x)
            layer.train()(x)
            monkeypatch.setenv("DISABLE_KERNEL_MAPPING", "1")
            layer(x)  # the original, though the last call was like this one
            monkeypatch.delenv("DISABLE_KERNEL_MAPPING")
            layer(x)
            layer(meta)
            with use_kernel_mapping(cpu_mapping(training)):
                layer.eval()(x)  # a bare repository serves every mode
    layer(x)  # no mapping left
    assert calls(inference) == ["inference"] * 4
    assert calls(training) == ["training"] * 6
    assert layer.n_calls == 5


def test_threads_in_their_own_mappings_run_their_own_kernel_call_after_call(
    tmp_path: Path, x: torch.Tensor
) -> None:
    repos = {"a": local_layers(tmp_path, "a"), "b": local_layers(tmp_path, "b")}
    layer = HubSiluAndMul()
    both_inside = threading.Barrier(2)

    def run(tag: str) -> None:
        with use_kernel_mapping(cpu_mapping(repos[tag])):
            both_inside.wait()
            for _ in range(300):
                layer(x)

    in_threads(run, repos)
    assert calls(repos["a"]) == ["a"] * 300
    assert calls(repos["b"]) == ["b"] * 300
    assert layer.n_calls == 0


def test_marked_forward_under_torch_compile_asks_for_a_compile_kernel(
    mode_repos: dict[str, LocalLayerRepository], x: torch.Tensor
) -> None:
    layer = HubSiluAndMul().eval()
    mapping = cpu_mapping(
        {
            Mode.INFERENCE: mode_repos["inference"],
            Mode.INFERENCE | Mode.TORCH_COMPILE: mode_repos["compile"],
        }
    )
    with use_kernel_mapping(mapping):
        out = torch.compile(layer, backend="eager")(x)
    torch.testing.assert_close(out, reference_silu_and_mul(x))
    assert calls(mode_repos["compile"]) == ["compile"]
    assert layer.n_calls == 0


@pytest.mark.parametrize(
    "mode",
    [
        Mode.FALLBACK,
        Mode(Mode.INFERENCE.value | Mode.TRAINING.value),  # `|` refuses to make it
        Mode.TORCH_COMPILE,
        "inference",
    ],
)
def test_kernelize_rejects_a_mode_a_model_cannot_run_in(mode: Mode) -> None:
    with pytest.raises((ValueError, TypeError), match="Mode"):
        kernelize(nn.Linear(2, 2), mode=mode)


@pytest.mark.parametrize("model", [None, "model", [nn.Linear(2, 2)]])
def test_kernelize_of_what_is_no_module_says_what_it_takes(model: object) -> None:
    with pytest.raises(TypeError, match=r"kernelize takes a torch\.nn\.Module, got"):
        kernelize(model, mode=Mode.INFERENCE)  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"get_kernelized_layers takes a torch\.nn\.Module"):
        flashhub_kernels.get_kernelized_layers(model)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (Mode(Mode.FALLBACK.value | Mode.INFERENCE.value), "cannot be combined"),
        (Mode(Mode.INFERENCE.value | Mode.TRAINING.value), "not both"),
        (Mode.TORCH_COMPILE, "must include Mode.INFERENCE or Mode.TRAINING"),
        ("inference", "must be a Mode"),
    ],
)
def test_mapping_rejects_bad_mode_keys(tmp_path: Path, key: object, message: str) -> None:
    repo = local_layers(tmp_path, "a")
    with pytest.raises((ValueError, TypeError), match=message):
        register_kernel_mapping(cpu_mapping({key: repo}))  # type: ignore[dict-item]
    assert _mapping.current_mapping() == {}


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"SiluAndMul": {"cpu": "acme/silu-layers"}}, "expected a LayerRepository"),
        ({"SiluAndMul": ["cpu"]}, "must be a dict of devices"),
        ({"SiluAndMul": {"gpu": None}}, "unknown device type 'gpu'"),
        ([("SiluAndMul", {})], "must be a dict of layer names"),
    ],
)
def test_mapping_rejects_malformed_input(mapping: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        register_kernel_mapping(mapping)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["1", "2", "01", "true"])  # Hugging Face reads an int
def test_disable_kernel_mapping_runs_the_original(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, x: torch.Tensor, value: str
) -> None:
    publish_layers(cdn, "acme/silu-layers", "cdn")
    repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    monkeypatch.setenv("DISABLE_KERNEL_MAPPING", value)
    layer = HubSiluAndMul()
    model = nn.Sequential(nn.Linear(16, 16), HubSiluAndMul())
    with use_kernel_mapping(cpu_mapping(repo)):
        torch.testing.assert_close(layer(x), reference_silu_and_mul(x))
        kernelize(model)
        model(x)
        monkeypatch.delenv("DISABLE_KERNEL_MAPPING")
        layer(x)  # read on every call: now the kernel runs
    assert layer.n_calls == 1
    assert model[1].n_calls == 1
    assert calls(repo) == ["cdn"]


def test_use_fallback_false_raises_for_an_unmapped_device(tmp_path: Path, x: torch.Tensor) -> None:
    repo = local_layers(tmp_path, "a")
    cuda_only = {"SiluAndMul": {"cuda": repo}}
    with use_kernel_mapping(cuda_only):
        with pytest.raises(KernelLayerError, match="'SiluAndMul' on device 'cpu'") as info:
            StrictSiluAndMul()(x)
        assert isinstance(info.value, ValueError)
        assert "use_fallback" in str(info.value)
        model = nn.Sequential(nn.Linear(16, 16), HubSiluAndMul())
        with pytest.raises(KernelLayerError, match="in mode INFERENCE"):
            kernelize(model, use_fallback=False)
        with pytest.raises(KernelLayerError):  # the layer's own use_fallback=False holds too
            kernelize(nn.Sequential(nn.Linear(16, 16), StrictSiluAndMul()))
    with use_kernel_mapping(cpu_mapping(repo)):
        torch.testing.assert_close(StrictSiluAndMul()(x), reference_silu_and_mul(x))


def test_each_fallback_case_is_allowed_or_refused_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # torch is asked then
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    repo = local_layers(tmp_path, "a", layer_name="NoCompile")
    cases = {
        KernelizeFallback.NO_LAYER: ({}, "the mapping has no entry for it", "cpu"),
        KernelizeFallback.NO_DEVICE: ({"cuda": repo}, "mapped for cuda only", "cpu"),
        KernelizeFallback.NO_COMPATIBLE_PROPERTIES: (
            {Device("cuda", CUDAProperties(80, 90)): repo},
            "capabilities 80-90, and this GPU's is 70",
            "cuda",
        ),
        KernelizeFallback.NO_COMPATIBLE_MODE: (
            {"cpu": {Mode.INFERENCE: repo}},
            "modes INFERENCE, none of which serves it",
            "cpu",
        ),
    }
    for case, (devices, detail, device) in cases.items():
        mapping = {"SiluAndMul": devices} if devices else {}
        model = nn.Sequential(HubSiluAndMul())
        with use_kernel_mapping(mapping):
            others = KernelizeFallback.ALL & ~case  # every case but this one
            with pytest.raises(KernelLayerError, match=rf"{re.escape(detail)}.*{case.name}"):
                kernelize(model, mode=Mode.TRAINING, device=device, use_fallback=others)
            kernelize(model, mode=Mode.TRAINING, device=device, use_fallback=case)
            assert model[0].forward.__func__ is SiluAndMul.forward
    with use_kernel_mapping(cpu_mapping(repo)):  # a kernel layer that cannot compile
        model = nn.Sequential(HubSiluAndMul())
        with pytest.raises(KernelLayerError, match=r"does not support mode INFERENCE\|TORCH"):
            kernelize(model, mode=INF | CMP, device="cpu", use_fallback=False)
        kernelize(model, mode=INF | CMP, device="cpu", use_fallback=True)
        assert model[0].forward.__func__ is SiluAndMul.forward
    with pytest.raises(TypeError, match="KernelizeFallback"):
        kernelize(model, device="cpu", use_fallback="all")  # type: ignore[arg-type]


def test_kernelize_logs_a_marked_layer_whose_name_is_not_mapped(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="flashhub_kernels")
    model = nn.Sequential(HubSiluAndMul(), HubSiluAndMul())
    with use_kernel_mapping({}, inherit_mapping=False):
        kernelize(model, device="cpu")  # as Hugging Face kernels, it warns and falls back
    (record,) = [r for r in caplog.records if "no kernel mapping" in r.getMessage()]
    assert (record.name, record.levelno) == ("flashhub_kernels", logging.WARNING)
    assert "'SiluAndMul'" in record.getMessage() and "use_kernel_mapping" in record.getMessage()
    assert [m.forward.__func__ for m in model] == [SiluAndMul.forward] * 2

    caplog.clear()
    elsewhere = {"SiluAndMul": {"cuda": LayerRepository("acme/x", "SiluAndMul", version=1)}}
    with use_kernel_mapping(elsewhere, inherit_mapping=False):
        kernelize(model, device="cpu")  # mapped, only not for this device: silent there too
    monkeypatch.setenv("DISABLE_KERNEL_MAPPING", "1")
    with use_kernel_mapping({}, inherit_mapping=False):
        kernelize(model, device="cpu")
    assert caplog.records == []


def test_a_kernel_that_cannot_load_falls_back_only_when_allowed(
    cdn: CdnServer, caplog: pytest.LogCaptureFixture
) -> None:
    missing = LayerRepository("acme/not-published", "SiluAndMul", version=1)
    model = nn.Sequential(HubSiluAndMul(), HubSiluAndMul())
    with use_kernel_mapping(cpu_mapping(missing)):
        with pytest.raises(KernelNotFoundError):
            kernelize(model, device="cpu")  # True is DEFAULT, without CANNOT_LOAD
        cdn.clear_log()
        caplog.set_level(logging.WARNING, logger="flashhub_kernels")
        kernelize(model, device="cpu", use_fallback=KernelizeFallback.ALL)
    assert [m.forward.__func__ for m in model] == [SiluAndMul.forward] * 2
    assert len(cdn.gets("variants.json")) == 1  # tried once for both layers
    (record,) = [r for r in caplog.records if "cannot be loaded" in r.getMessage()]
    assert "acme/not-published" in record.getMessage() and "CANNOT_LOAD" in record.getMessage()
    with use_kernel_mapping(cpu_mapping(missing)), pytest.raises(KernelNotFoundError):
        strict = nn.Sequential(StrictSiluAndMul())
        kernelize(strict, device="cpu", use_fallback=KernelizeFallback.ALL)


def test_a_local_kernels_path_that_is_gone_falls_back_when_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Hugging Face kernels: its FileNotFoundError is a kernel that cannot load."""
    monkeypatch.setenv("LOCAL_KERNELS", f"acme/gone={tmp_path / 'missing'}")
    gone = LayerRepository("acme/gone", "SiluAndMul", version=1)
    model = nn.Sequential(HubSiluAndMul())
    with use_kernel_mapping(cpu_mapping(gone)):
        with pytest.raises(FileNotFoundError):
            kernelize(model, device="cpu")
        kernelize(model, device="cpu", use_fallback=KernelizeFallback.ALL)
    assert model[0].forward.__func__ is SiluAndMul.forward


def test_kernelize_for_device_types_this_torch_does_not_know(tmp_path: Path) -> None:
    repos = {kind: local_layers(tmp_path / kind, kind) for kind in ("tpu", "neuron", "npu")}
    mapping = {"SiluAndMul": {Device(kind): repo for kind, repo in repos.items()}}
    layer = HubSiluAndMul()
    with use_kernel_mapping(mapping):
        for device in ("tpu", "neuron:1", Device("npu")):
            kernelize(layer, device=device)
            kind = device.type if isinstance(device, Device) else device.split(":")[0]
            assert layer.forward.__func__ is repos[kind].load().forward
    with pytest.raises(ValueError, match=r"give a torch device.*neuron, tpu"):
        kernelize(layer, device="gpu")


def test_kernelize_needs_a_device_for_a_model_without_parameters() -> None:
    with pytest.raises(ValueError, match="pass device="):
        kernelize(HubSiluAndMul())
    assert kernelize(HubSiluAndMul(), device="cpu").forward.__func__ is SiluAndMul.forward


# -- devices and capabilities --------------------------------------------------------------


def test_device_and_capability_validation() -> None:
    assert Device("cuda", CUDAProperties(80, 90)).matches(89)
    assert not Device("cuda", CUDAProperties(80, 90)).matches(None)
    with pytest.raises(ValueError, match="empty range"):
        CUDAProperties(90, 80)
    with pytest.raises(ValueError, match="empty range"):
        ROCMProperties(95, 94)
    with pytest.raises(TypeError, match="must be an int"):
        CUDAProperties(8.0, 9)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown device type 'metal'"):
        Device("metal")
    with pytest.raises(ValueError, match="without an index"):
        Device("cuda:0")
    with pytest.raises(ValueError, match="takes properties=None"):
        Device("cpu", CUDAProperties(80, 90))
    with pytest.raises(ValueError, match="CUDAProperties or None"):
        Device("cuda", ROCMProperties(90, 94))


def test_devices_have_hugging_face_kernels_validate_methods() -> None:
    """Its strict dataclasses have validate(); ours check when built, and again on call."""
    cuda = CUDAProperties(80, 90)
    assert cuda.validate() is None and cuda.validate_capability_range() is None
    assert ROCMProperties(90, 94).validate_capability_range() is None
    assert Device("cuda", cuda).validate() is None
    emptied = CUDAProperties(80, 90)
    object.__setattr__(emptied, "min_capability", 95)  # past the frozen record's guard
    with pytest.raises(ValueError, match="empty range"):
        emptied.validate_capability_range()
    mismatched = Device("cuda", cuda)
    object.__setattr__(mismatched, "properties", ROCMProperties(90, 94))
    with pytest.raises(ValueError, match="CUDAProperties or None"):
        mismatched.validate()


def test_devices_and_repositories_are_frozen_values(tmp_path: Path) -> None:
    cuda = Device("cuda", CUDAProperties(80, 90))
    assert cuda == Device(type="cuda", properties=CUDAProperties(80, 90))
    assert hash(cuda) == hash(Device("cuda", CUDAProperties(80, 90)))
    assert CUDAProperties(80, 90) != ROCMProperties(80, 90)  # the kind of range counts
    assert repr(cuda) == (
        "Device(type='cuda', properties=CUDAProperties(min_capability=80, max_capability=90))"
    )
    assert asdict(ROCMProperties(90, 94)) == {"min_capability": 90, "max_capability": 94}
    with pytest.raises(FrozenInstanceError):
        cuda.type = "cpu"  # type: ignore[misc]
    lock = tmp_path / "flashhub.lock"
    locked = LockedLayerRepository("acme/silu-layers", "SiluAndMul", lockfile=lock)
    assert locked == LockedLayerRepository("acme/silu-layers", "SiluAndMul", lockfile=lock)
    assert repr(locked) == (
        f"LockedLayerRepository(repo_id='acme/silu-layers', layer_name='SiluAndMul', "
        f"lockfile={lock!r}, check_arch=True)"
    )
    found = LockedLayerRepository("acme/silu-layers", "SiluAndMul")  # its lock found by package
    assert pickle.loads(pickle.dumps(found))._caller == found._caller == "test_layers"
    with pytest.raises(FrozenInstanceError):
        locked.lockfile = None  # type: ignore[misc]


@pytest.fixture
def capability_repos(tmp_path: Path) -> dict[str, LocalLayerRepository]:
    names = ["ampere", "hopper", "wide", "any", "rocm"]
    return {name: local_layers(tmp_path, name) for name in names}


@pytest.mark.parametrize(
    ("capability", "expected"),
    [((8, 6), "ampere"), ((9, 0), "hopper"), ((8, 9), "wide"), ((7, 5), "any"), (None, "any")],
)
def test_the_narrowest_matching_capability_range_wins(
    capability_repos: dict[str, LocalLayerRepository],
    monkeypatch: pytest.MonkeyPatch,
    capability: tuple[int, int] | None,
    expected: str,
) -> None:
    def get_device_capability(device: object = None) -> tuple[int, int]:
        if capability is None:
            raise AssertionError("Torch not compiled with CUDA enabled")
        return capability

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # torch is asked then
    monkeypatch.setattr(torch.cuda, "get_device_capability", get_device_capability)
    mapping = {
        "SiluAndMul": {
            "cuda": capability_repos["any"],
            Device("cuda", CUDAProperties(80, 90)): capability_repos["wide"],
            Device("cuda", CUDAProperties(80, 87)): capability_repos["ampere"],
            Device("cuda", CUDAProperties(90, 90)): capability_repos["hopper"],
            Device("rocm"): capability_repos["rocm"],
        }
    }
    model = HubSiluAndMul()
    with use_kernel_mapping(mapping):
        assert kernel_tag(kernelize(model, device="cuda")) == expected
        monkeypatch.setattr(torch.version, "hip", "6.3")  # a ROCm build calls its GPUs cuda
        assert kernel_tag(kernelize(model, device=torch.device("cuda"))) == "rocm"
        assert kernel_tag(kernelize(model, device=Device("rocm"))) == "rocm"


def test_a_range_only_mapping_misses_a_gpu_outside_it(
    capability_repos: dict[str, LocalLayerRepository], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # torch is asked then
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    mapping = {"SiluAndMul": {Device("cuda", CUDAProperties(80, 90)): capability_repos["wide"]}}
    with use_kernel_mapping(mapping):
        model = kernelize(HubSiluAndMul(), device="cuda:0")
    assert model.forward.__func__ is SiluAndMul.forward


@pytest.fixture(params=[("cuda", CUDAProperties), ("rocm", ROCMProperties)], ids=["cuda", "rocm"])
def sm86_range(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Device:
    """The entry ``80-89`` of a GPU whose capability is 86, CUDA's or ROCm's."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # torch is asked then
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    device, properties = request.param
    return Device(device, properties(80, 89))


def narrow_inference_wide_training(
    repos: dict[str, LocalLayerRepository], narrow: Device
) -> dict[str, dict[object, object]]:
    """``INFERENCE`` in the range ``narrow``, ``TRAINING`` for its device type at large."""
    return {
        "SiluAndMul": {
            narrow.type: {Mode.TRAINING: repos["any"]},
            narrow: {Mode.INFERENCE: repos["ampere"]},
        }
    }


def test_a_narrow_range_with_the_mode_beats_a_wider_entry(
    capability_repos: dict[str, LocalLayerRepository], sm86_range: Device
) -> None:
    mapping = narrow_inference_wide_training(capability_repos, sm86_range)
    with use_kernel_mapping(mapping, inherit_mapping=False):
        model = kernelize(HubSiluAndMul(), mode=Mode.INFERENCE, device=sm86_range.type)
    assert kernel_tag(model) == "ampere"


def test_a_narrow_range_without_the_mode_falls_back_without_trying_wider_entries(
    capability_repos: dict[str, LocalLayerRepository], sm86_range: Device
) -> None:
    mapping = narrow_inference_wide_training(capability_repos, sm86_range)
    with use_kernel_mapping(mapping, inherit_mapping=False):  # as in Hugging Face kernels
        model = kernelize(HubSiluAndMul(), mode=Mode.TRAINING, device=sm86_range.type)
    assert model.forward.__func__ is SiluAndMul.forward


def test_a_narrow_range_without_the_mode_raises_without_fallback(
    capability_repos: dict[str, LocalLayerRepository], sm86_range: Device
) -> None:
    mapping = narrow_inference_wide_training(capability_repos, sm86_range)
    model = HubSiluAndMul()
    with (
        use_kernel_mapping(mapping, inherit_mapping=False),
        pytest.raises(KernelLayerError) as info,
    ):
        kernelize(model, mode=Mode.TRAINING, device=sm86_range.type, use_fallback=False)
    assert isinstance(info.value, ValueError)
    assert (
        f"its {sm86_range.type} entry for the capabilities 80-89 is for the modes INFERENCE, "
        "none of which serves it (the narrowest entry that holds this GPU's capability: "
        "wider ones are not tried)"
    ) in str(info.value)
    assert "NO_COMPATIBLE_MODE" in str(info.value)


def test_an_empty_narrow_range_hides_wider_entries(
    capability_repos: dict[str, LocalLayerRepository],
    sm86_range: Device,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mapping = {"SiluAndMul": {sm86_range.type: capability_repos["any"], sm86_range: {}}}
    model = HubSiluAndMul()
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device=sm86_range.type)
        assert model.forward.__func__ is SiluAndMul.forward
        with pytest.raises(KernelLayerError, match=r"80-89 maps no mode.*NO_COMPATIBLE_MODE"):
            kernelize(model, mode=Mode.INFERENCE, device=sm86_range.type, use_fallback=False)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
        assert kernel_tag(kernelize(model, mode=Mode.INFERENCE, device=sm86_range.type)) == "any"


# -- repositories and marking --------------------------------------------------------------


def test_layer_repository_validation() -> None:
    repo = LayerRepository("acme/silu-layers", "SiluAndMul", revision="v2")
    assert repo.info == flashhub_kernels.RepoInfo("acme/silu-layers", 2)
    with pytest.raises(ValueError, match="exactly one of version= or revision="):
        LayerRepository("acme/silu-layers", "SiluAndMul", version=1, revision="v1")
    with pytest.raises(ValueError, match="exactly one of version= or revision="):
        LayerRepository("acme/silu-layers", "SiluAndMul")
    with pytest.raises(ValueError, match="invalid revision 'main'"):
        LayerRepository("acme/silu-layers", "SiluAndMul", revision="main")
    with pytest.raises(ValueError, match="invalid repo id"):
        LayerRepository("acme/silu/layers", "SiluAndMul", version=1)
    with pytest.raises(ValueError, match="layer_name must be a class name"):
        LayerRepository("acme/silu-layers", "silu-and-mul", version=1)
    with pytest.raises(ValueError, match="layer_name must be a class name"):
        LocalLayerRepository("/tmp/x", "")


@pytest.mark.filterwarnings("ignore:LocalFuncRepository is deprecated:DeprecationWarning")
def test_local_repositories_take_the_hugging_face_keywords(tmp_path: Path) -> None:
    path = tmp_path / "local" / "layers_a"
    hf_style = LocalLayerRepository(
        repo_path=path, package_name="silu_layers", layer_name="SiluAndMul"
    )
    assert hf_style == LocalLayerRepository(path, "SiluAndMul", package_name="silu_layers")
    func = LocalFuncRepository(repo_path=path, package_name="silu_layers", func_name="double")
    assert func == LocalFuncRepository(path, "double", package_name="silu_layers")
    with pytest.raises(TypeError, match="a path"):
        LocalLayerRepository(path, "SiluAndMul", repo_path=path)
    with pytest.raises(TypeError, match="a path"):
        LocalFuncRepository(func_name="double")
    local_layers(tmp_path, "a")
    kernel = flashhub_kernels.get_local_kernel(path, "layers_a")  # get_local_kernel's too
    assert kernel is flashhub_kernels.get_local_kernel(path)
    assert hf_style.load_kernel() is kernel


def two_package_repo(tmp_path: Path) -> Path:
    """A kernel repo whose one variant holds two packages, layers_a and layers_b."""
    repo = tmp_path / "dev"
    for tag in ("a", "b"):
        for relpath, data in layer_files(f"layers_{tag}", tag).items():
            write = repo / "build" / "torch-universal" / relpath
            write.parent.mkdir(parents=True, exist_ok=True)
            write.write_bytes(data)
    return repo


@pytest.mark.filterwarnings("ignore:LocalFuncRepository is deprecated:DeprecationWarning")
def test_package_name_picks_the_package_of_a_local_variant_that_holds_several(
    tmp_path: Path,
) -> None:
    repo = two_package_repo(tmp_path)
    chosen = LocalLayerRepository(repo_path=repo, package_name="layers_b", layer_name="SiluAndMul")
    assert chosen.load().__module__.startswith("flashhub._local.layers_b_")
    func = LocalFuncRepository(repo_path=repo, package_name="layers_b", func_name="double")
    assert func.load_kernel() is chosen.load_kernel()
    assert chosen != LocalLayerRepository(repo, "SiluAndMul", package_name="layers_a")

    with pytest.raises(KernelNotFoundError) as unnamed:
        LocalLayerRepository(repo, "SiluAndMul").load()
    assert "several kernel packages ('layers_a', 'layers_b')" in unnamed.value.message
    assert "package_name='layers_a'" in (unnamed.value.hint or "")
    with pytest.raises(KernelNotFoundError, match="no kernel package 'layers_c' found"):
        LocalLayerRepository(repo, "SiluAndMul", package_name="layers_c").load()

    shutil.rmtree(repo / "build" / "torch-universal" / "layers_a")  # one package: it is taken
    only = LocalLayerRepository(repo, "SiluAndMul", package_name="silu_layers")
    assert only.load_kernel() is chosen.load_kernel()


@pytest.mark.filterwarnings("ignore:LocalFuncRepository is deprecated:DeprecationWarning")
def test_a_local_repository_names_its_package_where_it_is_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = two_package_repo(tmp_path)
    caplog.set_level(logging.INFO, logger="flashhub_kernels")
    for tag in ("a", "b"):
        chosen = LocalLayerRepository(repo, "SiluAndMul", package_name=f"layers_{tag}")
        with use_kernel_mapping(cpu_mapping(chosen)):
            kernelize(nn.Sequential(HubSiluAndMul()), mode=Mode.INFERENCE, device="cpu")
    logged = [r.getMessage() for r in caplog.records if "runs kernel layer" in r.getMessage()]
    shown = [f"{repo} (package layers_a)", f"{repo} (package layers_b)"]
    assert [line.rpartition(" of ")[2] for line in logged] == shown
    assert str(LocalFuncRepository(repo, "double", package_name="layers_b")) == shown[1]
    assert str(LocalLayerRepository(repo, "SiluAndMul")) == str(repo)


@pytest.mark.parametrize(
    "package_name", ["../../../outside", "{tmp_path}/outside", "build/torch-universal/layers_b"]
)
def test_package_name_picks_only_among_the_variants_own_packages(
    package_name: str, tmp_path: Path
) -> None:
    repo = two_package_repo(tmp_path)
    ran = tmp_path / "ran"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "__init__.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    name = package_name.format(tmp_path=tmp_path)

    with pytest.raises(KernelNotFoundError, match=f"no kernel package {re.escape(repr(name))}"):
        flashhub_kernels.get_local_kernel(repo, name)
    with pytest.raises(KernelNotFoundError, match="no kernel package"):
        LocalLayerRepository(repo, "SiluAndMul", package_name=name).load()
    assert not ran.exists()


def test_repositories_copy_and_pickle_as_values(tmp_path: Path) -> None:
    repo = local_layers(tmp_path, "a")
    repo.load()
    for clone in (copy.deepcopy(repo), pickle.loads(pickle.dumps(repo))):
        assert clone == repo
        assert hash(clone) == hash(repo)
        assert clone.load() is repo.load()  # the same kernel module, imported once


def test_a_custom_repository_defines_only_layer_name_and_load_kernel(
    tmp_path: Path, x: torch.Tensor
) -> None:
    local = local_layers(tmp_path, "a")

    @dataclass(frozen=True)
    class Custom(BaseLayerRepository):
        layer_name: str
        loads: list[str] = field(default_factory=list, compare=False)

        def load_kernel(self) -> ModuleType:
            self.loads.append(self.layer_name)
            return local.load_kernel()

    repo = Custom("SiluAndMul")
    with use_kernel_mapping(cpu_mapping(repo)):
        for _ in range(3):
            HubSiluAndMul()(x)
    assert repo.loads == ["SiluAndMul"]
    assert calls(repo) == ["a"] * 3


def test_replace_kernel_forward_marks_a_class_once(tmp_path: Path, x: torch.Tensor) -> None:
    class External(SiluAndMul):
        pass

    class Overriding(External):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    replace_kernel_forward_from_hub(External, "Other")
    replace_kernel_forward_from_hub(External, "SiluAndMul")  # re-marking, not re-wrapping
    assert External.forward.__wrapped__ is SiluAndMul.forward
    repo = local_layers(tmp_path, "a")
    with use_kernel_mapping(cpu_mapping(repo)):
        External()(x)
        model = kernelize(nn.Sequential(Overriding()), device="cpu")
        assert "forward" not in vars(model[0])  # its own forward is not the marked one
    assert calls(repo) == ["a"]
    with pytest.raises(TypeError, match=r"only torch\.nn\.Module subclasses"):
        replace_kernel_forward_from_hub(NotAModule, "X")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="defines no forward"):
        use_kernel_forward_from_hub("X")(type("NoForward", (nn.Module,), {}))


def test_layer_names_are_exported_from_the_package_without_importing_torch() -> None:
    import flashhub_kernels.layers as layers

    for name in ["CUDAProperties", "Device", "LayerRepository", "LocalLayerRepository", "Mode"]:
        assert getattr(flashhub_kernels, name) is getattr(layers, name)
    for name in ["ROCMProperties", "kernelize", "register_kernel_mapping"]:
        assert getattr(flashhub_kernels, name) is getattr(layers, name)
    for name in ["replace_kernel_forward_from_hub", "use_kernel_forward_from_hub"]:
        assert getattr(flashhub_kernels, name) is getattr(layers, name)
    assert flashhub_kernels.use_kernel_mapping is layers.use_kernel_mapping
    out = run_python("import sys, flashhub_kernels; print('torch' in sys.modules)", fresh=True)
    assert out.strip() == "False"


# The layer and function names of Hugging Face kernels 0.19.1 (those of kernels.__all__;
# 0.17's kernels.layer.__all__ lacked the four of get_kernelized_layers).
HF_LAYER_NAMES = [
    "CUDAProperties",
    "Device",
    "FuncRepository",
    "KernelizeFallback",
    "KernelizedFunc",
    "KernelizedLayer",
    "KernelizedLayers",
    "LayerRepository",
    "LocalFuncRepository",
    "LocalLayerRepository",
    "LockedFuncRepository",
    "LockedLayerRepository",
    "Mode",
    "ROCMProperties",
    "get_kernelized_layers",
    "kernelize",
    "register_kernel_mapping",
    "replace_kernel_forward_from_hub",
    "use_kernel_forward_from_hub",
    "use_kernel_func_from_hub",
    "use_kernel_mapping",
    "use_kernelized_func",
]


def test_every_hugging_face_layer_name_is_exported_at_both_levels() -> None:
    import flashhub_kernels.layer as layer
    import flashhub_kernels.layers as layers

    for name in HF_LAYER_NAMES:
        assert name in flashhub_kernels.__all__ and name in layers.__all__, name
        assert getattr(flashhub_kernels, name) is getattr(layers, name) is getattr(layer, name)


def test_the_layer_module_is_the_layers_api_under_the_hugging_face_name() -> None:
    code = """
import json, sys
import flashhub_kernels.layer as layer
before = sorted(m for m in ("torch", "flashhub_kernels.layers") if m in sys.modules)
from flashhub_kernels.layers._fallback import KernelizeFallback
from flashhub_kernels.layers._mapping import Mode
from flashhub_kernels.layers._marking import use_kernelized_func
import flashhub_kernels.layers as layers
same = [getattr(layer, n) is getattr(layers, n) for n in ("Mode", "KernelizeFallback")]
star = {}
exec("from flashhub_kernels.layer import *", star)
print(json.dumps([before, same, "torch" in sys.modules, sorted(set(star) - {"__builtins__"})]))
"""
    before, same, torch_imported, star = json.loads(run_python(code, fresh=True))
    assert before == ["flashhub_kernels.layers"] and same == [True, True]  # no torch
    assert torch_imported  # the star import includes kernelize, which needs torch
    import flashhub_kernels.layer as layer
    import flashhub_kernels.layers as layers

    assert star == sorted(layers.__all__) and layer.kernelize is layers.kernelize
    assert sorted(set(dir(layer)) & set(layers.__all__)) == sorted(layers.__all__)
    with pytest.raises(AttributeError, match="has no attribute '_mapping'"):
        layer._mapping  # noqa: B018


LAYERS_DIR = Path(flashhub_kernels.__file__).parent / "layers"


def _imported_layers_modules(path: Path) -> set[str]:
    """The ``layers`` modules that ``path`` imports, at module or function level.

    Imports under ``if TYPE_CHECKING:`` run at no time, so they do not count.
    """
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for stmt in ast.walk(tree)
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING"
        for node in ast.walk(stmt)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and id(node) not in skipped and node.level == 1:
            found |= {node.module} if node.module else {a.name for a in node.names}
    return found & {p.stem for p in LAYERS_DIR.glob("*.py")}


def test_the_layers_modules_import_each_other_without_a_cycle() -> None:
    graph = {p.stem: _imported_layers_modules(p) for p in LAYERS_DIR.glob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
            for nxt in graph[start]
        )

    assert graph["_dispatch"], "the import scan found nothing"
    assert [name for name in sorted(graph) if reaches(name, name, {name})] == []


def test_hook_means_only_the_import_hook_not_a_marked_layer() -> None:
    # "hook" is the sys.meta_path finder; the layer side speaks of marking.
    for path in LAYERS_DIR.glob("*.py"):
        assert "hook" not in path.stem
        names = {
            getattr(node, "id", None) or getattr(node, "name", None) or getattr(node, "arg", "")
            for node in ast.walk(ast.parse(path.read_text()))
        }
        assert [n for n in names if n and "hook" in n.lower()] == [], path.name


def test_docs_example_runs(
    cdn: CdnServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flashhub_kernels._publish import publish

    repo_root = Path(__file__).resolve().parents[1]
    blocks = re.findall(r"```python\n(.*?)```", (repo_root / "docs/layers.md").read_text(), re.S)
    local_example, cdn_example = blocks[0], blocks[1]
    assert "LocalLayerRepository(" in local_example
    assert "LayerRepository(" in cdn_example
    # What `python examples/kernels/silu-layers/build.py` makes, built in tmp_path
    # so the test leaves the source tree alone.
    kernel = tmp_path / "examples/kernels/silu-layers"
    package = kernel / "build/torch-universal/silu_layers"
    package.mkdir(parents=True)
    for source in (repo_root / "examples/kernels/silu-layers/src/silu_layers").glob("*.py"):
        (package / source.name).write_bytes(source.read_bytes())
    publish(kernel, repo_id="acme/silu-layers", version=1, out=cdn.root, prefix="kernels")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_example"}
    exec(compile(local_example, "docs/layers.md", "exec"), namespace)
    exec(compile(cdn_example, "docs/layers.md", "exec"), namespace)
    printed = capsys.readouterr().out.split()
    assert printed[0].startswith("flashhub._local.silu_layers_")
    assert printed[1] == "flashhub.acme.silu_layers.v1.layers"
    assert len(cdn.gets("layers.py")) == 1


# -- mode fallback order -------------------------------------------------------------------

INF, TRN, CMP, FB = Mode.INFERENCE, Mode.TRAINING, Mode.TORCH_COMPILE, Mode.FALLBACK
ALL_KEYS = [INF, INF | CMP, TRN, TRN | CMP, FB]


@pytest.mark.parametrize(
    ("mode", "order"),
    [
        (INF, [INF, INF | CMP, TRN, TRN | CMP, FB]),
        (TRN, [TRN, TRN | CMP, FB]),
        (INF | CMP, [INF | CMP, TRN | CMP, FB]),
        (TRN | CMP, [TRN | CMP, FB]),
    ],
)
def test_each_mode_tries_the_keys_in_order(mode: Mode, order: list[Mode]) -> None:
    for i, expected in enumerate(order):
        repos = {key: mode_text(key) for key in ALL_KEYS if key not in order[:i]}
        assert _mapping.select_mode(repos, mode) == (mode_text(expected), expected)
    assert _mapping.select_mode({k: "x" for k in ALL_KEYS if k not in order}, mode) is None


def test_inference_uses_a_kernel_mapped_only_for_training(
    mode_repos: dict[str, LocalLayerRepository],
) -> None:
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul())
    with use_kernel_mapping(
        cpu_mapping({Mode.TRAINING | Mode.TORCH_COMPILE: mode_repos["compile"]})
    ):
        assert kernel_tag(kernelize(model, mode=Mode.INFERENCE)[1]) == "compile"
    with use_kernel_mapping(cpu_mapping({Mode.TRAINING: mode_repos["training"]})):
        assert kernel_tag(kernelize(model, mode=Mode.INFERENCE)[1]) == "training"
        # a compiled run needs a kernel mapped for compiling
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        assert model[1].forward.__func__ is SiluAndMul.forward
    with use_kernel_mapping(cpu_mapping({Mode.INFERENCE: mode_repos["inference"]})):
        kernelize(model, mode=Mode.TRAINING)  # an inference kernel cannot train
        assert model[1].forward.__func__ is SiluAndMul.forward


# -- has_backward and can_torch_compile ----------------------------------------------------


class MarkedLayer(nn.Module):
    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_validate_layer_accepts_the_protocol_markers() -> None:
    validate_layer(MarkedLayer, HubSiluAndMul)


def test_a_layer_without_backward_is_not_used_for_training(tmp_path: Path) -> None:
    repo = local_layers(tmp_path, "a", layer_name="NoBackward")
    kernel_forward = repo.load().forward
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul())
    with use_kernel_mapping(cpu_mapping(repo)):
        assert kernelize(model, mode=Mode.INFERENCE)[1].forward.__func__ is kernel_forward
        kernelize(model, mode=Mode.TRAINING)
        assert model[1].forward.__func__ is SiluAndMul.forward
        kernelize(model, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        assert model[1].forward.__func__ is SiluAndMul.forward
        with pytest.raises(KernelLayerError, match=r"does not support backward"):
            kernelize(model, mode=Mode.TRAINING, use_fallback=False)
        layer = HubSiluAndMul()
        layer.train()(torch.ones(2, 4))  # the marked forward follows the same rule
        layer.eval()(torch.ones(2, 4))
    assert layer.n_calls == 1 and calls(repo) == ["a"]
    # The mode asked for decides, not the key: under a TRAINING key it serves inference,
    # and training falls back, as for a bare repository.
    with use_kernel_mapping(cpu_mapping({Mode.TRAINING: repo})):
        assert kernelize(model, mode=Mode.INFERENCE)[1].forward.__func__ is kernel_forward
        assert kernelize(model, mode=Mode.TRAINING)[1].forward.__func__ is SiluAndMul.forward
        with pytest.raises(KernelLayerError, match=r"NO_COMPATIBLE_MODE"):
            kernelize(model, mode=Mode.TRAINING, use_fallback=False)


def test_a_layer_needs_can_torch_compile_for_compiled_runs(tmp_path: Path) -> None:
    repo = local_layers(tmp_path, "a", layer_name="NoCompile")
    kernel_forward = repo.load().forward
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul())
    with use_kernel_mapping(cpu_mapping(repo)):
        assert kernelize(model, mode=Mode.TRAINING)[1].forward.__func__ is kernel_forward
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        assert model[1].forward.__func__ is SiluAndMul.forward
        with pytest.raises(KernelLayerError, match=r"does not support torch\.compile"):
            kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, use_fallback=False)
    with use_kernel_mapping(cpu_mapping({Mode.INFERENCE | Mode.TORCH_COMPILE: repo})):
        assert kernelize(model, mode=Mode.INFERENCE)[1].forward.__func__ is kernel_forward
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)  # falls back, no error
        assert model[1].forward.__func__ is SiluAndMul.forward


def test_training_a_model_kernelized_for_inference_warns_once_per_kernel_layer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = local_layers(tmp_path / "a", "a", layer_name="NoBackward")
    b = local_layers(tmp_path / "b", "b", layer_name="NoBackward")
    model = nn.Sequential(nn.Linear(8, 16), HubSiluAndMul(), nn.Linear(8, 16), HubSiluAndMul())
    x = torch.randn(2, 8)
    with use_kernel_mapping(cpu_mapping(a)):
        kernelize(model, mode=Mode.INFERENCE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.eval()(x)  # inference: nothing to say
        with torch.no_grad():
            model.train()(x)  # no gradients, so no backward is needed
        model.train()(x)
        model(x)  # two layers, two calls: one warning for the kernel layer class
    (warning,) = [w for w in caught if issubclass(w.category, KernelWithoutBackwardWarning)]
    assert "has_backward = False" in str(warning.message)
    assert "kernelize(model, mode=Mode.TRAINING)" in str(warning.message)
    assert calls(a) == ["a"] * 8  # it warns; the kernel it was given still runs
    with use_kernel_mapping(cpu_mapping(b)):
        kernelize(model, mode=Mode.INFERENCE)
        kernelize(model, mode=Mode.TRAINING)  # the original again: no check left behind
    caplog.set_level(logging.WARNING, logger="flashhub_kernels")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(x)
        assert (model[1].n_calls, model[3].n_calls) == (1, 1)
        with use_kernel_mapping(cpu_mapping(b)):
            kernelize(model, mode=Mode.INFERENCE)
        model(x)  # the warning is an error here: it is logged, and forward still runs
    assert calls(b) == ["b", "b"]
    assert "KernelWithoutBackwardWarning" in caplog.text and "NoBackward" in caplog.text


def test_torch_compile_fullgraph_runs_the_choice_made_when_tracing(
    tmp_path: Path, x: torch.Tensor
) -> None:
    torch.compiler.reset()  # no compiled code of an earlier test's marked forward
    layer = HubSiluAndMul().eval()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    half = local_layers(tmp_path, "half", layer_name="Half")
    with use_kernel_mapping(cpu_mapping({Mode.INFERENCE | Mode.TORCH_COMPILE: half})):
        assert torch.equal(compiled(x), x[..., :8])
    assert torch.equal(compiled(x), x[..., :8])  # the compiled code keeps its choice
    layer.train()  # torch.compile guards the mode: it traces again, and chooses anew
    torch.testing.assert_close(compiled(x), reference_silu_and_mul(x))
    assert layer.n_calls == 1
    no_backward = local_layers(tmp_path, "nb", layer_name="NoBackward")
    with use_kernel_mapping(cpu_mapping(no_backward)):
        model = kernelize(nn.Sequential(HubSiluAndMul()), device="cpu")
    # training with gradients: the check of a kernel layer without backward stays out of
    # the graph, so fullgraph compiles
    torch.compile(model, backend="eager", fullgraph=True)(x)
    assert calls(no_backward) == ["nb"]


def test_the_choice_made_when_tracing_carries_the_mark_torch_gives_a_constant() -> None:
    # Set without importing torch._dynamo (see below): it must be the public function's.
    def constant() -> None: ...

    torch_marks = vars(torch.compiler.assume_constant_result(constant))
    assert torch_marks
    assert torch_marks.items() <= vars(_dispatch._choose_while_tracing).items()


# Marks a layer, kernelizes a model of it and runs it, eagerly; says whether
# torch._dynamo was imported before and after.
MARK_KERNELIZE_RUN = """
import sys, torch
before = "torch._dynamo" in sys.modules
from flashhub_kernels import Mode, kernelize, use_kernel_forward_from_hub

@use_kernel_forward_from_hub("NothingMapsThis")
class AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1

model = torch.nn.Sequential(AddOne())
model(torch.zeros(1))
model = kernelize(model, device="cpu", mode=Mode.INFERENCE)
print(model(torch.zeros(1)).item(), before, "torch._dynamo" in sys.modules)
"""


def test_marking_and_kernelizing_layers_never_imports_torch_dynamo() -> None:
    """A program that marks its layers as its model is imported, and never compiles,
    does not pay for torch.compile's frontend (0.8 s of CPU)."""
    assert run_python(MARK_KERNELIZE_RUN).split() == ["1.0", "False", "False"]


def test_torch_compile_fullgraph_takes_every_marked_layer_of_a_model_in_one_trace(
    tmp_path: Path, x: torch.Tensor
) -> None:
    # Each layer's choice is one the traced code has not seen before, made in one trace.
    torch.compiler.reset()

    class Double(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    replace_kernel_forward_from_hub(Double, "Double")
    half = local_layers(tmp_path, "half", layer_name="Half")
    model = nn.Sequential(HubSiluAndMul(), Double()).eval()
    with use_kernel_mapping(cpu_mapping(half)):
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        assert torch.equal(compiled(x), x[..., :8] * 2)


def test_many_marked_classes_compile_in_one_process(tmp_path: Path, x: torch.Tensor) -> None:
    # Every marked class shares one marked forward's code, which torch.compile compiles
    # for each: what differs between them must stay a constant of each graph.
    torch.compiler.reset()
    half = local_layers(tmp_path, "half", layer_name="Half")
    classes = [type(f"Marked{i}", (SiluAndMul,), {}) for i in range(3)]
    with use_kernel_mapping({f"Marked{i}": {"cpu": half} for i in range(3)}):
        for i, cls in enumerate(classes):
            replace_kernel_forward_from_hub(cls, f"Marked{i}")
            layer = cls().eval()
            assert torch.equal(torch.compile(layer, backend="eager", fullgraph=True)(x), x[..., :8])
            assert layer.n_calls == 0


def test_an_error_in_a_traced_choice_is_raised_as_it_is(x: torch.Tensor) -> None:
    torch.compiler.reset()
    strict = StrictSiluAndMul().eval()  # nothing is mapped, and no fallback is allowed
    with pytest.raises(KernelLayerError, match="forbids the original forward"):
        torch.compile(strict, backend="eager")(x)
    torch.compiler.reset()
    # fullgraph=True cannot leave the graph to raise it: torch's error names it
    with pytest.raises(RuntimeError, match=r"KernelLayerError: no kernel layer runs 'SiluAndMul'"):
        torch.compile(strict, backend="eager", fullgraph=True)(x)


def test_a_failed_traced_choice_under_fullgraph_says_to_kernelize_first(x: torch.Tensor) -> None:
    torch.compiler.reset()
    strict = StrictSiluAndMul().eval()  # nothing is mapped, and no fallback is allowed
    with pytest.raises(RuntimeError, match=r"call kernelize\(\) first"):
        torch.compile(strict, backend="eager", fullgraph=True)(x)


def test_under_a_torch_whose_disable_takes_no_reason_the_function_carries_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.5's ``torch.compiler.disable`` takes no ``reason=``; with fullgraph=True its
    error shows the disabled function instead, whose name then says what failed."""

    def disable(fn: Callable[..., object], recursive: bool = True) -> Callable[..., object]:
        return fn

    monkeypatch.setattr(torch.compiler, "disable", disable)
    strict = StrictSiluAndMul().eval()  # nothing is mapped, and no fallback is allowed
    error = KernelLayerError("no kernel layer runs 'SiluAndMul'")
    failed = _dispatch._chosen_per_call(_dispatch.mark_of(type(strict).forward).key, error)
    assert repr(failed).startswith(
        "<function flashhub_kernels: KernelLayerError: no kernel layer runs 'SiluAndMul'; "
        "call kernelize() first at 0x"
    )
    with pytest.raises(KernelLayerError, match="forbids the original forward"):
        failed(strict, torch.ones(2, 4))


def test_a_traced_choice_that_failed_is_made_again_at_each_call(
    tmp_path: Path, x: torch.Tensor
) -> None:
    """The kernel's directory is missing when torch.compile traces the layer, then appears:
    the compiled code does not keep the error (as an eager call does not)."""
    torch.compiler.reset()
    layer = HubSiluAndMul().eval()
    compiled = torch.compile(layer, backend="eager")
    missing = LocalLayerRepository(tmp_path / "local" / "layers_late", "Half")
    with use_kernel_mapping(cpu_mapping(missing)):
        with pytest.raises(LocalKernelNotFoundError):
            compiled(x)
        local_layers(tmp_path, "late")  # the directory the mapping names, now there
        assert torch.equal(compiled(x), x[..., :8])


# -- register_kernel_mapping(inherit_mapping=False) ----------------------------------------


def test_register_without_inheriting_replaces_the_mapping(tmp_path: Path, x: torch.Tensor) -> None:
    a, b = local_layers(tmp_path, "a"), local_layers(tmp_path, "b")
    register_kernel_mapping({"SiluAndMul": {"cpu": a, "cuda": a}})
    register_kernel_mapping({"Other": {"cpu": b}}, inherit_mapping=False)
    assert list(_mapping.current_mapping()) == ["Other"]
    register_kernel_mapping(cpu_mapping(a))
    with use_kernel_mapping(cpu_mapping(b)):
        register_kernel_mapping({"SiluAndMul": {"cuda": b}}, inherit_mapping=False)
        HubSiluAndMul()(x)  # nothing for the CPU in this block any more
        assert _mapping.current_mapping() == {"SiluAndMul": {Device("cuda"): {FB: b}}}
    HubSiluAndMul()(x)  # the block's mapping is gone; the process-wide one is back
    assert calls(a) == ["a"] and calls(b) == []


# -- marked functions and function kernels -----------------------------------------------


def marked_silu_and_mul() -> nn.Module:
    """A marked function, new for each test: kernelize binds the forward of the one object."""

    @use_kernel_forward_from_hub("silu_and_mul")
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        """The reference function."""
        return reference_silu_and_mul(x)

    return silu_and_mul


class WithFunc(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16)
        self.act = marked_silu_and_mul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


def func_calls(repo: BaseLayerRepository) -> list[str]:
    """Tags recorded by the kernel functions and layers of ``repo``'s kernel."""
    return list(sys.modules[repo.load().__module__].layers.CALLS)


def test_a_marked_function_is_still_a_function() -> None:
    silu_and_mul = marked_silu_and_mul()
    x = torch.randn(2, 8)
    torch.testing.assert_close(silu_and_mul(x), reference_silu_and_mul(x))
    assert isinstance(silu_and_mul, nn.Module)
    assert type(silu_and_mul).__name__ == "silu_and_mul"
    assert type(silu_and_mul).__doc__ == "The reference function."
    assert type(silu_and_mul).kernel_layer_name == "silu_and_mul"
    with pytest.raises(TypeError, match=r"decorates nn\.Module classes and functions"):
        use_kernel_forward_from_hub("x")(nn.ReLU())  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="layer_name must be a non-empty string"):
        use_kernel_forward_from_hub("")


def test_kernel_layer_name_names_only_marked_classes() -> None:
    class Overriding(HubSiluAndMul):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    class Inheriting(HubSiluAndMul):
        pass

    assert HubSiluAndMul.kernel_layer_name == "SiluAndMul"
    assert HubSiluAndMul().kernel_layer_name == "SiluAndMul"
    assert Inheriting.kernel_layer_name == "SiluAndMul"
    assert not hasattr(Overriding, "kernel_layer_name")  # its forward is not the marked one
    assert not hasattr(SiluAndMul(), "kernel_layer_name")


def test_kernelize_swaps_a_marked_function(tmp_path: Path) -> None:
    repo = local_layers(tmp_path, "a")
    model = WithFunc()
    x = torch.randn(3, 8)
    expected = reference_silu_and_mul(model.linear(x))
    with use_kernel_mapping({"silu_and_mul": {"cpu": repo}}):  # a layer for a function
        kernelize(model, mode=Mode.INFERENCE)
    torch.testing.assert_close(model(x), expected)
    assert calls(repo) == ["a"]
    kernelize(model, mode=Mode.INFERENCE)  # nothing mapped now: the original again
    model(x)
    assert calls(repo) == ["a"]


@use_kernel_forward_from_hub("halve")
def halve(x: torch.Tensor) -> torch.Tensor:
    return x[..., : x.shape[-1] // 2] * 0


@use_kernelized_func(halve)
class CallsHalve(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return halve(x)


@use_kernelized_func(marked_silu_and_mul())
class CallsBoth(CallsHalve):
    pass


def test_use_kernelized_func_lets_kernelize_reach_a_function_a_module_calls(
    tmp_path: Path, x: torch.Tensor
) -> None:
    repo = local_layers(tmp_path, "a", layer_name="NoCompile")
    model = nn.Sequential(nn.Linear(16, 16), CallsHalve())
    assert [name for name, _ in model.named_modules()] == ["", "0", "1"]  # not a submodule
    own = CallsBoth()._kernel_funcs  # the parent's function, then its own: instances of each
    assert list(own) == ["halve", "silu_and_mul"] and type(own["halve"]) is type(halve)
    assert own["halve"] is not halve and own["halve"] is not model[1]._kernel_funcs["halve"]
    with use_kernel_mapping({"halve": {"cpu": repo}}):
        kernelize(model, mode=Mode.INFERENCE)
    assert torch.equal(model[1](x), x[..., :8])  # the kernel's, not the original's zeros
    assert calls(repo) == ["a"]
    kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)  # NoCompile: the original
    assert torch.equal(model[1](x), x[..., :8] * 0)
    with pytest.raises(ValueError, match="Function `reference_silu_and_mul` is not decorated"):
        use_kernelized_func(reference_silu_and_mul)  # type: ignore[arg-type]


def test_a_condition_keeps_the_original_forward_where_it_is_false(
    tmp_path: Path, x: torch.Tensor
) -> None:
    @use_kernel_forward_from_hub("SiluAndMul", lambda module: module.wanted)
    class Conditional(SiluAndMul):
        wanted = True

    repo = local_layers(tmp_path, "a")
    wanted, unwanted = Conditional(), Conditional()
    unwanted.wanted = False
    with use_kernel_mapping(cpu_mapping(repo)):
        wanted(x)
        unwanted(x)  # per call
        kernelize(nn.Sequential(wanted, unwanted), device="cpu")
    assert wanted.forward.__func__ is repo.load().forward
    assert unwanted.forward.__func__ is SiluAndMul.forward
    assert (calls(repo), wanted.n_calls, unwanted.n_calls) == (["a"], 0, 1)


# Function kernels, deprecated as in Hugging Face kernels: they still work, and warn.
deprecated = pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")


def test_the_function_apis_are_deprecated_where_they_are_called(tmp_path: Path) -> None:
    made = [
        lambda: FuncRepository("acme/silu-layers", "silu_and_mul", version=1),
        lambda: LocalFuncRepository(tmp_path, "silu_and_mul"),
        lambda: LockedFuncRepository("acme/silu-layers", "f", lockfile=tmp_path / "x.lock"),
        lambda: use_kernel_func_from_hub("silu_and_mul"),
    ]
    for make, instead in zip(
        made,
        ["LayerRepository", "LocalLayerRepository", "LockedLayerRepository", "use_kernel_forward"],
        strict=True,
    ):
        with pytest.warns(DeprecationWarning, match=f"is deprecated.*{instead}") as caught:
            make()
        assert [w.filename for w in caught] == [__file__]
    with pytest.warns(DeprecationWarning):
        marked = use_kernel_func_from_hub("silu_and_mul")(reference_silu_and_mul)
    assert type(marked).kernel_layer_name == "silu_and_mul"


@deprecated
def test_kernelize_swaps_a_marked_function_for_a_function_kernel(tmp_path: Path) -> None:
    local_layers(tmp_path, "a")
    repo = LocalFuncRepository(tmp_path / "local" / "layers_a", "silu_and_mul")
    model = WithFunc()
    x = torch.randn(3, 8)
    expected = reference_silu_and_mul(model.linear(x))
    with use_kernel_mapping({"silu_and_mul": {"cpu": repo}}):
        kernelize(model, mode=Mode.INFERENCE)
    torch.testing.assert_close(model(x), expected)
    assert func_calls(repo) == ["a:func"]
    kernelize(model, mode=Mode.INFERENCE)  # nothing mapped now: the original again
    model(x)
    assert func_calls(repo) == ["a:func"]


@deprecated
def test_function_and_layer_kernels_replace_each_other(
    cdn: CdnServer, tmp_path: Path, x: torch.Tensor
) -> None:
    publish_layers(cdn, "acme/silu-layers", "cdn")
    func_repo = FuncRepository("acme/silu-layers", "silu_and_mul", version=1)
    layer_repo = local_layers(tmp_path, "a")
    layer = HubSiluAndMul()
    model = WithFunc().eval()
    with use_kernel_mapping(
        {"SiluAndMul": {"cpu": func_repo}, "silu_and_mul": {"cpu": layer_repo}}
    ):
        torch.testing.assert_close(layer(x), reference_silu_and_mul(x))  # a function for a layer
        model(torch.randn(3, 8))  # a layer for a function, looked up per call
    assert layer.n_calls == 0
    assert func_calls(func_repo) == ["cdn:func"]
    assert calls(layer_repo) == ["a"]
    assert len(cdn.gets("__init__.py")) == 1


@deprecated
def test_locked_func_repository(cdn: CdnServer, tmp_path: Path) -> None:
    from flashhub_kernels._lockfiles.pinning import lock_project
    from support.projects import write_project

    publish_layers(cdn, "acme/silu-layers", "locked")
    (cdn.root / "kernels/acme/silu-layers/versions.json").write_text("[1]")
    project = write_project(tmp_path / "proj", {"acme/silu-layers": ">=1"})
    lock_project(project)
    repo = LockedFuncRepository(
        "acme/silu-layers", "silu_and_mul", lockfile=project / "flashhub.lock"
    )
    model = WithFunc()
    with use_kernel_mapping({"silu_and_mul": {"cpu": repo}}):
        kernelize(model, mode=Mode.TRAINING)
    model(torch.randn(3, 8))
    assert func_calls(repo) == ["locked:func"]


@deprecated
def test_a_function_kernel_carries_its_markers(tmp_path: Path) -> None:
    local_layers(tmp_path, "a")
    repo = LocalFuncRepository(tmp_path / "local" / "layers_a", "double")
    layer = repo.load()
    assert (layer.has_backward, layer.can_torch_compile) == (False, True)
    model = WithFunc()
    validate_layer(layer, type(model.act))
    with use_kernel_mapping({"silu_and_mul": {"cpu": repo}}):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        assert model.act.forward.__func__ is layer.forward
        kernelize(model, mode=Mode.TRAINING)  # it has no backward
        assert model.act.forward.__func__ is type(model.act).forward.__wrapped__
    plain = LocalFuncRepository(tmp_path / "local" / "layers_a", "silu_and_mul").load()
    assert not hasattr(plain, "has_backward") and not hasattr(plain, "can_torch_compile")


@deprecated
def test_func_repository_errors(tmp_path: Path, x: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="exactly one of version= or revision="):
        FuncRepository("acme/silu-layers", "silu_and_mul")
    with pytest.raises(ValueError, match="func_name must be a function name"):
        FuncRepository("acme/silu-layers", "silu-and-mul", version=1)
    with pytest.raises(ValueError, match="func_name must be a function name"):
        LockedFuncRepository("acme/silu-layers", "")
    local_layers(tmp_path, "a")
    missing = LocalFuncRepository(tmp_path / "local" / "layers_a", "gelu")
    with (
        use_kernel_mapping(cpu_mapping(missing)),
        pytest.raises(KernelLayerError, match=r"no function 'gelu'(.|\n)*double, silu_and_mul"),
    ):
        HubSiluAndMul()(x)
    assert FuncRepository("acme/silu-layers", "f", revision="v2").info.version == 2
    clone = pickle.loads(pickle.dumps(missing))
    assert clone == missing and hash(clone) == hash(missing)
