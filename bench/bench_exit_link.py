#!/usr/bin/python3
"""The cost of the exit-rate link in a training step: the same model, batch
and data under the noise-posterior link and under the denoiser link (whose
per-column work grows with the vocabulary), in one run, reported as CPU
seconds per step and their ratio. Two passes over both links (the better of
each is reported), one thread.

    NCTMC_LIBRARY=build/libnctmc.so.1 PYTHONPATH=python \\
        /usr/bin/python3 bench/bench_exit_link.py [--vocab 50257] [--steps 10]
"""
import argparse
import time

import numpy as np

import nctmc


def seconds_per_step(ctx, link, args):
    model = nctmc.Model.create(ctx, vocab_size=args.vocab, seq_len=args.length, n_layers=2,
                               d_model=128, n_heads=4, cond_dim=64, process="uniform",
                               exit_link=link, seed=1)
    trainer = nctmc.Trainer(model, batch_size=args.batch, learning_rate=1e-3, warmup_steps=1,
                            total_steps=args.steps + 1, seed=1)
    data = np.random.default_rng(0).integers(0, args.vocab, size=(args.batch, args.length))
    data = data.astype(np.int32)
    trainer.step(data)   # the first step allocates
    t0 = time.process_time()
    for _ in range(args.steps):
        trainer.step(data)
    return (time.process_time() - t0) / args.steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    ctx = nctmc.Context(backend="cpu", threads=1)
    best = {}
    for link in ["noise_posterior", "denoiser"] * 2:
        s = seconds_per_step(ctx, link, args)
        best[link] = min(best.get(link, s), s)
    print("S=%d, %d x %d positions, 2 layers, d 128, one thread" %
          (args.vocab, args.batch, args.length))
    for link, s in best.items():
        print("  %-16s %.4f s/step" % (link, s))
    print("  denoiser / noise_posterior: %.2f" % (best["denoiser"] / best["noise_posterior"]))


if __name__ == "__main__":
    main()
