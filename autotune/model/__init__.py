"""A torch model's linears on autotune's kernels: patch.py decides which nn.Linear modules are patched
and swaps them, modules.py holds what runs in their place, fuse.py runs sibling projections as one,
quantized.py holds QuantizedWeight (an int4 weight as a module, what autotune.quantize makes of a tensor).
Imported by autotune.patch and autotune.unpatch where torch is, never by `import autotune`."""
