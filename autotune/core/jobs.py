"""CompileJob: what nvcc is given to build one kernel.

The op registry makes jobs (autotune.ops.compile_job: an op's kernel source for a config) and the
compiler above it builds them (autotune/build/compiler.py), so the job itself is plain data both
share, here below them: the registry never imports the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileJob:
    name: str  # the extern "C" kernel name inside the cubin
    source: str  # a translation unit that includes a file of kernels/
    arch: str  # "sm_90"
    depends_hash: str  # hash of the kernels/ files the source includes
