"""PyTorch DDP (gloo) beside bench/distributed.sh: tokens per second of 1
and N ranks of one thread each training the reference model
(tests/reference/nctmc_reference.py) with the shapes of the script's
nctmc run (the digits data: 17 tokens, 64 positions, 10 classes; 2 layers,
d 128, 4 heads, cond 64, log-SNR time input, noise-posterior exit link;
batch 8 per rank; AdamW, clipping at 1), every tensor random.

    /usr/bin/python3 bench/distributed_torch.py [--ranks N] [--steps S] [--warmup W]

Prints one line: ranks=N tokens_per_s=... step_ms=... (the median step of
rank 0, times N x batch x 64 tokens). A benchmark, not a test.
"""

import argparse
import os
import statistics
import sys
import time

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.dont_write_bytecode = True

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
import nctmc_reference as ref  # noqa: E402

CFG = dict(S=17, L=64, n_layers=2, d=128, H=4, c=64, n_classes=10, process="uniform",
           schedule="linear", time_input="log_snr", exit_link="noise_posterior")


class Model(torch.nn.Module):
    """The reference's parameter dict as a module, so that DDP sees it."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        p = ref.random_params(cfg, torch.Generator().manual_seed(0), dtype=torch.float32)
        self.names = list(p)
        self.p = torch.nn.ParameterList([torch.nn.Parameter(v) for v in p.values()])

    def forward(self, x_t, x0, t, labels):
        params = dict(zip(self.names, self.p))
        logits, h = ref.forward(params, self.cfg, x_t, t, labels)
        log_rate, jump_logprobs = ref.model_outputs(self.cfg, logits, h, x_t, t)
        return ref.lcond_loss_fast(self.cfg, log_rate, jump_logprobs, x_t, x0, t).mean()


def worker(rank, ranks, args, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    cfg = ref.Config(**CFG)
    model = torch.nn.parallel.DistributedDataParallel(Model(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1 + rank)
    B = args.batch
    times = []
    for step in range(args.warmup + args.steps):
        x0 = torch.randint(0, cfg.S, (B, cfg.L), generator=g)
        x_t = torch.where(torch.rand(B, cfg.L, generator=g) < 0.5, x0,
                          torch.randint(0, cfg.S, (B, cfg.L), generator=g))
        t = torch.rand(B, generator=g) * 0.998 + 1e-3
        labels = torch.randint(0, cfg.n_classes, (B,), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x_t, x0, t, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(statistics.median(times))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--port", type=int, default=29517)
    args = ap.parse_args()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(worker, args=(args.ranks, args, out), nprocs=args.ranks,
                       start_method="spawn")
    step = out.get()
    tokens = args.ranks * args.batch * CFG["L"]
    print("ranks=%d tokens_per_s=%.1f step_ms=%.2f torch=%s" % (args.ranks, tokens / step,
                                                               1e3 * step, torch.__version__))


if __name__ == "__main__":
    main()
