"""GPU tests of imported AWQ and GPTQ weights (run with `pytest -m gpu` on the GPU machine): random packed
checkpoint tensors on the GPU converted by autotune.from_awq / from_gptq dequantize to the same float16
bits as the format's own unpack code, and autotune.linear on them stays within twice the error of
F.linear on those values (low-bit weights 1 of 3's bound); a small Llama's linears written as an AWQ
checkpoint folder, loaded and patched into the model with those linears' float weights left on the meta
device, give the logits of the model on the dequantized weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def _nibbles(words: Any) -> Any:
    """int32 (R, C) -> int64 (R, C, 8), nibble i of each word from the low bits up."""
    shifts = torch.arange(0, 32, 4, device=words.device)
    return (words.long()[..., None] >> shifts) & 0xF


def _awq_dequant(qweight: Any, qzeros: Any, scales: Any, group: int) -> Any:
    """AutoAWQ's dequantize_gemm, restated: (K, N) float16 as its float16 arithmetic gives it."""
    reverse = [AWQ_ORDER.index(j) for j in range(8)]
    codes = _nibbles(qweight)[..., reverse].reshape(qweight.shape[0], -1)
    zeros = _nibbles(qzeros)[..., reverse].reshape(qzeros.shape[0], -1)
    q = (codes - zeros.repeat_interleave(group, dim=0)).to(torch.int8)
    return q * scales.repeat_interleave(group, dim=0)


def _gptq_dequant(qweight: Any, qzeros: Any, scales: Any, group: int, v1: bool) -> Any:
    """GPTQModel's dequantize_weight (v1 zeros through its word-wide + 0x11111111), restated."""
    if v1:
        qzeros = ((qzeros.long() + 0x11111111) & 0xFFFFFFFF).to(torch.int64)
    codes = _nibbles(qweight).permute(0, 2, 1).reshape(-1, qweight.shape[1])
    zeros = _nibbles(qzeros).reshape(qzeros.shape[0], -1)[:, : qweight.shape[1]]
    g_idx = torch.arange(codes.shape[0], device=codes.device) // group
    return scales[g_idx] * (codes - zeros[g_idx]).to(torch.int8)


def _random_words(shape: tuple[int, int], gen: Any) -> Any:
    return torch.randint(-(2**31), 2**31, shape, device="cuda", dtype=torch.int64, generator=gen).to(torch.int32)


def _rel_err(y: Any, reference: Any) -> float:
    return float((y.double() - reference).abs().max() / reference.abs().max())


@pytest.mark.parametrize("packing", ["awq", "gptq", "gptq_v2"])
@pytest.mark.parametrize("rows", [1, 16, 65])
def test_imported_weights_match_the_formats_own_dequantization(packing: str, rows: int) -> None:
    """Same float16 bits as the format's unpack code; autotune.linear within 2x F.linear's error."""
    import autotune

    gen = torch.Generator(device="cuda").manual_seed(rows)
    n, k, group = 1000, 3584, 128
    groups = k // group
    scales = (torch.rand(groups, n, device="cuda", generator=gen) * 0.02 + 1e-3).half()
    if packing == "awq":
        qweight, qzeros = _random_words((k, n // 8), gen), _random_words((groups, n // 8), gen)
        qw = autotune.from_awq(qweight, qzeros, scales, group)
        want = _awq_dequant(qweight, qzeros, scales, group)
    else:
        qweight, qzeros = _random_words((k // 8, n), gen), _random_words((groups, n // 8), gen)
        g_idx = (torch.arange(k, device="cuda") // group).int()
        qw = autotune.from_gptq(qweight, qzeros, scales, g_idx, group, checkpoint_format=packing)
        want = _gptq_dequant(qweight, qzeros, scales, group, packing == "gptq")
    assert qw.qweight.is_cuda and not qw.sym
    assert torch.equal(qw.dequantize(), want.T)
    x = torch.randn(rows, k, device="cuda", generator=gen).half()
    reference = x.double() @ want.double()
    ours = autotune.linear(x, qw)
    peer = torch.nn.functional.linear(x, want.T)
    assert torch.isfinite(ours).all()
    assert _rel_err(ours, reference) <= 2 * _rel_err(peer, reference) + 1e-6


def _awq_folder(model: Any, folder: Path) -> dict[str, Any]:
    """Every linear of `model` but the tied lm_head quantized (asymmetric, groups of 128) and written as
    an AutoAWQ "gemm" checkpoint folder; returns the canonical weights by module name."""
    from autotune.ops.qgemm import checkpoints, safetensors
    from autotune.ops.qgemm import format as int4

    tensors, weights = {}, {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            weight = int4.quantize_int4(module.weight.detach().float().cpu().numpy(), 128, sym=False)
            qweight, qzeros, scales = checkpoints.to_awq(weight)
            tensors |= {f"{name}.qweight": qweight, f"{name}.qzeros": qzeros, f"{name}.scales": scales}
            weights[name] = weight
    tensors["model.norm.weight"] = model.model.norm.weight.detach().cpu().numpy()
    names = sorted(tensors)
    safetensors.write(folder / "model-00001-of-00002.safetensors", {n: tensors[n] for n in names[::2]})
    safetensors.write(folder / "model-00002-of-00002.safetensors", {n: tensors[n] for n in names[1::2]})
    config = {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}}
    (folder / "config.json").write_text(json.dumps(config))
    return weights


def test_a_llama_patched_with_a_loaded_awq_folder_gives_the_dequantized_models_logits(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    import autotune
    from autotune.core.errors import AutotuneError
    from autotune.model.modules import Int4Linear
    from autotune.ops.qgemm import format as int4
    from tests.test_gpu_patch import _llama  # Llama's layout at widths int4's group 128 fits, tied embeddings

    model = _llama()
    written = _awq_folder(model, tmp_path)
    loaded = autotune.load_quantized(tmp_path, device="cuda")
    assert sorted(loaded) == sorted(written)
    for name, weight in written.items():
        assert np.array_equal(loaded[name].dequantize(torch.float32).cpu().numpy(), int4.dequantize(weight))
    with pytest.raises(AutotuneError, match="scales are float16"):
        autotune.patch(model.to(torch.bfloat16), weights=loaded)
    model.half()
    with pytest.raises(AutotuneError, match="not a linear"):
        autotune.patch(model, weights={"model.nowhere": next(iter(loaded.values()))})
    assert not any(isinstance(m, Int4Linear) for m in model.modules())  # refused before any change
    for name in loaded:  # as init_empty_weights leaves them: the checkpoint's linears hold no float weight
        linear = model.get_submodule(name)
        linear.weight = torch.nn.Parameter(torch.empty_like(linear.weight, device="meta"))
    autotune.patch(model, weights=loaded)
    assert isinstance(model.model.layers[1].mlp.down_proj, Int4Linear)
    assert "model.layers.0.self_attn.q_proj.weight.qweight" in model.state_dict()
    ids = torch.tensor([[1, 17, 33, 250, 9, 48, 101, 7]], device="cuda")
    with torch.no_grad():
        got = model(ids, use_cache=False).logits.float()
        want = autotune.unpatch(model)(ids, use_cache=False).logits.float()  # F.linear on the dequantized
    assert float((got - want).abs().max() / want.abs().max()) < 1e-2
