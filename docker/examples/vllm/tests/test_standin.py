"""A stand-in for vLLM's test tree, shipped with the wheel export as vLLM's is."""


def test_version():
    import vllm

    assert vllm.__version__.endswith("+standin")
