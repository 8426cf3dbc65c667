"""Measuring on the GPU: the worker subprocess, timing, the read floor, the vendor baseline."""
