"""Our int4 quantizer's reconstruction error beside torchao's affine primitives, on the same weights; writes
results/quantize_error.json.

Run where torch and torchao are installed (the GPU machine: pip install .whl/torchao-*.whl; the CPU works too):
    python scripts/quantize_error.py --out results
Weights: random normal and heavy-tailed (Student's t, 3 degrees of freedom), N x K in the activations' dtype.
Ours is autotune.quantize(W, "int4", group=g, sym=sym), dequantized exactly; torchao's is
choose_qparams_affine / quantize_affine / dequantize_affine (torchao.quantization.quant_primitives) with the
same codes' range: symmetric int [-8, 7] (scale max|w| / 7.5), asymmetric uint [0, 15] with an integer zero,
block (1, g), scales in the weight's dtype. The error of a row is |w - w'| / |w| (Euclidean norms); each case
reports the mean and the max over rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import autotune
from autotune.bench.harness import write_json
from autotune.ops.qgemm.format import dequantize, int4_weight

GROUPS = (32, 64, 128)


def weights(torch: Any, kind: str, n: int, k: int, dtype: Any, device: str) -> Any:
    if kind == "normal":
        w = torch.randn(n, k, device=device)
    else:
        w = torch.distributions.StudentT(torch.tensor(3.0, device=device)).sample((n, k))
    return (0.02 * w).to(dtype)


def ours(w: Any, group: int, sym: bool) -> Any:
    qw = autotune.quantize(w, "int4", group=group, sym=sym)
    return dequantize(int4_weight(qw.qweight, qw.scales, qw.zeros, group))


def torchao_affine(torch: Any, w: Any, group: int, sym: bool) -> Any:
    from torchao.quantization.quant_primitives import (
        MappingType,
        choose_qparams_affine,
        dequantize_affine,
        quantize_affine,
    )

    block = (1, group)
    mapping, codes, low, high = (
        (MappingType.SYMMETRIC, torch.int8, -8, 7) if sym else (MappingType.ASYMMETRIC, torch.uint8, 0, 15)
    )
    scale, zero = choose_qparams_affine(w, mapping, block, codes, low, high, scale_dtype=w.dtype)
    q = quantize_affine(w, block, scale, zero, codes, low, high)
    return dequantize_affine(q, block, scale, zero, codes, low, high, output_dtype=torch.float32)


def row_errors(w: Any, approx: Any) -> tuple[float, float]:
    """Mean and max over rows of |w - w'| / |w|."""
    exact = w.double()
    errors = (exact - approx.double()).norm(dim=1) / exact.norm(dim=1).clamp_min(1e-30)
    return float(errors.mean()), float(errors.max())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for quantize_error.json")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    args = parser.parse_args()
    try:
        import torch
        import torchao
    except ImportError as exc:
        print(f"quantize_error: needs torch and torchao ({exc})", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    rows = []
    print(f"{'weights':10} {'case':6} {'ours mean':>10} {'ours max':>10} {'torchao mean':>12} {'torchao max':>11}")
    for kind in ("normal", "student_t3"):
        w = weights(torch, kind, args.n, args.k, getattr(torch, args.dtype), device)
        for group in GROUPS:
            for sym in (True, False):
                ours_mean, ours_max = row_errors(w, ours(w, group, sym))
                ao_mean, ao_max = row_errors(w, torchao_affine(torch, w, group, sym))
                case = f"g{group}{'' if sym else 'a'}"
                print(f"{kind:10} {case:6} {ours_mean:10.5f} {ours_max:10.5f} {ao_mean:12.5f} {ao_max:11.5f}")
                rows.append(
                    {"weights": kind, "group": group, "sym": sym, "ours_mean": ours_mean, "ours_max": ours_max}
                    | {"torchao_mean": ao_mean, "torchao_max": ao_max}
                )
    report = {"torchao": torchao.__version__, "device": device, "dtype": args.dtype, "n": args.n, "k": args.k}
    path = write_json(args.out / "quantize_error.json", report | {"rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
