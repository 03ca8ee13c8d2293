"""Build the example kernels and check each built package, loaded straight from build/.

Loads every package with importlib under a made-up name (as the client loads them under
``flashhub.<org>.<pkg>.v<N>``), so only relative imports inside the packages work.
Exits non-zero on the first failed check. A stand-in until the real tests exist.
"""

from __future__ import annotations

import importlib.util
import inspect
import pickle
import re
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

sys.dont_write_bytecode = True  # keep __pycache__ out of the build dirs (they get published)

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import torch  # noqa: E402
from torch import nn  # noqa: E402

import _buildlib as bl  # noqa: E402
import build_all  # noqa: E402


def check(cond: object, message: str) -> None:
    """Fail with ``message`` unless ``cond``."""
    if not cond:
        raise AssertionError(message)


def load(pkg_dir: Path, name: str) -> ModuleType:
    """Import the package in ``pkg_dir`` as module ``name``."""
    spec = importlib.util.spec_from_file_location(
        name, pkg_dir / "__init__.py", submodule_search_locations=[str(pkg_dir)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def check_no_self_import(pkg_dir: Path, py_pkg: str) -> None:
    """Kernel packages may import only themselves relatively (they load under other names)."""
    pattern = re.compile(rf"^\s*(from|import)\s+{py_pkg}\b", re.M)
    for path in pkg_dir.glob("*.py"):
        check(not pattern.search(path.read_text()), f"{path}: absolute self-import")


def check_native_files(pkg: ModuleType, pkg_dir: Path) -> None:
    """Check that the package holds exactly one ``.so``, named ``<NAMESPACE>.so``."""
    sos = sorted(p.name for p in pkg_dir.glob("*.so"))
    check(sos == [f"{pkg.NAMESPACE}.so"], f"{pkg_dir}: .so files {sos} != [{pkg.NAMESPACE}.so]")
    check(hasattr(torch.ops, pkg.NAMESPACE), f"torch.ops.{pkg.NAMESPACE} is missing")
    prefixed = pkg.add_op_namespace_prefix("x")
    check(prefixed == f"{pkg.NAMESPACE}::x", f"add_op_namespace_prefix gave {prefixed}")


def check_audio(pkg: ModuleType) -> None:
    """Compare with the reference over shapes and delays, then the input checks."""
    fn, ref = pkg.delayed_codebook_argmax_embed_bf16, pkg.reference_delayed_codebook_argmax_embed
    gen = torch.Generator().manual_seed(0)
    for k, v, d in [(4, 2048, 64), (1, 7, 3), (9, 33, 16), (8, 4096, 1)]:
        logits = torch.randn(k, v, generator=gen).to(torch.bfloat16)
        codebook = torch.randn(k, v, d, generator=gen).to(torch.bfloat16)
        for delay in sorted({0, 1, k - 1, k, k + 3, 2**62}):
            boc = int(torch.randint(v, (1,), generator=gen))
            codes, emb = fn(logits, codebook, delay, boc)
            want_codes, want_emb = ref(logits, codebook, delay, boc)
            check(codes.dtype == torch.int64 and codes.shape == (k,), f"codes {codes.shape}")
            check(emb.dtype == torch.bfloat16 and emb.shape == (k, d), f"emb {emb.shape}")
            check(torch.equal(codes, want_codes), f"codes differ K={k} V={v} delay={delay}")
            check(torch.equal(emb, want_emb), f"emb differs K={k} V={v} delay={delay}")
            check(bool((codes[delay + 1 :] == boc).all()), "rows after delay must be boc")
    # Ties go to the first index and NaN wins, as in torch.argmax; strided inputs work.
    logits = torch.zeros(3, 5, dtype=torch.bfloat16)
    logits[1, 3] = float("nan")
    logits[2, 1] = logits[2, 4] = 2.0
    codebook = torch.randn(3, 5, 4).to(torch.bfloat16)
    codes, emb = fn(logits, codebook, 5, 0)
    check(codes.tolist() == [0, 3, 1], f"ties/NaN: {codes.tolist()}")
    wide = torch.zeros(3, 10, dtype=torch.bfloat16)
    wide[:, ::2] = logits
    strided_codebook = codebook.transpose(1, 2).contiguous().transpose(1, 2)
    codes, emb2 = fn(wide[:, ::2], strided_codebook, 5, 0)
    check(codes.tolist() == [0, 3, 1] and torch.equal(emb, emb2), "strided inputs")
    empty = fn(torch.empty(0, 5, dtype=torch.bfloat16), torch.empty(0, 5, 2).bfloat16(), 0, 1)
    check(empty[0].shape == (0,) and empty[1].shape == (0, 2), "K = 0")
    bad = [
        ((logits.float(), codebook, 0, 0), TypeError),
        ((logits, codebook[:, :4], 0, 0), ValueError),
        ((logits[0], codebook, 0, 0), ValueError),
        ((logits, codebook, -1, 0), ValueError),
        ((logits, codebook, 0, 5), ValueError),
        ((logits, codebook, 0, -1), ValueError),
        ((logits, codebook.to("meta"), 0, 0), ValueError),
    ]
    for args, exc in bad:
        for f in (fn, ref):
            try:
                f(*args)
            except exc as e:
                check(str(e), "empty error message")
            else:
                raise AssertionError(f"{f.__name__} accepted bad input, expected {exc.__name__}")


def check_tensor_tricks(v1: ModuleType, v2: ModuleType) -> None:
    """v1 and v2 in one process: distinct namespaces and results, each matching its reference."""
    check((v1.VERSION, v2.VERSION) == (1, 2), f"VERSION {v1.VERSION}, {v2.VERSION}")
    check(v1.NAMESPACE != v2.NAMESPACE, f"same namespace {v1.NAMESPACE}")
    x = torch.randn(1000, 3)
    for mod in (v1, v2):
        got = mod.scale_shift(x, 2.5)
        check(torch.allclose(got, mod.reference_scale_shift(x, 2.5)), f"v{mod.VERSION} != ref")
        xb = x.bfloat16()
        got_b = mod.scale_shift(xb, 2.5)
        check(
            torch.allclose(got_b.float(), mod.reference_scale_shift(xb, 2.5).float(), atol=0.1),
            f"v{mod.VERSION} bf16",
        )
        recipe = mod.Recipe(alpha=0.5)
        clone = pickle.loads(pickle.dumps(recipe))
        check(clone == recipe and type(clone) is mod.Recipe, "Recipe pickle round trip")
        check(torch.allclose(clone.apply(x), mod.scale_shift(x, 0.5)), "Recipe.apply")
    check(
        torch.allclose(v1.scale_shift(x, 2.0) - v2.scale_shift(x, 2.0), torch.full_like(x, 2)),
        "v1 - v2 should be 2",
    )
    try:
        v1.scale_shift(torch.arange(3), 1.0)
    except TypeError:
        pass
    else:
        raise AssertionError("scale_shift accepted an integer tensor")


def check_silu(pkg: ModuleType) -> None:
    """Layers are pure (no __init__, no extra members) and match the functional forms."""
    module_members = {name for name, _ in inspect.getmembers(nn.Module)}
    x = torch.randn(4, 6, 10)
    for cls in (pkg.layers.SiluAndMul, pkg.layers.GeluTanh):
        check(issubclass(cls, nn.Module) and cls.__init__ is nn.Module.__init__, f"{cls}")
        extra = {name for name, _ in inspect.getmembers(cls)} - module_members
        check(not extra, f"{cls.__name__} has extra members {extra}")
    d = x.shape[-1] // 2
    want = torch.nn.functional.silu(x[..., :d]) * x[..., d:]
    check(torch.allclose(pkg.layers.SiluAndMul()(x), want), "SiluAndMul")
    check(torch.allclose(pkg.silu_and_mul(x), want), "silu_and_mul")
    want = torch.nn.functional.gelu(x, approximate="tanh")
    check(torch.allclose(pkg.layers.GeluTanh()(x), want), "GeluTanh")


def main() -> int:
    """Build (cached), load every package and run the checks."""
    built = {(k.repo_id, k.version): k.build_dir for k in build_all.build_all(verbose=False)}
    cpu = bl.variant_name("cpu")

    audio_root = built["sdq/audio-codebook-primitives", 1]
    for i, variant in enumerate((cpu, bl.UNIVERSAL)):
        pkg_dir = audio_root / variant / "audio_codebook_primitives"
        check_no_self_import(pkg_dir, "audio_codebook_primitives")
        pkg = load(pkg_dir, f"k_test_audio_{i}")
        if variant == cpu:
            check_native_files(pkg, pkg_dir)
            meta = pkg.ops.delayed_codebook_argmax_embed_bf16(
                torch.empty(3, 7, dtype=torch.bfloat16, device="meta"),
                torch.empty(3, 7, 5, dtype=torch.bfloat16, device="meta"),
                1,
                0,
            )
            check(meta[0].shape == (3,) and meta[1].shape == (3, 5), "meta kernel shapes")
        check_audio(pkg)
        print(f"ok  audio-codebook-primitives {variant} ({pkg.NAMESPACE})")

    tt = []
    for version in (1, 2):
        pkg_dir = built["acme/tensor-tricks", version] / cpu / "tensor_tricks"
        check_no_self_import(pkg_dir, "tensor_tricks")
        tt.append(load(pkg_dir, f"k_test_v{version}"))
        check_native_files(tt[-1], pkg_dir)
    check_tensor_tricks(*tt)
    with tempfile.TemporaryDirectory() as tmp:  # the same build from a second path (a copy)
        copy = shutil.copytree(tt[0].__path__[0], Path(tmp) / "tensor_tricks")
        again = load(copy, "k_test_v1_copy")
        check(again.NAMESPACE == tt[0].NAMESPACE and again.VERSION == 1, "copy of v1")
    print(f"ok  tensor-tricks v1 ({tt[0].NAMESPACE}) and v2 ({tt[1].NAMESPACE}) side by side")

    pkg_dir = built["acme/silu-layers", 1] / bl.UNIVERSAL / "silu_layers"
    check_no_self_import(pkg_dir, "silu_layers")
    check_silu(load(pkg_dir, "k_test_silu_v1"))
    print("ok  silu-layers torch-universal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
