"""GPU tests of autotune.patch (run with `pytest -m gpu` on the GPU machine; the transformers cases skip
without it): a tiny transformers Llama in float16, patched against torch's own, eager and under
torch.compile (fullgraph, and mode="reduce-overhead" with its CUDA graphs), fused and not, each within
twice torch's own error from a float32 run of the same model; int4, int8 and fp8 logits against the
model with its weights dequantized; a model patched on the CPU and moved to the GPU; and a greedy generate."""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

IDS = [[1, 17, 33, 250, 9, 48, 101, 7]]


def _llama(dtype: Any = torch.float16, device: str = "cuda") -> Any:
    """Llama's layout at small widths (K = 256 and 512: int4's group 128 fits), tied embeddings."""
    config = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def _logits(model: Any, ids: Any) -> Any:
    with torch.no_grad():
        return model(ids, use_cache=False).logits.float()


def _deviation(got: Any, exact: Any) -> float:
    return float((got - exact).abs().max() / exact.abs().max())


def _launches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the eager launches of patched linears (each goes through autotune.api.linear)."""
    from autotune import api

    calls: list[int] = []
    run = api.linear

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return run(*args, **kwargs)

    monkeypatch.setattr(api, "linear", counted)
    return calls


@pytest.mark.parametrize("rows", [1, 8], ids=["decode", "prefill"])
@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_a_patched_llama_is_as_close_to_float32_as_torch_eager(
    monkeypatch: pytest.MonkeyPatch, fuse: bool, rows: int
) -> None:
    import autotune

    torch_model = _llama()
    ids = torch.tensor(IDS, device="cuda")[:, :rows]
    exact = _logits(_llama(torch.float32), ids)
    theirs = _logits(torch_model, ids)
    ours_model = autotune.patch(copy.deepcopy(torch_model), fuse=fuse)
    assert ours_model.lm_head.weight is ours_model.model.embed_tokens.weight
    launches = _launches(monkeypatch)
    ours = _logits(ours_model, ids)
    assert len(launches) == 1 + 2 * (4 if fuse else 7)  # lm_head, then each layer's products
    assert _deviation(ours, exact) <= 2 * _deviation(theirs, exact) + 1e-4


def _compiled_ops(model: Any, ids: Any, **options: Any) -> tuple[Any, list[str]]:
    """The model's logits under torch.compile(**options), and the autotune ops its graphs call."""
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, **options)
    logits = _logits(compiled, ids)
    targets = (str(node.target).removesuffix(".default") for graph in counter.graphs for node in graph.graph.nodes)
    return logits, [target for target in targets if target.startswith("autotune.")]


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_a_patched_llama_compiles_fullgraph_with_our_ops(fuse: bool) -> None:
    import autotune

    torch._dynamo.reset()
    torch_model = _llama()
    ids = torch.tensor(IDS, device="cuda")[:, :1]
    exact, theirs = _logits(_llama(torch.float32), ids), _logits(torch_model, ids)
    ours, ops = _compiled_ops(autotune.patch(copy.deepcopy(torch_model), fuse=fuse), ids, fullgraph=True)
    assert ops.count("autotune.linear") == 1 + 2 * (4 if fuse else 7), ops
    assert _deviation(ours, exact) <= 2 * _deviation(theirs, exact) + 1e-4


def test_a_fused_llama_replays_in_cuda_graphs_with_new_inputs() -> None:
    import autotune

    torch._dynamo.reset()
    torch_model = _llama()
    ours_model = autotune.patch(copy.deepcopy(torch_model), fuse=True)
    compiled = torch.compile(ours_model, mode="reduce-overhead", fullgraph=True)
    for step in range(4):  # recorded, then replayed with other tokens each time
        ids = torch.tensor([[(7 * step + 3) % 512]], device="cuda")
        got, want = _logits(compiled, ids), _logits(torch_model, ids)
        assert _deviation(got, want) < 1e-2, step
    assert ours_model.model.layers[0].self_attn.q_proj.fused_group.state is None


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_int4_logits_match_the_dequantized_model_eager_and_compiled(fuse: bool) -> None:
    import autotune
    from autotune.model.modules import Int4Linear

    torch._dynamo.reset()
    model = autotune.patch(_llama(), "int4", group=128, fuse=fuse)
    assert isinstance(model.model.layers[0].mlp.down_proj, Int4Linear)
    ids = torch.tensor(IDS, device="cuda")
    decode = ids[:, :1]
    eager, eager_prefill = _logits(model, decode), _logits(model, ids)
    compiled, ops = _compiled_ops(model, decode, fullgraph=True)
    assert ops.count("autotune.qgemm") == 2 * (4 if fuse else 7)  # the tied lm_head stays in float
    dequantized = autotune.unpatch(model)  # F.linear on the values the int4 kernels multiply by
    want, want_prefill = _logits(dequantized, decode), _logits(dequantized, ids)
    for got, exact in ((eager, want), (eager_prefill, want_prefill), (compiled, want)):
        assert _deviation(got, exact) < 1e-2


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_eight_bit_logits_match_the_dequantized_model_eager_and_compiled(fuse: bool, kind: str) -> None:
    import autotune
    from autotune.model.modules import Int8Linear

    torch._dynamo.reset()
    model = autotune.patch(_llama(), kind, fuse=fuse)
    assert isinstance(model.model.layers[0].mlp.down_proj, Int8Linear)
    ids = torch.tensor(IDS, device="cuda")
    decode = ids[:, :1]
    eager, eager_prefill = _logits(model, decode), _logits(model, ids)
    compiled, ops = _compiled_ops(model, decode, fullgraph=True)
    assert ops.count("autotune.q8gemm") == 2 * (4 if fuse else 7)  # the tied lm_head stays in float
    dequantized = autotune.unpatch(model)  # F.linear on the values the 8-bit kernels multiply by
    want, want_prefill = _logits(dequantized, decode), _logits(dequantized, ids)
    for got, exact in ((eager, want), (eager_prefill, want_prefill), (compiled, want)):
        assert _deviation(got, exact) < 1e-2


def test_a_compiled_int4_prefill_of_more_than_64_tokens_dequantizes_with_our_op() -> None:
    import autotune

    torch._dynamo.reset()
    model = autotune.patch(_llama(), "int4", group=128, sym=False)
    ids = torch.arange(80, device="cuda").remainder(500).unsqueeze(0)  # 80 rows of x a linear
    compiled, ops = _compiled_ops(model, ids, fullgraph=True)
    assert ops.count("autotune.qdequant") == 2 * 7 and "autotune.qgemm" not in ops
    eager = _logits(model, ids)
    want = _logits(autotune.unpatch(model), ids)
    assert _deviation(compiled, want) < 1e-2 and _deviation(eager, want) < 1e-2


def test_a_model_patched_on_the_cpu_runs_our_kernels_once_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune

    torch_model = _llama()
    ours_model = autotune.patch(_llama(device="cpu"), fuse=True).cuda()
    attention = ours_model.model.layers[0].self_attn
    q, k = attention.q_proj.weight, attention.k_proj.weight
    assert k.data_ptr() == q.data_ptr() + q.numel() * q.element_size()  # still views of one storage
    launches = _launches(monkeypatch)
    ids = torch.tensor(IDS, device="cuda")
    assert _deviation(_logits(ours_model, ids), _logits(torch_model, ids)) < 1e-2
    assert len(launches) == 1 + 2 * 4


def test_greedy_generate_runs_on_a_patched_fused_model() -> None:
    import autotune

    model = autotune.patch(_llama(), fuse=True)
    ids = torch.tensor(IDS, device="cuda")
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert out.shape == (1, len(IDS[0]) + 6)
