"""The GPU layer, below the ops and everything that reaches a GPU; it imports nothing of autotune but
core/.

- driver.py: the one binding of the CUDA driver (libcuda is opened there and nowhere else).
- geometry.py: a kernel's launch geometry (Launch), what one launch takes besides its addresses
  (KernelCall), and the thread-block cluster sizes this machine's GPUs run.
- tma.py: the tensor-map encoder of the TMA kernels.
- device.py: a GPU's state in the calling process: its primary context, loaded kernels, split-K scratch
  per stream and tensor-map slots (Device).
- plan.py: one kernel bound to its geometry and arguments, launched by one driver call (LaunchPlan).

The launch path (runtime/) runs on these, and so does the tuning worker (measure/worker/runner.py):
every candidate is loaded by a Device and launched by a LaunchPlan, as Runtime.call launches it.
"""
