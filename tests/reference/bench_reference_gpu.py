"""Times the PyTorch reference model on a CUDA GPU, to set beside
bench/bench_gpu_train.c (libnctmc's CUDA backend) on the same GPU.

    python3 bench_reference_gpu.py [--config paper-small|cpu-small|tiny] [--batch 16]
        [--reps 5] [--warmup 2] [--precision tf32|bf16|both]
        [--attention reference|sdpa|both] [--compile off|on|only]
        [--sample-batch 16] [--sample-steps 16] [--peak-tflops X]

The same model (nctmc_reference.py, float32 master weights), batch and
measurements as the C benchmark:
  forward      the backbone to the logits and the exit-rate head, no autograd;
  train_step   forward + L_cond loss (the vectorised form) + backward, then
               what the trainer does: gradient norm and clipping to 1, AdamW
               (torch.optim.AdamW, foreach), an EMA of the weights;
  sample_step  one tau-leaping step: forward, the jump probability
               1 - exp(-lambda tau) and a draw from r(. | x_t), per step.
--compile adds (on) or runs alone (only) what a PyTorch user would run
for speed: impl=torch-compile, the same model under torch.compile (default
mode) with torch's SDPA attention and AdamW(fused=True); the forward and
the loss (forward, model outputs, L_cond) are compiled, backward runs
through the compiled graph, the optimiser step is the fused kernel.
Compilation happens in the warm-up calls, which are not timed; its time is
printed as compile_s.

Memory: every measurement line carries peak_alloc_mib (the most torch's
allocator held in tensors during it, torch.cuda.max_memory_allocated after
a reset) and device_used_mib (the whole device in use right after it, as
nvidia-smi counts: CUDA context and the allocator's cache included — the
figure to set beside libnctmc's peak_device_mib).

Precision: tf32 (float32 with TF32 tensor-core products, as libnctmc's
"cuda") or bf16 (torch.autocast to bfloat16, as "cuda-bf16"). Attention:
"reference" is the reference's own softmax(Q K^T) V; "sdpa" replaces it with
torch's fused scaled_dot_product_attention (the fair comparison for
cuDNN/flash attention).

FLOPs per token, as the C benchmark counts them: 6 N + 12 n_layers L d with
N = n_layers 12 d^2 + d (V + 1); mfu_bf16 = model FLOP/s / the bf16 dense
peak (989 TFLOP/s for H100 SXM and H200 unless --peak-tflops).

Output, one line per measurement:
  bench=train_step impl=torch precision=bf16 attention=sdpa config=paper-small
        batch=16 ms=... tokens_per_s=... model_tflops=... mfu_bf16=...
Exits 77 (skipped) when torch sees no CUDA device.
"""

import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nctmc_reference as ref  # noqa: E402

CONFIGS = {
    # paper small (docs/model.md, "Reference sizes"): 12 layers, d 768, 12 heads, L 512, V 50304
    "paper-small": dict(S=50257, L=512, n_layers=12, d=768, H=12, c=128, vocab_pad_multiple=128),
    "cpu-small": dict(S=256, L=256, n_layers=6, d=384, H=6, c=128),
    "tiny": dict(S=32, L=32, n_layers=2, d=64, H=2, c=128),
}


def peak_for(name):
    if "H100" in name and "PCIe" in name:
        return 756.0
    if any(k in name for k in ("H100", "H200", "H800", "GH200")):
        return 989.0
    if "A100" in name:
        return 312.0
    return 0.0


def make_batch(cfg, B):
    """bench_gpu_train.c's batch: x0 from a multiplicative hash, every third
    token replaced, times at the centres of B equal bins."""
    N = B * cfg.L
    i = torch.arange(N, dtype=torch.int64)
    x0 = (i * 2654435761) % 2 ** 32 % cfg.S
    noise = (i * 40503) % 2 ** 32 % cfg.S
    x_t = torch.where(i % 3 != 0, x0, noise)
    t = ((torch.arange(B, dtype=torch.float64) + 0.5) / B).float()
    return x_t.reshape(B, cfg.L), x0.reshape(B, cfg.L), t


def sdpa_attention(qkv, cfg):
    """ref.attention with torch's fused kernel for softmax(Q K^T / sqrt(D)) V."""
    B, L, _ = qkv.shape
    H, D = cfg.H, cfg.D
    qkv = qkv.reshape(B, L, 3, H, D)
    q = ref.rotary(qkv[:, :, 0].transpose(1, 2), L, qkv.dtype)
    k = ref.rotary(qkv[:, :, 1].transpose(1, 2), L, qkv.dtype)
    v = qkv[:, :, 2].transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v)
    return y.transpose(1, 2).reshape(B, L, H * D)


def timed(fn, warmup, reps):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    timed.warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="paper-small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", choices=["tf32", "bf16", "both"], default="both")
    ap.add_argument("--attention", choices=["reference", "sdpa", "both"], default="both")
    ap.add_argument("--compile", choices=["off", "on", "only"], default="off")
    ap.add_argument("--sample-batch", type=int, default=16)
    ap.add_argument("--sample-steps", type=int, default=16)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_reference_gpu: skipped: torch %s sees no CUDA device" % torch.__version__)
        return 77
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    peak = args.peak_tflops or peak_for(name)

    cfg = ref.Config(**CONFIGS[args.config], process="uniform", schedule="linear")
    host = ref.random_params(cfg, torch.Generator().manual_seed(0), dtype=torch.float32)
    params = {k: v.to(dev).requires_grad_(True) for k, v in host.items()}
    del host
    x_t, x0, t = (a.to(dev) for a in make_batch(cfg, args.batch))
    torch.set_default_device(dev)  # the reference's own tensors (prior, arange) too

    matmul_params = cfg.n_layers * 12.0 * cfg.d * cfg.d + cfg.d * (cfg.V + 1)
    train_flops = 6.0 * matmul_params + 12.0 * cfg.n_layers * cfg.L * cfg.d
    tokens = args.batch * cfg.L
    print("bench=gpu_device impl=torch torch=%s peak_bf16_tflops=%.1f name=\"%s\""
          % (torch.__version__, peak, name), flush=True)

    opt = torch.optim.AdamW(list(params.values()), lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=True)
    ema = [p.detach().clone() for p in params.values()]
    original_attention = ref.attention

    def memory_fields():
        free, total = torch.cuda.mem_get_info()
        return "peak_alloc_mib=%.0f device_used_mib=%.0f" % (
            torch.cuda.max_memory_allocated() / 2 ** 20, (total - free) / 2 ** 20)

    def report(what, precision, attention, seconds, flops, impl="torch"):
        tf = flops * tokens / seconds * 1e-12
        extra = " compile_s=%.1f" % timed.warmup_s if impl == "torch-compile" else ""
        print("bench=%s impl=%s precision=%s attention=%s config=%s batch=%d ms=%.2f "
              "tokens_per_s=%.1f model_tflops=%.1f mfu_bf16=%.4f %s%s"
              % (what, impl, precision, attention, args.config, args.batch, 1e3 * seconds,
                 tokens / seconds, tf, tf / peak if peak else float("nan"), memory_fields(),
                 extra), flush=True)

    precisions = ["tf32", "bf16"] if args.precision == "both" else [args.precision]
    attentions = ["reference", "sdpa"] if args.attention == "both" else [args.attention]
    if args.compile == "only":
        attentions = []
    for precision in precisions:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16")
        for attention in attentions:
            ref.attention = sdpa_attention if attention == "sdpa" else original_attention

            def forward():
                with torch.no_grad(), amp:
                    ref.forward(params, cfg, x_t, t)

            def train_step():
                opt.zero_grad(set_to_none=True)
                with amp:
                    logits, h = ref.forward(params, cfg, x_t, t)
                log_rate, logp = ref.model_outputs(cfg, logits.float(), h.float(), x_t, t)
                loss = ref.lcond_loss_fast(cfg, log_rate, logp, x_t, x0, t).mean()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
                opt.step()
                with torch.no_grad():  # ema = 0.9999 ema + 0.0001 weights
                    torch._foreach_mul_(ema, 0.9999)
                    torch._foreach_add_(ema, [p.detach() for p in params.values()], alpha=1e-4)

            report("forward", precision, attention, timed(forward, args.warmup, args.reps),
                   train_flops / 3.0)
            report("train_step", precision, attention,
                   timed(train_step, args.warmup, args.reps), train_flops)

            if args.sample_batch > 0:
                xs, _, _ = make_batch(cfg, args.sample_batch)
                xs = xs.to(dev)
                ts = torch.full((args.sample_batch,), 0.5)
                tau = 1.0 / args.sample_steps

                def sample_steps():
                    x = xs.clone()
                    with torch.no_grad(), amp:
                        for _ in range(args.sample_steps):
                            logits, h = ref.forward(params, cfg, x, ts)
                            log_rate, logp = ref.model_outputs(cfg, logits.float(), h.float(),
                                                               x, ts)
                            p_jump = -torch.expm1(-torch.exp(log_rate) * tau)
                            jump = torch.rand_like(p_jump) < p_jump
                            to = torch.multinomial(logp.exp().reshape(-1, cfg.S), 1)
                            x = torch.where(jump, to.reshape(x.shape), x)

                step = timed(sample_steps, 1, args.reps) / args.sample_steps
                print("bench=sample_step impl=torch precision=%s attention=%s config=%s "
                      "method=tau-leaping batch=%d steps=%d ms_per_step=%.3f steps_per_s=%.2f "
                      "tokens_per_s=%.1f"
                      % (precision, attention, args.config, args.sample_batch, args.sample_steps,
                         1e3 * step, 1.0 / step, args.sample_batch * cfg.L / step), flush=True)
        if args.compile != "off":
            bench_compiled(args, cfg, params, x_t, x0, t, precision, report, train_flops)
    ref.attention = original_attention
    return 0


def bench_compiled(args, cfg, params, x_t, x0, t, precision, report, train_flops):
    """The torch.compile variant: SDPA attention, compiled forward and loss,
    fused AdamW, the same clipping and EMA."""
    original_attention = ref.attention
    ref.attention = sdpa_attention
    torch._dynamo.reset()
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16")
    opt = torch.optim.AdamW(list(params.values()), lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, fused=True)
    ema = [p.detach().clone() for p in params.values()]

    def forward_fn(p, x, tt):
        return ref.forward(p, cfg, x, tt)

    def loss_fn(p, x, x_clean, tt):
        logits, h = ref.forward(p, cfg, x, tt)
        log_rate, logp = ref.model_outputs(cfg, logits.float(), h.float(), x, tt)
        return ref.lcond_loss_fast(cfg, log_rate, logp, x, x_clean, tt).mean()

    forward_c = torch.compile(forward_fn)
    loss_c = torch.compile(loss_fn)

    def forward():
        with torch.no_grad(), amp:
            forward_c(params, x_t, t)

    def train_step():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = loss_c(params, x_t, x0, t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        with torch.no_grad():
            torch._foreach_mul_(ema, 0.9999)
            torch._foreach_add_(ema, [p.detach() for p in params.values()], alpha=1e-4)

    # compiling happens in the first calls: at least two warm-ups
    warm = max(args.warmup, 2)
    report("forward", precision, "sdpa", timed(forward, warm, args.reps), train_flops / 3.0,
           impl="torch-compile")
    report("train_step", precision, "sdpa", timed(train_step, warm, args.reps), train_flops,
           impl="torch-compile")
    del opt, ema
    ref.attention = original_attention


if __name__ == "__main__":
    sys.exit(main())
