"""How quick this GPU machine's host is: the best per-launch time of torch's `add_` on a one-element
tensor (5 rounds of 2,000 launches), the figure docs/deploy.md sets beside the first-call medians.

    python experiments/host_launch.py [LIMIT_US]   # exit 3 where the launch takes LIMIT_US or longer
"""

import sys
import time

import torch

x = torch.zeros(1, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
best = float("inf")
for _ in range(5):
    start = time.perf_counter()
    for _ in range(2000):
        x.add_(1)
    best = min(best, (time.perf_counter() - start) / 2000 * 1e6)
    torch.cuda.synchronize()
print(f"host: torch add_ launch {best:.2f} us")
sys.exit(3 if len(sys.argv) > 1 and best >= float(sys.argv[1]) else 0)
