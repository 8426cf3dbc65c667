"""How summing an int4 GEMV's products in half pairs before float rounds, against F.linear, on the CPU.

A float16 emulation (numpy) of a CUDA-core int4 GEMV at M = 1 (the `simt` kernel of
experiments/int4_async.cu and of the qgemm-simt branch): codes q - z exact in half, x scaled by a power
of two, each lane's products summed in half over a chain of CHAIN products (16: a 32-code piece's in two
halves; 4: a word's 8), then in float, times the group's scale, the output rounded to half. Beside it
F.linear in float16 on the same dequantized weight (float sums of the half-rounded weights' products,
the output rounded to half). Prints max |y - y64| / max |y64| of each, as bench_lowbit's max_rel_err.

    python experiments/int4_simt_rounding.py [K ...]
"""

from __future__ import annotations

import sys

import numpy as np

import autotune
from autotune.ops.qgemm import format as int4

N, GROUP = 512, 128


def f16(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).astype(np.float16).astype(np.float64)


def f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).astype(np.float32).astype(np.float64)


def chained(codes: np.ndarray, scales: np.ndarray, x: np.ndarray, chain: int) -> np.ndarray:
    """The kernel's sums: per 32-code piece, two halves of 16 products (codes 0-3 and 4-7 of each word)."""
    k = x.size
    e = int(np.frexp(np.abs(x).max())[1])
    xs = f16(x * 2.0**-e)
    acc = np.zeros(codes.shape[0])
    for p in range(k // 32):
        piece = np.zeros(codes.shape[0])
        for half in (0, 4):
            part, run = np.zeros_like(piece), np.zeros_like(piece)
            order = [32 * p + 8 * j + half + h for j in range(4) for h in range(4)]
            for i, col in enumerate(order):
                run = f16(codes[:, col] * xs[col] + run)  # HFMA2: one rounding to half
                if (i + 1) % chain == 0:
                    part, run = f32(part + run), np.zeros_like(run)
            piece = f32(piece + part)
        acc = f32(acc + piece * scales[:, (32 * p) // GROUP])
    return f16(acc * 2.0**e)


def error(y: np.ndarray, exact: np.ndarray) -> float:
    return float(np.abs(y - exact).max() / np.abs(exact).max())


def main(ks: list[int]) -> None:
    rng = np.random.default_rng(1)
    for k in ks:
        w = (rng.standard_normal((N, k)) * k**-0.5).astype(np.float16)  # bench_lowbit's weights
        stored = autotune.quantize(w, "int4", group=GROUP, sym=True)
        weight = int4.dequantize(stored).astype(np.float64)
        codes = int4.unpack_int4(stored.qweight).astype(np.float64) - int4.SYM_OFFSET  # q - z
        scales = np.asarray(stored.scales, dtype=np.float64)  # float16 scales, as the weights' dtype
        x = f16(rng.standard_normal(k))
        exact = weight @ x

        peer = error(f16(f32(f16(weight) @ x)), exact)
        line = ", ".join(f"chain {c}: {error(chained(codes, scales, x, c), exact) / peer:.2f}x" for c in (16, 4, 2))
        print(f"K = {k}: F.linear {peer:.2e}; the kernel's error over F.linear's: {line}", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [3584, 4096, 14336])
