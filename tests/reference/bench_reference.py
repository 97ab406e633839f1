"""Times the PyTorch reference model on the CPU, to set beside
bench/bench_train_step.c (libnctmc) on the same machine.

    /usr/bin/python3 bench_reference.py [--threads N] [--batch B] [--reps R]
                                        [--warmup W] [--config cpu-small|tiny]

Same model (float32, every tensor random), same batch construction and the
same two measurements as the C benchmark:
  forward     the backbone to the jump logits and the exit-rate head
              (what dit_forward computes), without autograd;
  train_step  forward + L_cond loss + backward to every parameter (what
              dit_loss with gradients computes), the loss in its vectorised
              form (nctmc_reference.lcond_loss_fast), not the brute force;
  sample_step (with --measure sample_step) one tau-leaping step as
              bench/bench_sample_step.c times it: the forward pass,
              the model's rates and jump distribution, each position jumping
              with probability 1 - exp(-lambda tau) to j ~ r, without autograd;
  sample      (with --measure sample) a whole tau-leaping run of --steps
              such steps down the C sampler's default uniform grid (0.999 to
              0.001), each step's tokens feeding the next (what
              bench_sample_step's sample_ms times).
--threads N sets both torch's intra-op threads and OpenBLAS's (which does its
matrix products); OMP_WAIT_POLICY defaults to PASSIVE (see main()). Each
measurement is run `warmup` times, then `reps` times; the median is reported:
  bench=forward impl=torch config=cpu-small threads=2 batch=8 ms=... tokens_per_s=...
"""

import argparse
import os
import statistics
import sys
import time

# torch and the reference are imported in main(), after the thread counts are
# in the environment: Debian's torch does its matrix products in OpenBLAS,
# whose thread count torch.set_num_threads() does not touch.
torch = None
ref = None

CONFIGS = {
    # nctmc_model_config_init(): uniform process, linear schedule
    "cpu-small": dict(S=256, L=256, n_layers=6, d=384, H=6, c=128),
    "tiny": dict(S=32, L=32, n_layers=2, d=64, H=2, c=128),
}


def make_batch(cfg, B):
    """The C benchmark's batch: x0 from a multiplicative hash, every third
    token replaced, times at the centres of B equal bins."""
    N = B * cfg.L
    i = torch.arange(N, dtype=torch.int64)
    x0 = (i * 2654435761) % 2 ** 32 % cfg.S
    noise = (i * 40503) % 2 ** 32 % cfg.S
    x_t = torch.where(i % 3 != 0, x0, noise)
    t = ((torch.arange(B, dtype=torch.float64) + 0.5) / B).float()
    return x_t.reshape(B, cfg.L), x0.reshape(B, cfg.L), t


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="cpu-small")
    ap.add_argument("--measure", default="forward,train_step",
                    help="comma-separated: forward, train_step, sample_step, sample")
    ap.add_argument("--steps", type=int, default=8,
                    help="steps of the 'sample' measurement")
    args = ap.parse_args()
    threads = max(1, args.threads)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    # torch's OpenMP workers otherwise spin after each elementwise op and
    # take the cores from OpenBLAS's threads in the next product: measured
    # 1.5x slower steps on 2 cores. Passive waiting is torch's best setting here.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    global torch, ref
    import torch
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nctmc_reference as ref
    torch.set_num_threads(threads)

    cfg = ref.Config(**CONFIGS[args.config], process="uniform", schedule="linear")
    params = ref.random_params(cfg, torch.Generator().manual_seed(0), dtype=torch.float32)
    for v in params.values():
        v.requires_grad_(True)
    x_t, x0, t = make_batch(cfg, args.batch)

    def forward():
        with torch.no_grad():
            ref.forward(params, cfg, x_t, t)

    def train_step():
        for v in params.values():
            v.grad = None
        logits, h = ref.forward(params, cfg, x_t, t)
        log_rate, jump_logprobs = ref.model_outputs(cfg, logits, h, x_t, t)
        loss = ref.lcond_loss_fast(cfg, log_rate, jump_logprobs, x_t, x0, t).mean()
        loss.backward()

    gen = torch.Generator().manual_seed(1)
    tau = 1.0 / 128.0

    def tau_step(x, t_now, step_tau):
        with torch.no_grad():
            logits, h = ref.forward(params, cfg, x, t_now)
            log_rate, jump_logprobs = ref.model_outputs(cfg, logits, h, x, t_now)
            p_jump = -torch.expm1(-torch.exp(log_rate) * step_tau)
            jumps = torch.rand(p_jump.shape, generator=gen) < p_jump
            dest = torch.multinomial(torch.exp(jump_logprobs).reshape(-1, cfg.S), 1,
                                     generator=gen).reshape(x.shape)
            return torch.where(jumps, dest, x)

    def sample_step():
        return tau_step(x_t, t, tau)

    # the C sampler's default grid: uniform from t_max = 0.999 to t_min = 0.001
    t_max, t_min = 1.0 - 1e-3, 1e-3
    step_tau = (t_max - t_min) / args.steps

    def sample():
        x = x_t
        for k in range(args.steps):
            t_now = torch.full((args.batch,), t_max - k * step_tau)
            x = tau_step(x, t_now, step_tau)
        return x

    tokens = args.batch * cfg.L
    known = {"forward": forward, "train_step": train_step, "sample_step": sample_step,
             "sample": sample}
    for name in args.measure.split(","):
        if name not in known:
            ap.error("unknown measurement %r" % name)
    for name, fn in ((n, known[n]) for n in args.measure.split(",")):
        ms = median_ms(fn, args.warmup, args.reps)
        steps = " steps=%d" % args.steps if name == "sample" else ""
        print("bench=%s impl=torch config=%s threads=%d batch=%d%s ms=%.2f tokens_per_s=%.1f "
              "torch=%s omp_wait=%s" % (name, args.config, torch.get_num_threads(), args.batch,
                                        steps, ms, tokens / (ms * 1e-3), torch.__version__,
                                        os.environ["OMP_WAIT_POLICY"].lower()), flush=True)


if __name__ == "__main__":
    main()
