"""Layers marked by Hugging Face kernels' marking, which transformers applies to its
models' layers wherever Hugging Face kernels is installed: ``kernelize`` binds kernel
layers to them as to layers marked here.

The classes below are marked as Hugging Face kernels 0.19's ``replace_kernel_forward_from_hub``
marks a class (two class attributes, ``forward`` left alone), and hold functions as its
``use_kernelized_func`` gives a module its own instances of them (``_kernel_funcs``).
"""

from __future__ import annotations

import copy
import json
import pickle
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import run_python
from flashhub_kernels import (
    LocalLayerRepository,
    Mode,
    get_kernelized_layers,
    kernelize,
    use_kernel_mapping,
)
from support.cdn_server import CdnServer
from test_layers import (
    HubSiluAndMul,
    SiluAndMul,
    calls,
    local_layers,
    publish_layers,
    reference_silu_and_mul,
)

pytestmark = pytest.mark.usefixtures("fresh_base_mapping")


def hub_marked(
    cls: type[nn.Module], layer_name: str, condition: Callable[..., bool] | None = None
) -> None:
    """What Hugging Face kernels' ``replace_kernel_forward_from_hub`` does to ``cls``."""
    cls.kernel_layer_name = layer_name  # type: ignore[attr-defined]
    cls.kernel_condition = staticmethod(condition if condition is not None else lambda module: True)  # type: ignore[attr-defined]


class HfSiluAndMul(SiluAndMul):
    pass


class HfSmallOnly(SiluAndMul):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size


class HfOverridden(HfSiluAndMul):
    """Computes something else than the class marked: not marked here."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., : x.shape[-1] // 2] * 0


class HfZeroHalf(nn.Module):
    """A function made a module, as Hugging Face kernels makes a marked function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., : x.shape[-1] // 2] * 0


class HfBlock(nn.Module):
    """Holds its own instance of the marked function, as ``use_kernelized_func`` gives it."""

    def __init__(self) -> None:
        super().__init__()
        self.__dict__["_kernel_funcs"] = {"zero_half": HfZeroHalf()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self._kernel_funcs["zero_half"](x)
        return result


hub_marked(HfSiluAndMul, "SiluAndMul")
hub_marked(HfSmallOnly, "SiluAndMul", lambda module: module.size < 100)
hub_marked(HfZeroHalf, "zero_half")


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) + 5  # no zeros


def test_kernelize_binds_kernel_layers_to_layers_hugging_face_kernels_marked(
    tmp_path: Path, x: torch.Tensor
) -> None:
    layers = local_layers(tmp_path / "a", "a")
    funcs = local_layers(tmp_path / "b", "b", layer_name="NoCompile")
    model = nn.Sequential(
        HfSiluAndMul(), HfSmallOnly(10), HfSmallOnly(1000), HfOverridden(), HfBlock()
    )
    with use_kernel_mapping({"SiluAndMul": {"cpu": layers}, "zero_half": {"cpu": funcs}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    expected = reference_silu_and_mul(x)
    for index in (0, 1, 2):
        assert torch.allclose(model[index](x), expected)
    assert [model[index].n_calls for index in (0, 1, 2)] == [0, 0, 1]  # the condition held twice
    assert calls(layers) == ["a", "a"]
    assert torch.equal(model[3](x), x[..., :8] * 0)  # its own forward
    assert torch.equal(model[4](x), x[..., :8])  # NoCompile gives the first half
    assert calls(funcs) == ["b"]
    found = get_kernelized_layers(model)
    assert sorted(found.layers) == ["0", "1"]
    assert list(found.funcs) == [("4", "zero_half")]


def test_without_a_mapping_or_disabled_the_hugging_face_marked_layer_keeps_its_forward(
    tmp_path: Path, x: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = local_layers(tmp_path, "a")
    model = HfSiluAndMul()
    with use_kernel_mapping({"SiluAndMul": {"cpu": layers}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
        kernelize(model, mode=Mode.INFERENCE, device="cuda")  # nothing mapped for CUDA
    model(x)
    assert model.n_calls == 1 and get_kernelized_layers(model).layers == {}
    monkeypatch.setenv("DISABLE_KERNEL_MAPPING", "1")
    with use_kernel_mapping({"SiluAndMul": {"cpu": layers}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    model(x)
    assert model.n_calls == 2 and calls(layers) == []


def test_copies_and_pickles_of_a_hugging_face_marked_layer_keep_the_kernel_bound(
    tmp_path: Path, x: torch.Tensor
) -> None:
    layers = local_layers(tmp_path / "a", "a")
    funcs = local_layers(tmp_path / "b", "b", layer_name="NoCompile")
    model = nn.Sequential(HfSiluAndMul(), HfBlock())
    with use_kernel_mapping({"SiluAndMul": {"cpu": layers}, "zero_half": {"cpu": funcs}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert torch.allclose(clone[0](x), reference_silu_and_mul(x))
        assert torch.equal(clone[1](x), x[..., :8])
        assert clone[0].forward.__self__ is clone[0] and clone[0].n_calls == 0
    shallow = copy.copy(model[0])
    assert shallow.forward.__self__ is shallow
    assert calls(layers) == ["a"] * 2 and calls(funcs) == ["b"] * 2


HUB_MARKED_PY = """
from torch import nn


class SiluAndMul(nn.Module):
    def forward(self, x):
        return x[..., : x.shape[-1] // 2] * 0


# As Hugging Face kernels' replace_kernel_forward_from_hub marks it.
SiluAndMul.kernel_layer_name = "SiluAndMul"
SiluAndMul.kernel_condition = staticmethod(lambda module: True)
"""

UNMARKED_PY = """
from torch import nn


class SiluAndMul(nn.Module):
    def forward(self, x):
        return x[..., : x.shape[-1] // 2] * 0
"""


def run_unpickled_elsewhere(
    cdn: CdnServer, tmp_path: Path, models_py: str, marking: str = ""
) -> tuple[list[str], bool]:
    """Kernelize ``models.SiluAndMul`` (after ``marking``) and pickle it in one process;
    in another, which neither marks, maps nor kernelizes, unpickle and run it: the calls
    of the kernel layer, and whether it computed what the kernel layer computes."""
    publish_layers(cdn, "acme/silu-layers", "cdn")
    (tmp_path / "models.py").write_text(models_py)
    pickled = tmp_path / "model.pkl"
    kernelize_and_pickle = f"""
        import pickle
        from torch import nn
        from flashhub_kernels import (
            LayerRepository, kernelize, replace_kernel_forward_from_hub, use_kernel_mapping,
        )
        from models import SiluAndMul

        {marking}
        repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
        with use_kernel_mapping({{"SiluAndMul": {{"cpu": repo}}}}):
            model = kernelize(nn.Sequential(SiluAndMul()), device="cpu")
        with open({str(pickled)!r}, "wb") as f:
            pickle.dump(model, f)
    """
    run_python(textwrap.dedent(kernelize_and_pickle), cwd=tmp_path)
    unpickle_and_run = f"""
        import json, pickle, sys
        import torch
        import torch.nn.functional as F

        with open({str(pickled)!r}, "rb") as f:
            model = pickle.load(f)
        x = torch.randn(4, 16) + 5
        out = model(x)
        print(json.dumps([
            sys.modules["flashhub.acme.silu_layers.v1.layers"].CALLS,
            torch.allclose(out, F.silu(x[..., :8]) * x[..., 8:]),
        ]))
    """
    calls, as_kernel = json.loads(run_python(textwrap.dedent(unpickle_and_run), cwd=tmp_path))
    return calls, as_kernel


def test_a_pickled_model_of_hugging_face_marked_layers_runs_its_kernels_in_a_new_process(
    cdn: CdnServer, tmp_path: Path
) -> None:
    assert run_unpickled_elsewhere(cdn, tmp_path, HUB_MARKED_PY) == (["cdn"], True)


def test_a_class_marked_only_where_it_was_pickled_runs_its_kernel_where_it_is_unpickled(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """A third-party class marked with ``replace_kernel_forward_from_hub`` by the program
    that pickled the model: the program that loads it does not mark it."""
    marking = 'replace_kernel_forward_from_hub(SiluAndMul, "SiluAndMul")'
    assert run_unpickled_elsewhere(cdn, tmp_path, UNMARKED_PY, marking) == (["cdn"], True)


def test_a_hugging_face_marked_layer_left_on_its_forward_holds_nothing_bound(
    x: torch.Tensor,
) -> None:
    """As Hugging Face kernels leaves it: its class's forward is the original, and a bound
    method of a function of its own (its marked functions' forward) would not pickle."""
    model = nn.Sequential(HfSiluAndMul(), HfBlock())
    kernelize(model, mode=Mode.INFERENCE, device="cpu")  # nothing mapped
    for module in (model[0], model[1]._kernel_funcs["zero_half"]):
        assert not {"forward", "_kernel_repo"} & set(vars(module))
    clone = pickle.loads(pickle.dumps(model))
    assert torch.allclose(clone[0](x), reference_silu_and_mul(x))


SCRIPTABLE_LAYERS_PY = """
import torch
import torch.nn.functional as F
from torch import nn


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]
"""


@pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("marked", [HubSiluAndMul, HfSiluAndMul], ids=["here", "hugging-face"])
def test_a_kernelized_model_traces_scripts_and_exports(
    tmp_path: Path, x: torch.Tensor, marked: type[nn.Module]
) -> None:
    """What docs/layers.md says of TorchScript and torch.export, for a kernel layer that
    TorchScript can compile, with what kernelize keeps on each module it bound."""
    package = tmp_path / "scriptable_layers"
    package.mkdir()
    (package / "__init__.py").write_text("from . import layers\n")
    (package / "layers.py").write_text(SCRIPTABLE_LAYERS_PY)
    repo = LocalLayerRepository(package, "SiluAndMul")
    model = nn.Sequential(marked())
    with use_kernel_mapping({"SiluAndMul": {"cpu": repo}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    expected = reference_silu_and_mul(x)
    assert torch.allclose(torch.jit.trace(model, x)(x), expected)
    assert torch.allclose(torch.jit.script(model)(x), expected)
    assert torch.allclose(torch.export.export(model, (x,)).module()(x), expected)
    assert model[0].n_calls == 0  # the original forward never ran
