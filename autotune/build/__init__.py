"""Kernel source to cubin: nvcc in its own process group, a content-addressed cache checked before use."""
