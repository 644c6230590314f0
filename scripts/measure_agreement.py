"""Measure what training_watchdog.distributed costs: one all_reduce(MAX) of one int vs a step.

    torchrun --nproc_per_node 2 scripts/measure_agreement.py [ROUNDS]

Run with the gloo backend on CPU (NCCL when WATCHDOG_BENCH_BACKEND=nccl and GPUs exist).
Rank 0 prints, for ROUNDS (default 2000) back-to-back agreements and for ROUNDS/10 training
steps of two small MLPs (DDP, batch 64): the median, the 10th and 90th percentiles, in
microseconds. The numbers behind DEFAULT_EVERY (docs/frameworks.md, "How often ranks agree").
"""

import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from stats import quantile  # noqa: E402
from training_watchdog.distributed import torch_any  # noqa: E402


def percentiles(samples_s):
    pick = lambda q: quantile(samples_s, q) * 1e6  # noqa: E731
    return "median %8.1f us   p10 %8.1f   p90 %8.1f   (n=%d)" % (pick(0.5), pick(0.1), pick(0.9), len(samples_s))


def time_it(fn, rounds):
    out = []
    for _ in range(rounds):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    backend = os.environ.get("WATCHDOG_BENCH_BACKEND", "gloo")
    dist.init_process_group(backend)
    torch.set_num_threads(1)
    rank = dist.get_rank()
    for _ in range(50):
        torch_any(False)
    report = ["world size %d, backend %s, torch %s" % (dist.get_world_size(), backend, torch.__version__)]
    report.append("agreement (all_reduce MAX, 1 int): " + percentiles(time_it(lambda: torch_any(rank == 1), rounds)))
    for width in (64, 1024):
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(64, 32), torch.randn(64, 1)

        def step():
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()

        for _ in range(20):
            step()
        params = sum(p.numel() for p in model.parameters())
        report.append("DDP step, MLP %7d params:         " % params + percentiles(time_it(step, max(50, rounds // 10))))
    if rank == 0:
        print("\n".join(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
