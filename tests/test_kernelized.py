"""What ``kernelize`` binds, and what keeps it: ``get_kernelized_layers``, the per-module
instances of marked functions (``use_kernelized_func``), and kernelized models that are
copied, pickled, and unpickled in a new process.

The kernels are those of ``test_layers``: local kernel directories, or published to the
loopback CDN; their layers record their kernel's tag in ``CALLS`` when they run.
"""

from __future__ import annotations

import copy
import json
import pickle
import textwrap
import warnings
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import run_python
from flashhub_kernels import (
    KernelizedFunc,
    KernelizedLayer,
    KernelizedLayers,
    Mode,
    get_kernelized_layers,
    kernelize,
    use_kernel_forward_from_hub,
    use_kernel_mapping,
    use_kernelized_func,
)
from flashhub_kernels.errors import KernelWithoutBackwardWarning
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


@use_kernel_forward_from_hub("zero_half")
def zero_half(x: torch.Tensor) -> torch.Tensor:
    """The original: zeros, where the kernel layers Half and NoCompile give the first half."""
    return x[..., : x.shape[-1] // 2] * 0


@use_kernelized_func(zero_half)
class Block(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return zero_half(x)


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) + 5  # no zeros


def is_kernels(out: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether ``out`` is what the kernel layers gave for ``zero_half(x)``."""
    return torch.equal(out, x[..., :8])


# -- get_kernelized_layers -----------------------------------------------------------------


def test_the_types_are_hugging_face_kernels_frozen_dataclasses() -> None:
    assert [f.name for f in fields(KernelizedLayers)] == ["layers", "funcs"]
    assert [f.name for f in fields(KernelizedLayer)] == ["module", "repo"]
    assert [f.name for f in fields(KernelizedFunc)] == ["module", "repo"]
    assert KernelizedLayers() == KernelizedLayers(layers={}, funcs={})
    with pytest.raises(FrozenInstanceError):
        KernelizedLayers().layers = {}  # type: ignore[misc]


def test_get_kernelized_layers_names_what_kernelize_bound(tmp_path: Path) -> None:
    layer_repo = local_layers(tmp_path / "a", "a")
    func_repo = local_layers(tmp_path / "b", "b", layer_name="NoCompile")
    model = nn.Sequential(nn.Linear(16, 16), HubSiluAndMul(), Block(), nn.Sequential(Block()))
    assert get_kernelized_layers(model) == KernelizedLayers()  # not kernelized
    mapping = {"SiluAndMul": {"cpu": layer_repo}, "zero_half": {"cpu": func_repo}}
    with use_kernel_mapping(mapping):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    found = get_kernelized_layers(model)
    assert found.layers == {"1": KernelizedLayer(model[1], layer_repo)}
    assert found.funcs == {
        ("2", "zero_half"): KernelizedFunc(model[2]._kernel_funcs["zero_half"], func_repo),
        ("3.0", "zero_half"): KernelizedFunc(model[3][0]._kernel_funcs["zero_half"], func_repo),
    }
    with use_kernel_mapping({"zero_half": {"cpu": func_repo}}):
        # compiled runs need can_torch_compile: NoCompile falls back, and SiluAndMul is
        # not mapped now; neither is listed
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="cpu")
    assert get_kernelized_layers(model) == KernelizedLayers()


# -- one module's functions ----------------------------------------------------------------


def test_kernelizing_one_module_changes_its_functions_only(tmp_path: Path, x: torch.Tensor) -> None:
    a, b, unmarked = Block(), Block(), nn.Linear(16, 16)
    half = local_layers(tmp_path / "h", "h", layer_name="Half")
    no_compile = local_layers(tmp_path / "n", "n", layer_name="NoCompile")
    with use_kernel_mapping({"zero_half": {"cpu": half}}):
        kernelize(a, mode=Mode.INFERENCE, device="cpu")
        kernelize(unmarked, mode=Mode.INFERENCE, device="cpu")  # nothing marked: nothing changes
    # Outside the mapping, what was not kernelized runs the original.
    assert is_kernels(a(x), x)
    assert torch.equal(b(x), x[..., :8] * 0)
    assert torch.equal(zero_half(x), x[..., :8] * 0)  # the module-level function
    with use_kernel_mapping({"zero_half": {"cpu": no_compile}}):
        kernelize(b, mode=Mode.INFERENCE, device="cpu")
    assert is_kernels(a(x), x) and is_kernels(b(x), x)
    assert calls(no_compile) == ["n"]  # b ran its kernel; a ran Half, which records nothing
    kernelize(
        a, mode=Mode.INFERENCE, device="cpu"
    )  # nothing mapped: a's original again, b keeps its
    assert torch.equal(a(x), x[..., :8] * 0) and is_kernels(b(x), x)
    assert calls(no_compile) == ["n", "n"]


def test_the_functions_of_a_module_follow_it_into_nested_and_compiled_calls(
    tmp_path: Path, x: torch.Tensor
) -> None:
    @use_kernelized_func(zero_half)
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([zero_half(x), self.inner(x)], dim=-1)

    outer = Outer()
    with use_kernel_mapping({"zero_half": {"cpu": local_layers(tmp_path, "h", "Half")}}):
        kernelize(outer.inner, mode=Mode.INFERENCE, device="cpu")  # the inner module's only
    expected = torch.cat([x[..., :8] * 0, x[..., :8]], dim=-1)
    assert torch.equal(outer(x), expected)
    torch.compiler.reset()
    compiled = torch.compile(outer, backend="eager", fullgraph=True)
    assert torch.equal(compiled(x), expected)
    assert torch.equal(zero_half(x), x[..., :8] * 0)  # the routes end with the calls


def test_use_kernelized_func_keeps_a_marked_class_marked(tmp_path: Path, x: torch.Tensor) -> None:
    @use_kernelized_func(zero_half)
    @use_kernel_forward_from_hub("SiluAndMul")
    class Both(SiluAndMul):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) + zero_half(x).sum()

    assert Both.kernel_layer_name == "SiluAndMul"
    layer = Both()
    func_repo = local_layers(tmp_path / "b", "b", layer_name="NoCompile")
    with use_kernel_mapping({"zero_half": {"cpu": func_repo}}):
        kernelize(
            layer, mode=Mode.INFERENCE, device="cpu"
        )  # SiluAndMul unmapped: its original routes
    expected = reference_silu_and_mul(x) + x[..., :8].sum()
    torch.testing.assert_close(layer(x), expected)
    with use_kernel_mapping({"SiluAndMul": {"cpu": local_layers(tmp_path / "a", "a")}}):
        kernelize(layer, mode=Mode.INFERENCE, device="cpu")
    torch.testing.assert_close(layer(x), reference_silu_and_mul(x))
    assert layer.n_calls == 1 and calls(func_repo) == ["b"]


# -- copies and pickles --------------------------------------------------------------------


def test_a_marked_function_pickles_by_name_and_copies_as_a_new_instance() -> None:
    assert pickle.loads(pickle.dumps(zero_half)) is zero_half
    copied = copy.deepcopy(zero_half)
    assert type(copied) is type(zero_half) and copied is not zero_half


def test_a_module_whose_function_is_not_marked_where_it_is_unpickled_says_to_mark_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function marked from outside its module (``lib.double = use_kernel_forward_from_hub(
    ...)(lib.double)``), then a model pickled; the process that loads it has not marked it."""
    (tmp_path / "unmarked_lib.py").write_text("def double(x):\n    return x * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import unmarked_lib

    plain = unmarked_lib.double
    monkeypatch.setattr(unmarked_lib, "double", use_kernel_forward_from_hub("double")(plain))

    @use_kernelized_func(unmarked_lib.double)
    class Doubling(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return unmarked_lib.double(x)

    pickled = pickle.dumps(Doubling()._kernel_funcs["double"])
    unmarked_lib.double = plain  # as a new process that imports the library sees it
    with pytest.raises(pickle.UnpicklingError, match=r"unmarked_lib\.double: it is not a marked"):
        pickle.loads(pickled)


def test_copies_and_pickles_keep_the_forwards_kernelize_bound(
    tmp_path: Path, x: torch.Tensor
) -> None:
    no_backward = local_layers(tmp_path / "a", "a", layer_name="NoBackward")
    func_repo = local_layers(tmp_path / "b", "b", layer_name="NoCompile")
    model = nn.Sequential(HubSiluAndMul(), Block()).eval()  # no training check fires yet
    with use_kernel_mapping({"SiluAndMul": {"cpu": no_backward}, "zero_half": {"cpu": func_repo}}):
        kernelize(model, mode=Mode.INFERENCE, device="cpu")
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        # NoBackward and NoCompile both give the first half
        assert torch.equal(clone[0](x), x[..., :8]) and is_kernels(clone[1](x), x)
        assert clone[0].forward.__self__ is clone[0]
        private = clone[1]._kernel_funcs["zero_half"]
        assert private.forward.__self__ is private is not model[1]._kernel_funcs["zero_half"]
        found = get_kernelized_layers(clone)
        assert (found.layers["0"].repo, found.funcs[("1", "zero_half")].repo) == (
            no_backward,
            func_repo,
        )
    shallow = copy.copy(model[0])
    assert shallow.forward.__self__ is shallow and torch.equal(shallow(x), x[..., :8])
    assert calls(no_backward) == ["a"] * 3 and calls(func_repo) == ["b"] * 2
    # The check of a kernel layer without backward comes along.
    clone = pickle.loads(pickle.dumps(model))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clone.train()(x)
    assert any(issubclass(w.category, KernelWithoutBackwardWarning) for w in caught)


def _zeros(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return x[..., : x.shape[-1] // 2] * 0


@use_kernel_forward_from_hub("Aliased")
class Aliased(nn.Module):
    forward = _zeros


def test_a_bound_forward_named_otherwise_survives_copies_and_pickles(
    tmp_path: Path, x: torch.Tensor
) -> None:
    """Pickle looks a bound method up by its function's name as it unpickles: a kernel
    layer's ``forward = _first_half``, or the original ``forward = _zeros`` bound where
    nothing is mapped, must come back all the same."""
    repo = local_layers(tmp_path, "al", layer_name="Aliased")
    kernelized, original = Aliased(), Aliased()
    with use_kernel_mapping({"Aliased": {"cpu": repo}}):
        kernelize(kernelized, device="cpu")
    kernelize(original, device="cpu")
    for model, expected in ((kernelized, x[..., :8]), (original, x[..., :8] * 0)):
        for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model), copy.copy(model)):
            assert torch.equal(clone(x), expected)


MODELS_PY = """
import torch
from torch import nn

from flashhub_kernels import use_kernel_forward_from_hub, use_kernelized_func


@use_kernel_forward_from_hub("zero_half")
def zero_half(x):
    return x[..., : x.shape[-1] // 2] * 0


@use_kernel_forward_from_hub("SiluAndMul")
class SiluAndMul(nn.Module):
    def forward(self, x):
        return x[..., : x.shape[-1] // 2] * 0


@use_kernelized_func(zero_half)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = SiluAndMul()

    def forward(self, x):
        return torch.cat([self.act(x), zero_half(x)], dim=-1)
"""


def test_a_pickled_kernelized_model_runs_its_kernels_in_a_new_process(
    cdn: CdnServer, tmp_path: Path
) -> None:
    publish_layers(cdn, "acme/silu-layers", "cdn")
    (tmp_path / "models.py").write_text(MODELS_PY)
    pickled = tmp_path / "model.pkl"
    kernelize_and_pickle = f"""
        import pickle
        from flashhub_kernels import LayerRepository, Mode, kernelize, use_kernel_mapping
        from models import Block

        mapping = {{
            "SiluAndMul": {{"cpu": LayerRepository("acme/silu-layers", "SiluAndMul", version=1)}},
            "zero_half": {{"cpu": LayerRepository("acme/silu-layers", "NoCompile", version=1)}},
        }}
        with use_kernel_mapping(mapping):
            model = kernelize(Block(), mode=Mode.INFERENCE, device="cpu")
        with open({str(pickled)!r}, "wb") as f:
            pickle.dump(model, f)
    """
    run_python(textwrap.dedent(kernelize_and_pickle), cwd=tmp_path)
    unpickle_and_run = f"""
        import json, pickle, sys
        import torch
        import torch.nn.functional as F
        from flashhub_kernels import get_kernelized_layers

        with open({str(pickled)!r}, "rb") as f:
            model = pickle.load(f)  # no mapping in this process
        x = torch.randn(4, 16) + 5
        out = model(x)
        expected = torch.cat([F.silu(x[..., :8]) * x[..., 8:], x[..., :8]], dim=-1)
        found = get_kernelized_layers(model)
        print(json.dumps([
            sys.modules["flashhub.acme.silu_layers.v1.layers"].CALLS,
            torch.allclose(out, expected),
            [str(r.repo) for r in (*found.layers.values(), *found.funcs.values())],
        ]))
    """
    kernel_calls, as_kernels, repos = json.loads(
        run_python(textwrap.dedent(unpickle_and_run), cwd=tmp_path)
    )
    assert kernel_calls == ["cdn", "cdn"] and as_kernels
    assert repos == ["acme/silu-layers@v1"] * 2
