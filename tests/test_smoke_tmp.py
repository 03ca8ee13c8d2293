from trees import write_kernel, local_variant
import flashhub_kernels as fk

def test_smoke(cdn):
    write_kernel(cdn.root, "acme/tensor-tricks", 1)
    write_kernel(cdn.root, "acme/tensor-tricks", 2)
    import flashhub.acme.tensor_tricks.v1 as k
    from flashhub.acme.tensor_tricks import v1, v2
    assert k is v1 and v1 is not v2
    assert k.marker() == f"acme/tensor-tricks@v1:{local_variant()}"
    assert v2.marker().endswith(local_variant()) and "v2" in v2.marker()
    assert fk.get_kernel("acme/tensor-tricks", version=1) is k
    print(cdn.gets())
    print(fk.get_loaded_kernels())
