"""The one exception type users see: a problem they can fix, shown by the CLI as a single line."""


class AutotuneError(Exception):
    """Bad input or an environment problem; the message names it in one line (CLI exit code 2)."""


class AutotuneWarning(UserWarning):
    """Something the user should know that does not stop the command (the CLI prints one line)."""


# What installs PyCUDA, which tuning, `bench` and the measurement scripts need (the launch path does not).
PYCUDA_HINT = "pip install 'autotune-kernels[cuda]'"
