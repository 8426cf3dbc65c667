"""The vendor library as a tuning candidate: cuBLASLt's algorithms for a problem, timed like our
configs and stored as the trials of the `cublas` family (config {"cublas_algo": rank}), launched on
the caller's stream when they win."""
