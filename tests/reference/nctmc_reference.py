"""PyTorch reference of libnctmc's model and training loss (docs/dev/design.md).

This file is the independent check of the C library: it spells out the DiT
backbone, the model's outputs and the L_cond loss as plainly as possible, in
any floating type (float64 for fixtures, float32 for benchmarks). The loss is
computed by brute force from its definition -- the Poisson-KL sum of
f(Rhat_j, lambda_theta r_j) over every j != i, with Rhat built from the
forward rate and q_{t|0} -- never from the closed forms that the C headers use.

The model is written functionally: parameters live in an ordered dict
name -> tensor whose names, shapes and order are exactly the C model's
(`tensor_shapes`), so fixtures and checkpoints map one to one.

Run this file to self-test the reference (loss against two other
formulations, the MDLM special case, the closed-form gradients, gradcheck):
    /usr/bin/python3 tests/reference/nctmc_reference.py
"""

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F

PROCESSES = ("uniform", "masked", "mixture")     # nctmc_process values 0, 1, 2
SCHEDULES = ("linear", "cosine", "loglinear")    # nctmc_schedule values 0, 1, 2
TIME_INPUTS = ("t", "log_snr")                  # nctmc_time_input values 0, 1
EXIT_LINKS = ("sigma", "noise_posterior", "denoiser")  # nctmc_exit_link values 0, 1, 2
TIME_FEATURES = 256
ROPE_BASE = 10000.0
LN_EPS = 1e-5


@dataclass
class Config:
    S: int                      # states per position (vocab_size)
    L: int                      # seq_len
    n_layers: int
    d: int                      # d_model
    H: int                      # n_heads
    c: int                      # cond_dim
    n_classes: int = 0          # 0: unconditional
    vocab_pad_multiple: int = 0
    process: str = "uniform"
    schedule: str = "linear"
    mixture_uniform: float = 0.1   # p_u
    schedule_eps: float = 1e-3     # eps of the log-linear schedule
    time_input: str = "t"          # what the time embedding sees: "t" or "log_snr"
    exit_link: str = "sigma"       # "sigma", "noise_posterior" or "denoiser"

    def __post_init__(self):
        assert self.process in PROCESSES and self.schedule in SCHEDULES
        assert self.time_input in TIME_INPUTS and self.exit_link in EXIT_LINKS
        assert self.d % self.H == 0 and (self.d // self.H) % 2 == 0
        assert self.S >= 2

    @property
    def V(self):
        m = self.vocab_pad_multiple
        return (self.S + m - 1) // m * m if m > 1 else self.S

    @property
    def D(self):
        return self.d // self.H

    @property
    def F(self):
        return 4 * self.d

    @property
    def mask(self):
        """The mask token m = S - 1, or None for the uniform process."""
        return None if self.process == "uniform" else self.S - 1

    @property
    def n_data(self):
        return self.S if self.process == "uniform" else self.S - 1


def tensor_shapes(cfg):
    """(name, shape) of every parameter, in the C model's order."""
    d, c, V, Fw = cfg.d, cfg.c, cfg.V, cfg.F
    t = [("vocab_embed.embedding", (V, d)),
         ("sigma_map.mlp.0.weight", (c, TIME_FEATURES)),
         ("sigma_map.mlp.0.bias", (c,)),
         ("sigma_map.mlp.2.weight", (c, c)),
         ("sigma_map.mlp.2.bias", (c,))]
    if cfg.n_classes > 0:
        t.append(("label_embed.embedding", (cfg.n_classes + 1, c)))
    for k in range(cfg.n_layers):
        p = "blocks.%d." % k
        t += [(p + "norm1.weight", (d,)),
              (p + "attn_qkv.weight", (3 * d, d)),
              (p + "attn_out.weight", (d, d)),
              (p + "norm2.weight", (d,)),
              (p + "mlp.0.weight", (Fw, d)),
              (p + "mlp.0.bias", (Fw,)),
              (p + "mlp.2.weight", (d, Fw)),
              (p + "mlp.2.bias", (d,)),
              (p + "adaLN_modulation.weight", (6 * d, c)),
              (p + "adaLN_modulation.bias", (6 * d,))]
    t += [("output_layer.norm_final.weight", (d,)),
          ("output_layer.adaLN_modulation.weight", (2 * d, c)),
          ("output_layer.adaLN_modulation.bias", (2 * d,)),
          ("output_layer.linear.weight", (V, d)),
          ("output_layer.linear.bias", (V,)),
          ("output_layer.rate_head.weight", (1, d)),
          ("output_layer.rate_head.bias", (1,))]
    return t


def random_params(cfg, generator, dtype=torch.float64):
    """Every tensor random (the normally zero-initialised adaLN, output and
    rate tensors included, so that every gradient is non-trivial), scaled so
    that activations stay O(1). Values are float32-representable, so a float32
    copy is exactly the same model."""
    def u(shape, scale):
        x = (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * scale
        return x.to(torch.float32).to(dtype)

    p = OrderedDict()
    for name, shape in tensor_shapes(cfg):
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") \
                or name.endswith("norm_final.weight"):
            p[name] = 1.0 + u(shape, 0.25)
        elif name.endswith(".bias"):
            p[name] = u(shape, 0.2)
        elif name.endswith("embedding"):
            p[name] = u(shape, 1.0)
        elif "adaLN_modulation" in name:
            p[name] = u(shape, 1.0 / math.sqrt(shape[1]))
        elif name.endswith("attn_qkv.weight"):
            # a little sharper than the default so attention is not flat
            p[name] = u(shape, 2.0 / math.sqrt(shape[1]))
        else:  # linear weights: uniform +-sqrt(3/fan_in) gives unit-variance outputs
            p[name] = u(shape, math.sqrt(3.0 / shape[1]))
    return p


# --------------------------------------------------------------------------
# schedule and forward process
# --------------------------------------------------------------------------

def schedule(cfg, t):
    """(a_t, sigma_t = -a'_t / a_t) for a tensor of times."""
    if cfg.schedule == "linear":
        a = 1.0 - t
        da = -torch.ones_like(t)
    elif cfg.schedule == "cosine":
        a = torch.cos(0.5 * math.pi * t)
        da = -0.5 * math.pi * torch.sin(0.5 * math.pi * t)
    else:
        k = 1.0 - cfg.schedule_eps
        a = 1.0 - k * t
        da = -k * torch.ones_like(t)
    return a, -da / a


def prior(cfg, dtype=torch.float64, device=None):
    """pi over the S states."""
    S = cfg.S
    if cfg.process == "uniform":
        return torch.full((S,), 1.0 / S, dtype=dtype, device=device)
    pi = torch.zeros(S, dtype=dtype, device=device)
    if cfg.process == "masked":
        pi[S - 1] = 1.0
    else:
        pi[:S - 1] = cfg.mixture_uniform / (S - 1)
        pi[S - 1] = 1.0 - cfg.mixture_uniform
    return pi


def q_t0(cfg, t, x0):
    """q_{t|0}(. | x0) = a e_{x0} + (1 - a) pi, shape [B, L, S]."""
    a, _ = schedule(cfg, t)
    pi = prior(cfg, t.dtype, t.device)
    onehot = F.one_hot(x0, cfg.S).to(t.dtype)
    return a[:, None, None] * onehot + (1.0 - a)[:, None, None] * pi


def sample_xt(cfg, t, x0, generator):
    q = q_t0(cfg, t.double(), x0)
    B, L, S = q.shape
    flat = torch.multinomial(q.reshape(B * L, S), 1, generator=generator)
    return flat.reshape(B, L)


# --------------------------------------------------------------------------
# the DiT backbone
# --------------------------------------------------------------------------

def linear(x, w, b=None):
    y = x @ w.transpose(0, 1)
    return y if b is None else y + b


def silu(x):
    return x * torch.sigmoid(x)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w):
    """LayerNorm over the last axis, no bias, biased variance, eps 1e-5."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + LN_EPS) * w


def modulate(x, shift, scale):
    """x [B, L, d]; shift, scale [B, d] broadcast over positions."""
    return x * (1.0 + scale[:, None, :]) + shift[:, None, :]


def timestep_features(t, dtype):
    half = TIME_FEATURES // 2
    k = torch.arange(half, dtype=dtype, device=t.device)
    freqs = torch.exp(-math.log(10000.0) * k / half)
    arg = t.to(dtype)[:, None] * freqs[None, :]
    return torch.cat([torch.cos(arg), torch.sin(arg)], dim=-1)


def rotary(x, L, dtype):
    """NeoX half-split rotary on x [B, H, L, D] at positions 0 .. L-1."""
    D = x.shape[-1]
    half = D // 2
    a = torch.arange(half, dtype=dtype, device=x.device)
    inv_freq = ROPE_BASE ** (-2.0 * a / D)
    angle = torch.arange(L, dtype=dtype, device=x.device)[:, None] * inv_freq[None, :]   # [L, D/2]
    cos, sin = torch.cos(angle), torch.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(qkv, cfg):
    """qkv [B, L, 3d] -> [B, L, d]: rotary q, k; full bidirectional softmax."""
    B, L, _ = qkv.shape
    H, D = cfg.H, cfg.D
    qkv = qkv.reshape(B, L, 3, H, D)
    q = qkv[:, :, 0].transpose(1, 2)     # [B, H, L, D]
    k = qkv[:, :, 1].transpose(1, 2)
    v = qkv[:, :, 2].transpose(1, 2)
    q = rotary(q, L, qkv.dtype)
    k = rotary(k, L, qkv.dtype)
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D), dim=-1)
    y = att @ v                          # [B, H, L, D]
    return y.transpose(1, 2).reshape(B, L, H * D)


def time_input(cfg, t):
    """What the time embedding sees: t, or log(a_t / (1 - a_t)) clamped to
    [-30, 30], computed in float64 and rounded to float32 as the C library
    hands it to the backend."""
    if cfg.time_input == "t":
        return t
    t64 = t.to(torch.float64)
    a, _ = schedule(cfg, t64)
    v = torch.clamp(torch.log(a) - torch.log1p(-a), -30.0, 30.0)
    return v.to(torch.float32).to(t.dtype)


def conditioning(p, cfg, t, labels):
    """cond [B, c] from the time (and the label)."""
    dtype = p["vocab_embed.embedding"].dtype
    a = linear(timestep_features(time_input(cfg, t), dtype), p["sigma_map.mlp.0.weight"],
               p["sigma_map.mlp.0.bias"])
    a = linear(silu(a), p["sigma_map.mlp.2.weight"], p["sigma_map.mlp.2.bias"])
    cond = silu(a)
    if cfg.n_classes > 0:
        if labels is None:
            labels = torch.full((t.shape[0],), cfg.n_classes, dtype=torch.long, device=t.device)
        cond = cond + p["label_embed.embedding"][labels.long()]
    else:
        assert labels is None
    return cond


def dit_block(p, k, cfg, x, cond):
    pre = "blocks.%d." % k
    mod = linear(cond, p[pre + "adaLN_modulation.weight"], p[pre + "adaLN_modulation.bias"])
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod.chunk(6, dim=-1)

    h = modulate(layer_norm(x, p[pre + "norm1.weight"]), shift_msa, scale_msa)
    y = attention(linear(h, p[pre + "attn_qkv.weight"]), cfg)
    x = x + gate_msa[:, None, :] * linear(y, p[pre + "attn_out.weight"])

    h = modulate(layer_norm(x, p[pre + "norm2.weight"]), shift_mlp, scale_mlp)
    m = gelu_tanh(linear(h, p[pre + "mlp.0.weight"], p[pre + "mlp.0.bias"]))
    m = linear(m, p[pre + "mlp.2.weight"], p[pre + "mlp.2.bias"])
    return x + gate_mlp[:, None, :] * m


def forward(p, cfg, x_t, t, labels=None):
    """The backbone: jump logits [B, L, V] and the exit-rate head h [B, L]."""
    cond = conditioning(p, cfg, t, labels)
    x = p["vocab_embed.embedding"][x_t.long()]
    for k in range(cfg.n_layers):
        x = dit_block(p, k, cfg, x, cond)
    mod = linear(cond, p["output_layer.adaLN_modulation.weight"],
                 p["output_layer.adaLN_modulation.bias"])
    shift, scale = mod.chunk(2, dim=-1)
    u = modulate(layer_norm(x, p["output_layer.norm_final.weight"]), shift, scale)
    logits = linear(u, p["output_layer.linear.weight"], p["output_layer.linear.bias"])
    h = linear(u, p["output_layer.rate_head.weight"], p["output_layer.rate_head.bias"])[..., 0]
    return logits, h


# --------------------------------------------------------------------------
# the model's outputs: exit rate and jump distribution
# --------------------------------------------------------------------------

def model_outputs(cfg, logits, h, x_t, t):
    """log lambda_theta [B, L] and log r_theta(j | x_t) [B, L, S].

    The jump distribution is a softmax over the S - 1 states j != x_t: the
    current token's logit is excluded (its log-probability is -inf), and the
    padding columns S .. V-1 are ignored. Under the denoiser link both come
    from the logits alone (denoiser_outputs)."""
    if cfg.exit_link == "denoiser" and cfg.process != "masked":
        return denoiser_outputs(cfg, logits, x_t, t.to(logits.dtype))
    S = cfg.S
    current = F.one_hot(x_t.long(), S).bool()
    z = logits[..., :S].masked_fill(current, float("-inf"))
    jump_logprobs = torch.log_softmax(z, dim=-1)
    a, sigma = schedule(cfg, t.to(logits.dtype))
    if cfg.process == "masked":
        # exact from the schedule: sigma a / (1 - a) at the mask, 0 elsewhere
        exact = torch.log(sigma * a / (1.0 - a))[:, None].expand_as(h)
        log_rate = torch.where(x_t == cfg.mask, exact,
                               torch.full_like(exact, float("-inf")))
    elif cfg.exit_link == "noise_posterior":
        log_rate = torch.log(noise_posterior_rate(cfg, h, x_t, t.to(logits.dtype)))
    else:
        log_rate = h + torch.log(sigma)[:, None]
    return log_rate, jump_logprobs


def denoiser_outputs(cfg, logits, x_t, t):
    """The denoiser link by its definition: p_k proportional to
    exp(logit_k) q_t(x_t | x0 = k) over the data tokens k estimates x0 (the
    logits a prior that the position's own x_t updates), and the model's
    rates are the conditional reverse rates averaged over it,
    R_j = sum_k p_k Rhat(x_t -> j | x0 = k)."""
    n = cfg.n_data
    i = x_t.long()[..., None]
    log_lik = torch.stack([torch.log(q_t0(cfg, t, torch.full_like(x_t, k)).gather(-1, i)[..., 0])
                           for k in range(n)], dim=-1)              # [B, L, n]
    p = torch.softmax(logits[..., :n] + log_lik, dim=-1)
    rates = 0.0
    for k in range(n):
        x0 = torch.full_like(x_t, k)
        rates = rates + p[..., k:k + 1] * reverse_rates(cfg, x_t, x0, t)
    lam = rates.sum(-1)
    current = F.one_hot(x_t.long(), cfg.S).bool()
    log_r = torch.log(rates.masked_fill(current, 1.0)) - torch.log(lam)[..., None]
    return torch.log(lam), log_r.masked_fill(current, float("-inf"))


def denoiser_link_values(cfg, log_rate, jump_logprobs, t):
    """What the library's workspace holds after the denoiser link's forward
    operation: log(R_j / sigma) (0 at x_t and in the padding) and
    log(lambda / sigma) -- the sigma link's inputs for the same rates."""
    _, sigma = schedule(cfg, t.to(log_rate.dtype))
    log_sigma = torch.log(sigma)[:, None]
    l = log_rate[..., None] + jump_logprobs - log_sigma[..., None]
    l = torch.where(torch.isneginf(jump_logprobs), torch.zeros_like(l), l)
    pad = cfg.V - cfg.S
    if pad:
        l = torch.cat([l, l.new_zeros(l.shape[:-1] + (pad,))], dim=-1)
    return l, log_rate - log_sigma


def noise_posterior_rate(cfg, h, x_t, t):
    """lambda = (1 - nu) lam_c + nu lam_n, nu = sigmoid(h + logit pi_n), by the
    definitions: lam_c and lam_n are the summed conditional reverse rates
    with x0 = x_t and with x0 another data token, pi_n = P(x0 != x_t | x_t)
    by Bayes with x0 uniform over the data tokens; at the mixture's mask
    token the exact rate (the same for every x0)."""
    i = x_t.long()
    n = cfg.n_data
    other = torch.where(i + 1 < n, i + 1, torch.zeros_like(i))   # a data token != i
    lam_c = reverse_rates(cfg, x_t, i.clamp(max=n - 1), t).sum(-1)
    lam_n = reverse_rates(cfg, x_t, other, t).sum(-1)
    a, _ = schedule(cfg, t)
    pi = prior(cfg, t.dtype, t.device)
    # q(x_t = i | x0) summed over the data tokens x0 != i, and at x0 = i
    p_clean = a[:, None] + (1.0 - a)[:, None] * pi[i]
    p_noise = (n - 1) * (1.0 - a)[:, None] * pi[i]
    nu = torch.sigmoid(h + torch.log(p_noise) - torch.log(p_clean))
    lam = (1.0 - nu) * lam_c + nu * lam_n
    if cfg.mask is not None:
        lam = torch.where(i == cfg.mask, lam_n, lam)
    return lam


# --------------------------------------------------------------------------
# the L_cond loss, by brute force
# --------------------------------------------------------------------------

def reverse_rates(cfg, x_t, x0, t):
    """Rhat(i -> j | x0) = R_t(j, i) q(j|x0) / q(i|x0), shape [B, L, S], for
    the current state i = x_t; R_t(j, i) = sigma_t pi_i is the forward rate
    into i. 0 at j = i, and everywhere when pi_i = 0."""
    _, sigma = schedule(cfg, t)
    q = q_t0(cfg, t, x0)                                  # [B, L, S]
    pi = prior(cfg, t.dtype, t.device)
    i = x_t.long()
    pi_i = pi[i]                                          # [B, L]
    q_i = q.gather(-1, i[..., None])[..., 0]              # [B, L]
    into_i = sigma[:, None] * pi_i                        # R_t(j, i), j != i
    safe_q_i = torch.where(pi_i > 0, q_i, torch.ones_like(q_i))
    ratio = torch.where(pi_i > 0, into_i / safe_q_i, torch.zeros_like(q_i))
    rhat = ratio[..., None] * q
    return rhat.masked_fill(F.one_hot(i, cfg.S).bool(), 0.0)


def poisson_kl(a, log_b):
    """f(a, b) = a log(a / b) - a + b elementwise, with f(0, b) = b; log_b may
    be -inf (b = 0, only where a = 0). Written so that no branch produces a
    NaN that autograd could pick up."""
    pos = a > 0
    a_safe = torch.where(pos, a, torch.ones_like(a))
    lb_safe = torch.where(pos, log_b, torch.zeros_like(log_b))
    kl_part = torch.where(pos, a * (torch.log(a_safe) - lb_safe) - a, torch.zeros_like(a))
    return kl_part + torch.exp(log_b)


def lcond_loss(cfg, log_rate, jump_logprobs, x_t, x0, t):
    """Per-position loss l = sum_{j != i, j < S} f(Rhat_j, lambda_theta r_j), [B, L]."""
    rhat = reverse_rates(cfg, x_t, x0, t.to(jump_logprobs.dtype))
    log_b = log_rate[..., None] + jump_logprobs         # log(lambda r_j), -inf at j = i
    return poisson_kl(rhat, log_b).sum(-1)


def model_loss(p, cfg, x_t, x0, t, labels=None):
    """Everything one training step sees: a dict of outputs, with 'mean_loss'
    the objective (the mean over all B * L positions)."""
    logits, h = forward(p, cfg, x_t, t, labels)
    log_rate, jump_logprobs = model_outputs(cfg, logits, h, x_t, t)
    loss = lcond_loss(cfg, log_rate, jump_logprobs, x_t, x0, t)
    if cfg.exit_link == "denoiser" and cfg.process != "masked":
        # the workspace's logits and h are the link's outputs
        logits, h = denoiser_link_values(cfg, log_rate, jump_logprobs, t)
    return {"logits": logits, "rate_h": h, "log_rate": log_rate,
            "jump_logprobs": jump_logprobs, "loss": loss, "mean_loss": loss.mean()}


def loss_and_grads(p, cfg, x_t, x0, t, labels=None):
    """model_loss plus d mean_loss / d every parameter (zeros where a tensor
    does not reach the loss, e.g. the rate head of the masked process)."""
    leaves = OrderedDict((k, v.detach().clone().requires_grad_(True)) for k, v in p.items())
    out = model_loss(leaves, cfg, x_t, x0, t, labels)
    grads = torch.autograd.grad(out["mean_loss"], list(leaves.values()), allow_unused=True)
    g = OrderedDict()
    for (k, v), gk in zip(leaves.items(), grads):
        g[k] = torch.zeros_like(v) if gk is None else gk
    return {k: v.detach() for k, v in out.items()}, g


# --------------------------------------------------------------------------
# efficient loss (for benchmarks): same value, no brute-force f over j
# --------------------------------------------------------------------------

def lcond_loss_fast(cfg, log_rate, jump_logprobs, x_t, x0, t):
    """The same per-position loss via
       l = lambda - lam_hat + sum_j Rhat_j log Rhat_j - sum_j Rhat_j (log lambda + log r_j),
    with Rhat built in closed form and the entropy term detached (it does not
    depend on the parameters). Not for the masked process (log_rate = -inf)."""
    S = cfg.S
    a, sigma = schedule(cfg, t.to(jump_logprobs.dtype))
    pi = prior(cfg, jump_logprobs.dtype, jump_logprobs.device)
    i = x_t.long()
    pi_i = pi[i]
    a_ = a[:, None]
    q_i = a_ * (i == x0) + (1 - a_) * pi_i
    c = sigma[:, None] * pi_i / q_i                               # [B, L]
    cur = F.one_hot(i, S).bool()
    rhat = c[..., None] * ((1 - a_)[..., None] * pi + a_[..., None] * F.one_hot(x0.long(), S))
    rhat = rhat.masked_fill(cur, 0.0)
    lam_hat = rhat.sum(-1)
    with torch.no_grad():
        neg_ent = torch.xlogy(rhat, rhat).sum(-1)
    logp = jump_logprobs.masked_fill(cur, 0.0)
    cross = (rhat * logp).sum(-1) + lam_hat * log_rate
    return torch.exp(log_rate) - lam_hat + neg_ent - cross


# --------------------------------------------------------------------------
# self-tests of the reference
# --------------------------------------------------------------------------

def _python_loss(cfg, log_rate, logp, x_t, x0, t):
    """Scalar Python loops, straight from the definitions (no torch)."""
    B, L = x_t.shape
    out = [[0.0] * L for _ in range(B)]
    pi = prior(cfg).tolist()
    for b in range(B):
        tb = float(t[b])
        if cfg.schedule == "linear":
            a, da = 1 - tb, -1.0
        elif cfg.schedule == "cosine":
            a, da = math.cos(math.pi * tb / 2), -math.pi / 2 * math.sin(math.pi * tb / 2)
        else:
            a, da = 1 - (1 - cfg.schedule_eps) * tb, -(1 - cfg.schedule_eps)
        sigma = -da / a
        for l in range(L):
            i, z0 = int(x_t[b, l]), int(x0[b, l])
            q = [a * (j == z0) + (1 - a) * pi[j] for j in range(cfg.S)]
            lam = math.exp(float(log_rate[b, l]))
            tot = 0.0
            for j in range(cfg.S):
                if j == i:
                    continue
                rj = math.exp(float(logp[b, l, j]))
                rh = sigma * pi[i] * q[j] / q[i] if pi[i] > 0 else 0.0
                bj = lam * rj
                tot += bj if rh == 0 else rh * math.log(rh / bj) - rh + bj
            out[b][l] = tot
    return torch.tensor(out, dtype=torch.float64)


def _decomposed_loss(cfg, log_rate, logp, x_t, x0, t):
    """lam_hat phi(lambda / lam_hat) + lam_hat KL(rhat || r); lambda where lam_hat = 0."""
    rhat = reverse_rates(cfg, x_t, x0, t)
    lam_hat = rhat.sum(-1)
    lam = torch.exp(log_rate)
    safe = torch.where(lam_hat > 0, lam_hat, torch.ones_like(lam_hat))
    rn = rhat / safe[..., None]
    u = lam / safe
    phi = u - 1 - torch.log(u)
    lp = torch.where(rn > 0, logp, torch.zeros_like(logp))
    kl = (torch.xlogy(rn, rn) - rn * lp).sum(-1)
    return torch.where(lam_hat > 0, lam_hat * phi + lam_hat * kl, lam)


def has_every_kind(cfg, x_t, x0):
    """Whether a batch holds every kind of position the loss distinguishes:
    clean and noised ones (uniform); mask and non-mask (masked); clean, mask
    and uniformly noised ones (mixture)."""
    clean, noised = (x_t == x0), (x_t != x0)
    if cfg.process == "uniform":
        return bool(clean.any() and noised.any())
    mask = x_t == cfg.mask
    if cfg.process == "masked":
        return bool(mask.any() and (~mask).any())
    # (with p_u = 1 the prior never puts mass on the mask)
    return bool(clean.any() and (mask.any() or cfg.mixture_uniform >= 1.0)
                and (noised & ~mask).any())


def draw_batch(cfg, B, length, generator):
    """Times stratified over (0.05, 0.95) (float32 values), x0 uniform over
    the data tokens, x_t ~ q_{t|0}(. | x0); redrawn until it has every kind
    of position."""
    while True:
        u = torch.rand(B, generator=generator, dtype=torch.float64)
        t = (0.05 + 0.9 * (torch.arange(B, dtype=torch.float64) + u) / B).float().double()
        x0 = torch.randint(0, cfg.n_data, (B, length), generator=generator)
        x_t = sample_xt(cfg, t, x0, generator)
        if has_every_kind(cfg, x_t, x0):
            return x_t, x0, t


def _random_case(cfg, B, seed, labels=True):
    g = torch.Generator().manual_seed(seed)
    p = random_params(cfg, g)
    x_t, x0, t = draw_batch(cfg, B, cfg.L, g)
    lab = None
    if cfg.n_classes > 0 and labels:
        lab = torch.randint(0, cfg.n_classes + 1, (B,), generator=g)
    return p, x_t, x0, t, lab


def self_test():
    torch.manual_seed(0)
    cfgs = [
        Config(S=7, L=5, n_layers=2, d=16, H=2, c=8, process="uniform", schedule="linear"),
        Config(S=7, L=5, n_layers=1, d=16, H=2, c=8, process="masked", schedule="cosine"),
        Config(S=9, L=4, n_layers=1, d=16, H=4, c=8, process="mixture", schedule="loglinear",
               mixture_uniform=0.3, n_classes=3, vocab_pad_multiple=4),
        Config(S=6, L=6, n_layers=1, d=8, H=2, c=4, process="mixture", schedule="cosine",
               mixture_uniform=1.0),
    ]
    for n, cfg in enumerate(cfgs):
        p, x_t, x0, t, lab = _random_case(cfg, 3, 100 + n)
        out, grads = loss_and_grads(p, cfg, x_t, x0, t, lab)
        assert torch.isfinite(out["mean_loss"]), cfg
        assert (out["loss"] >= -1e-12).all()
        for k, g in grads.items():
            assert torch.isfinite(g).all(), k
        # 1. scalar loops
        ref = _python_loss(cfg, out["log_rate"], out["jump_logprobs"], x_t, x0, t)
        e1 = (ref - out["loss"]).abs().max().item()
        assert e1 < 1e-10 * max(1.0, ref.abs().max().item()), e1
        # 2. phi + KL decomposition
        dec = _decomposed_loss(cfg, out["log_rate"], out["jump_logprobs"], x_t, x0, t)
        e2 = (dec - out["loss"]).abs().max().item()
        assert e2 < 1e-10 * max(1.0, ref.abs().max().item()), e2
        # 3. vectorised closed form (not for masked: log_rate = -inf there)
        if cfg.process != "masked":
            fast = lcond_loss_fast(cfg, out["log_rate"], out["jump_logprobs"], x_t, x0, t)
            e3 = (fast - out["loss"]).abs().max().item()
            assert e3 < 1e-10 * max(1.0, ref.abs().max().item()), e3
        # 4. zero exactly at the true rates
        rhat = reverse_rates(cfg, x_t, x0, t)
        lam_hat = rhat.sum(-1)
        ok = lam_hat > 0
        lr_true = torch.log(torch.where(ok, lam_hat, torch.ones_like(lam_hat)))
        lp_true = torch.log(rhat / torch.where(ok, lam_hat, torch.ones_like(lam_hat))[..., None])
        l0 = lcond_loss(cfg, lr_true, lp_true, x_t, x0, t)
        assert l0[ok].abs().max() < 1e-10, l0
        # 5. gradients w.r.t. the heads: dl/dh = lambda - lam_hat,
        #    dl/dz_j = lam_hat r_j - Rhat_j (j != i), 0 at j = i and in the padding
        logits = out["logits"].clone().requires_grad_(True)
        h = out["rate_h"].clone().requires_grad_(True)
        lr_, lp_ = model_outputs(cfg, logits, h, x_t, t)
        l = lcond_loss(cfg, lr_, lp_, x_t, x0, t).sum()
        gz, gh = torch.autograd.grad(l, [logits, h], allow_unused=True)
        r = torch.exp(lp_.detach())
        want_gz = torch.zeros_like(logits)
        want_gz[..., :cfg.S] = lam_hat[..., None] * r - rhat
        assert (gz - want_gz).abs().max() < 1e-9 * (1 + want_gz.abs().max())
        if cfg.process == "masked":
            assert gh is None or gh.abs().max() == 0
        else:
            want_gh = torch.exp(lr_.detach()) - lam_hat
            assert (gh - want_gh).abs().max() < 1e-9 * (1 + want_gh.abs().max())
        # 6. the masked process is MDLM's weighted cross-entropy
        if cfg.process == "masked":
            a, sigma = schedule(cfg, t)
            w = (sigma * a / (1 - a))[:, None].expand_as(out["loss"])   # -a'/(1-a)
            lr_x0 = out["jump_logprobs"].gather(-1, x0[..., None])[..., 0]
            mdlm = torch.where(x_t == cfg.mask, -w * lr_x0, torch.zeros_like(w))
            assert (mdlm - out["loss"]).abs().max() < 1e-10 * (1 + mdlm.abs().max())
            assert (x_t == cfg.mask).any() and (x_t != cfg.mask).any()
            assert grads["output_layer.rate_head.weight"].abs().max() == 0
        print("ok  %-8s %-9s mean_loss=%.6f  (loops %.1e, phi+KL %.1e)"
              % (cfg.process, cfg.schedule, out["mean_loss"].item(), e1, e2))

    # 7. gradcheck of the whole model + loss in float64
    for cfg in [Config(S=5, L=3, n_layers=1, d=8, H=2, c=4, process="uniform",
                       schedule="linear", n_classes=2, vocab_pad_multiple=4),
                Config(S=5, L=3, n_layers=1, d=8, H=2, c=4, process="mixture",
                       schedule="cosine", mixture_uniform=0.3),
                Config(S=5, L=3, n_layers=1, d=8, H=2, c=4, process="masked",
                       schedule="loglinear")]:
        p, x_t, x0, t, lab = _random_case(cfg, 2, 7)
        names = list(p.keys())

        def fn(*ps):
            return model_loss(OrderedDict(zip(names, ps)), cfg, x_t, x0, t, lab)["mean_loss"]

        ps = [v.clone().requires_grad_(True) for v in p.values()]
        assert torch.autograd.gradcheck(fn, ps, eps=1e-6, atol=1e-7, rtol=1e-5)
        print("ok  gradcheck %s/%s (%d tensors)" % (cfg.process, cfg.schedule, len(ps)))
    print("nctmc_reference self-test passed")


if __name__ == "__main__":
    self_test()
