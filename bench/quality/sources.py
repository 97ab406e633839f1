"""Synthetic token sources with an exact likelihood, for the quality benchmark.

Every source draws sequences of `length` tokens over `vocab` symbols and
computes log p(x) exactly (natural log) for any sequence, so that samples of a
model can be scored by the true distribution. research/quality-benchmark.md describes both
sources in words; the definitions below are the reference.

Both sources put a noise channel on a hidden clean sequence z: each observed
token is x_p = z_p with probability 1 - eps, else a symbol drawn uniformly
from all `vocab` symbols (which may equal z_p). Every sequence therefore has a
positive probability, and -log p(sample) is finite for any sample.

  copychain  A sparse first-order Markov chain (2-3 successors per symbol)
             whose last token copies the first with probability `copy`.
             Likelihood: forward algorithm over the hidden pair (z_0, z_p).
  brackets   Two kinds of brackets nested at most `max_depth` deep and closed
             by the end of the sequence, with content tokens whose
             distribution depends on the enclosing bracket. Likelihood:
             forward algorithm over the hidden bracket stack.
"""
import numpy as np

# The successor table of `copychain`: symbol -> [(successor, probability)].
# Drawn once (numpy default_rng(20240934): 2 or 3 successors other than the
# symbol itself, Dirichlet(2) probabilities rounded to 0.01, the first seed
# from 20240901 on giving an irreducible aperiodic chain with every
# probability >= 0.08) and written out here so that it never changes.
COPYCHAIN_SUCCESSORS = [
    [(10, 0.39), (11, 0.61)],
    [(0, 0.16), (6, 0.67), (10, 0.17)],
    [(1, 0.27), (5, 0.56), (7, 0.17)],
    [(1, 0.60), (7, 0.21), (8, 0.19)],
    [(3, 0.09), (5, 0.91)],
    [(4, 0.19), (6, 0.29), (11, 0.52)],
    [(4, 0.24), (8, 0.76)],
    [(6, 0.56), (8, 0.36), (10, 0.08)],
    [(2, 0.51), (6, 0.15), (10, 0.34)],
    [(2, 0.84), (10, 0.16)],
    [(1, 0.62), (2, 0.38)],
    [(5, 0.36), (9, 0.64)],
]


def _apply_noise(z, vocab, eps, rng):
    noisy = rng.random(z.shape) < eps
    return np.where(noisy, rng.integers(0, vocab, size=z.shape), z).astype(np.int32)


def _draw_rows(probs, rng):
    """One index per row of probs [n, k] (rows sum to 1)."""
    u = rng.random((probs.shape[0], 1))
    idx = (np.cumsum(probs, axis=1) < u).sum(axis=1)
    return np.minimum(idx, probs.shape[1] - 1)


def _plugin_entropy_bits(counts):
    c = counts[counts > 0].astype(np.float64)
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


class Source:
    """What the benchmark needs of a source (see the subclasses)."""

    name = ""
    vocab = 0
    length = 0

    def describe(self):
        raise NotImplementedError

    def sample(self, n, rng):
        raise NotImplementedError

    def noise_matrix(self):
        """C[z, x] = P(x_p = x | z_p = z) = (1 - eps) [x = z] + eps / vocab:
        the noise channel between the hidden clean token and the observed one."""
        return (1.0 - self.eps) * np.eye(self.vocab) + self.eps / self.vocab

    def log_prob(self, x):
        """Exact log p(x) (natural log) of observed sequences x [n, length]."""
        e = self.noise_matrix().T[np.asarray(x, np.int64)]   # e[n, p, z] = C[z, x_p]
        return self.log_marginal(e)

    def log_marginal(self, e):
        """log of the probability of any per-position evidence about the
        hidden clean sequence: sum over z of P(z) prod_p e[n, p, z_p], for
        e [n, length, vocab] (e = C[:, x_p] gives log p(x))."""
        raise NotImplementedError

    def clean_posterior(self, e):
        """P(z_p = z | evidence) [n, length, vocab] for the evidence e of
        log_marginal (forward-backward)."""
        raise NotImplementedError

    def forbidden(self, x):
        """(violations [n], checked [n]): per sequence, how many of the
        checked tokens or transitions the noise-free source never produces."""
        raise NotImplementedError

    def statistics(self, x):
        """Source-specific per-sequence statistics: {name: (hits [n], trials [n])}."""
        raise NotImplementedError

    def log_prob_chunked(self, x, chunk=20000):
        return np.concatenate([self.log_prob(x[i:i + chunk])
                               for i in range(0, len(x), chunk)]) if len(x) else np.zeros(0)


class CopyChain(Source):
    """Hidden clean sequence z: z_0 uniform over the symbols; z_p drawn from
    the successor table given z_{p-1} for p = 1 .. L-2; z_{L-1} = z_0 with
    probability `copy`, else drawn from the table given z_{L-2}. Observed:
    the noise channel with eps on every position."""

    name = "copychain"

    def __init__(self, successors=COPYCHAIN_SUCCESSORS, length=24, copy=0.86, eps=0.01):
        self.vocab = len(successors)
        self.length = length
        self.copy = copy
        self.eps = eps
        self.successors = successors
        t = np.zeros((self.vocab, self.vocab))
        for i, row in enumerate(successors):
            for j, p in row:
                t[i, j] = p
        if not np.allclose(t.sum(axis=1), 1.0):
            raise ValueError("every row of the successor table must sum to 1")
        self.trans = t
        self.init = np.full(self.vocab, 1.0 / self.vocab)

    def describe(self):
        return {"name": self.name, "vocab": self.vocab, "length": self.length,
                "copy": self.copy, "eps": self.eps, "initial": "uniform",
                "successors": {str(i): [[j, p] for j, p in row]
                               for i, row in enumerate(self.successors)}}

    def sample_clean(self, n, rng):
        length = self.length
        z = np.empty((n, length), np.int64)
        z[:, 0] = _draw_rows(np.broadcast_to(self.init, (n, self.vocab)), rng)
        for p in range(1, length - 1):
            z[:, p] = _draw_rows(self.trans[z[:, p - 1]], rng)
        copy = rng.random(n) < self.copy
        step = _draw_rows(self.trans[z[:, length - 2]], rng)
        z[:, length - 1] = np.where(copy, z[:, 0], step)
        return z

    def sample(self, n, rng):
        return _apply_noise(self.sample_clean(n, rng), self.vocab, self.eps, rng)

    def _alphas(self, e):
        """Forward pass over (z_0, z_p): alpha_p[n, a, z] = P(e_0..e_p,
        z_0 = a, z_p = z) for p = 0 .. L-2, each renormalised (the log scales
        summed)."""
        n = e.shape[0]
        alpha = np.zeros((n, self.vocab, self.vocab))
        idx = np.arange(self.vocab)
        alpha[:, idx, idx] = self.init * e[:, 0, :]
        alphas, log_scale = [alpha], np.zeros(n)
        for p in range(1, self.length - 1):
            alpha = (alpha @ self.trans) * e[:, p, None, :]
            s = alpha.sum(axis=(1, 2))
            alpha /= s[:, None, None]
            log_scale += np.log(s)
            alphas.append(alpha)
        return alphas, log_scale

    def _last_term(self, e):
        """term[n, a, z] = P(e_{L-1} | z_0 = a, z_{L-2} = z): the last token
        copies z_0 or steps from z_{L-2}."""
        last = e[:, -1, :]
        return self.copy * last[:, :, None] + \
            (1.0 - self.copy) * (last @ self.trans.T)[:, None, :]

    def log_marginal(self, e):
        alphas, log_scale = self._alphas(e)
        return log_scale + np.log((alphas[-1] * self._last_term(e)).sum(axis=(1, 2)))

    def clean_posterior(self, e):
        """Forward-backward over (z_0, z_p); beta_p[n, a, z] = P(e_{p+1}..
        e_{L-1} | z_0 = a, z_p = z), renormalised per step."""
        n, length, v = e.shape
        alphas, _ = self._alphas(e)
        post = np.empty((n, length, v))
        beta = self._last_term(e)
        for p in range(length - 2, -1, -1):
            beta = beta / beta.sum(axis=(1, 2), keepdims=True)
            joint = (alphas[p] * beta).sum(axis=1)                 # over z_0
            post[:, p] = joint / joint.sum(axis=1, keepdims=True)
            beta = (e[:, p, None, :] * beta) @ self.trans.T
        a = alphas[-1]
        last = e[:, -1, :] * (self.copy * a.sum(axis=2) +
                              (1.0 - self.copy) * (a.sum(axis=1) @ self.trans))
        post[:, -1] = last / last.sum(axis=1, keepdims=True)
        return post

    def forbidden(self, x):
        """Transitions x_{p-1} -> x_p, p = 1 .. L-2, outside the successor
        table (the last position is left out: its copy may jump anywhere)."""
        x = np.asarray(x)
        a, b = x[:, :-2], x[:, 1:-1]
        bad = self.trans[a, b] == 0.0
        return bad.sum(axis=1), np.full(len(x), b.shape[1])

    def statistics(self, x):
        x = np.asarray(x)
        n = len(x)
        return {"copy_rate": ((x[:, -1] == x[:, 0]).astype(np.int64), np.ones(n, np.int64))}


BRACKET_NAMES = ["(", ")", "[", "]", "a", "b", "c", "d", "e", "f", "g", "h"]


class Brackets(Source):
    """Tokens 0 "(", 1 ")", 2 "[", 3 "]", then `n_content` content symbols.
    The hidden clean sequence is generated left to right with a stack of
    open brackets (depth d <= max_depth); at a position with r tokens left
    (this one included):
      - d >= r: close the top bracket (probability 1);
      - otherwise choose among the allowed actions with weights
        open 0.30 (allowed when d < max_depth and d + 1 <= r - 1),
        close 0.25 (when d > 0), content 0.45 (always: d <= r - 1 holds),
        renormalised over the allowed ones;
      - open: the kind given the top: at depth 0 "(" or "[" with 1/2 each;
        inside a kind, the other kind with probability `alternate`;
      - close: the top's closing bracket;
      - content: drawn from the distribution of the enclosing kind
        (`content` below; depth 0: uniform over all content symbols).
    Every sequence is balanced by its end. Observed: the noise channel."""

    name = "brackets"
    W_OPEN, W_CLOSE, W_CONTENT = 0.30, 0.25, 0.45

    def __init__(self, length=24, max_depth=4, alternate=0.7, eps=0.01, content=None):
        if content is None:
            # symbol offsets (0 = "a") -> probability, per enclosing kind
            content = {"top": {k: 1.0 / 8 for k in range(8)},
                       "(": {0: 0.30, 1: 0.25, 2: 0.20, 3: 0.15, 4: 0.10},
                       "[": {3: 0.10, 4: 0.15, 5: 0.20, 6: 0.25, 7: 0.30}}
        self.content = content
        self.n_content = 1 + max(k for d in content.values() for k in d)
        self.vocab = 4 + self.n_content
        self.length = length
        self.max_depth = max_depth
        self.alternate = alternate
        self.eps = eps
        # every stack of depth <= max_depth, as a tuple of kinds (0 "(", 1 "[")
        self.stacks = [()]
        for d in range(max_depth):
            self.stacks += [s + (k,) for s in self.stacks if len(s) == d for k in (0, 1)]
        self.index = {s: i for i, s in enumerate(self.stacks)}
        self.depth = np.array([len(s) for s in self.stacks])
        self.top = np.array([s[-1] if s else -1 for s in self.stacks])
        self._build_tables()

    def describe(self):
        return {"name": self.name, "vocab": self.vocab, "length": self.length,
                "max_depth": self.max_depth, "alternate": self.alternate, "eps": self.eps,
                "weights": {"open": self.W_OPEN, "close": self.W_CLOSE,
                            "content": self.W_CONTENT},
                "content": {kind: {BRACKET_NAMES[4 + k]: p for k, p in d.items()}
                            for kind, d in self.content.items()},
                "tokens": BRACKET_NAMES[:self.vocab]}

    def clean_step(self, stack, remaining):
        """The definition: [(token, probability, next stack)] at a position
        with `remaining` tokens left (this one included)."""
        d = len(stack)
        if d >= remaining:
            return [(1 + 2 * stack[-1], 1.0, stack[:-1])] if d else []
        actions = []
        if d < self.max_depth and d + 1 <= remaining - 1:
            actions.append(("open", self.W_OPEN))
        if d > 0:
            actions.append(("close", self.W_CLOSE))
        actions.append(("content", self.W_CONTENT))
        total = sum(w for _, w in actions)
        out = []
        for kind, w in actions:
            w /= total
            if kind == "open":
                if d == 0:
                    kinds = {0: 0.5, 1: 0.5}
                else:
                    kinds = {stack[-1]: 1.0 - self.alternate, 1 - stack[-1]: self.alternate}
                for k, pk in kinds.items():
                    out.append((2 * k, w * pk, stack + (k,)))
            elif kind == "close":
                out.append((1 + 2 * stack[-1], w, stack[:-1]))
            else:
                dist = self.content["top" if d == 0 else "([" [stack[-1]]]
                for c, pc in dist.items():
                    out.append((4 + c, w * pc, stack))
        return out

    def _build_tables(self):
        """Per position p: prob[p][s, token] and next_state[s, token] (-1:
        never). The next state does not depend on p."""
        n_s, length = len(self.stacks), self.length
        self.prob = np.zeros((length, n_s, self.vocab))
        self.next_state = np.full((n_s, self.vocab), -1, np.int64)
        for p in range(length):
            for i, s in enumerate(self.stacks):
                for tok, pr, nxt in self.clean_step(s, length - p):
                    self.prob[p, i, tok] += pr
                    self.next_state[i, tok] = self.index[nxt]
        # scatter matrix: (state, token) -> next state
        self.scatter = np.zeros((n_s * self.vocab, n_s))
        for i in range(n_s):
            for tok in range(self.vocab):
                if self.next_state[i, tok] >= 0:
                    self.scatter[i * self.vocab + tok, self.next_state[i, tok]] = 1.0

    def sample_clean(self, n, rng):
        state = np.zeros(n, np.int64)
        z = np.empty((n, self.length), np.int64)
        for p in range(self.length):
            z[:, p] = _draw_rows(self.prob[p][state], rng)
            state = self.next_state[state, z[:, p]]
        if (state != 0).any():
            raise AssertionError("a clean sequence ended with open brackets")
        return z

    def sample(self, n, rng):
        return _apply_noise(self.sample_clean(n, rng), self.vocab, self.eps, rng)

    def _alphas(self, e):
        """Forward pass over the stack: alpha_p[n, s] = P(e_0..e_{p-1}, stack
        before position p = s) for p = 0 .. L, each renormalised (the log
        scales summed)."""
        n = e.shape[0]
        alpha = np.zeros((n, len(self.stacks)))
        alpha[:, 0] = 1.0
        alphas, log_scale = [alpha], np.zeros(n)
        for p in range(self.length):
            w = alpha[:, :, None] * self.prob[p][None] * e[:, p, None, :]
            alpha = w.reshape(n, -1) @ self.scatter
            s = alpha.sum(axis=1)
            alpha /= s[:, None]
            log_scale += np.log(s)
            alphas.append(alpha)
        return alphas, log_scale

    def log_marginal(self, e):
        alphas, log_scale = self._alphas(e)
        return log_scale + np.log(alphas[-1][:, 0])

    def clean_posterior(self, e):
        """Forward-backward over the stack; beta_p[n, s] = P(e_p..e_{L-1},
        the stack empty at the end | stack before p = s), renormalised."""
        n, length, v = e.shape
        n_s = len(self.stacks)
        alphas, _ = self._alphas(e)
        post = np.empty((n, length, v))
        beta = np.zeros((n, n_s))
        beta[:, 0] = 1.0
        for p in range(length - 1, -1, -1):
            after = (beta @ self.scatter.T).reshape(n, n_s, v)   # beta at next(s, z)
            step = self.prob[p][None] * e[:, p, None, :] * after   # [n, s, z]
            joint = (alphas[p][:, :, None] * step).sum(axis=1)
            post[:, p] = joint / joint.sum(axis=1, keepdims=True)
            beta = step.sum(axis=2)
            beta /= beta.sum(axis=1, keepdims=True)
        return post

    def _parse(self, x):
        """Reads x with the clean grammar, skipping (and counting) every
        token the clean source could not emit from the current stack."""
        x = np.asarray(x)
        n = len(x)
        state = np.zeros(n, np.int64)
        bad = np.zeros(n, np.int64)
        opens_inside = np.zeros(n, np.int64)
        alternations = np.zeros(n, np.int64)
        for p in range(x.shape[1]):
            tok = x[:, p]
            ok = self.prob[p][state, tok] > 0
            bad += ~ok
            is_open = ok & (tok % 2 == 0) & (tok < 4)
            depth = self.depth[state]
            top = self.top[state]
            inside = is_open & (depth > 0)
            opens_inside += inside
            alternations += inside & (tok // 2 != top)
            state = np.where(ok, self.next_state[state, tok], state)
        return bad, state, opens_inside, alternations

    def forbidden(self, x):
        """Tokens the clean grammar forbids where they stand (wrong or
        premature close, content of the wrong kind, an open with no room
        left), the sequence read with those tokens skipped."""
        bad, _, _, _ = self._parse(x)
        return bad, np.full(len(x), np.asarray(x).shape[1])

    def statistics(self, x):
        _, _, opens_inside, alternations = self._parse(x)
        x = np.asarray(x)
        return {"alternation_rate": (alternations, opens_inside),
                "bracket_share": ((x < 4).sum(axis=1), np.full(len(x), x.shape[1]))}


SOURCES = {"copychain": CopyChain, "brackets": Brackets}


def make_source(name):
    return SOURCES[name]()


# ---------------------------------------------------------------- figures

def bigram_entropy_bits(x):
    """Plug-in entropy of the pooled adjacent pairs (x_p, x_{p+1})."""
    x = np.asarray(x, np.int64)
    v = int(x.max()) + 1
    pairs = x[:, :-1] * v + x[:, 1:]
    return _plugin_entropy_bits(np.bincount(pairs.ravel(), minlength=v * v))


def unigram_entropy_bits(x):
    return _plugin_entropy_bits(np.bincount(np.asarray(x, np.int64).ravel()))


def ratio_with_bootstrap(x, ref, fn, reps=100, seed=0):
    """fn(x) / fn(ref) and the bootstrap standard error of that ratio
    (sequences of x resampled; ref is taken as exact: it is large)."""
    rng = np.random.default_rng(seed)
    base = fn(ref)
    value = fn(x) / base
    boots = [fn(x[rng.integers(0, len(x), len(x))]) / base for _ in range(reps)]
    return value, float(np.std(boots, ddof=1))


def mean_and_se(values):
    v = np.asarray(values, np.float64)
    se = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
    return float(v.mean()), se


def ratio_stat(hits, trials):
    """Pooled rate sum(hits) / sum(trials) and its standard error from the
    spread over sequences (ratio estimator, delta method)."""
    hits = np.asarray(hits, np.float64)
    trials = np.asarray(trials, np.float64)
    total = trials.sum()
    if total == 0:
        return float("nan"), float("nan")
    r = hits.sum() / total
    n = len(hits)
    resid = hits - r * trials
    se = float(np.sqrt(n / max(n - 1, 1) * (resid ** 2).sum()) / total)
    return float(r), se


def source_reference(source, n=200000, seed=12345):
    """The source's own figures, by Monte Carlo over n samples of its exact
    log-likelihood: entropy per token (bits) with its standard error, the
    forbidden share and the source statistics; plus the samples (the
    reference set of the diversity ratios)."""
    rng = np.random.default_rng(seed)
    x = source.sample(n, rng)
    nll_bits = -source.log_prob_chunked(x) / np.log(2.0) / source.length
    h, h_se = mean_and_se(nll_bits)
    fb, fb_se = ratio_stat(*source.forbidden(x))
    stats = {k: ratio_stat(*v) for k, v in source.statistics(x).items()}
    return {"n": n, "seed": seed, "entropy_bits_per_token": h, "entropy_se": h_se,
            "forbidden_share": fb, "forbidden_se": fb_se,
            "statistics": {k: {"value": v[0], "se": v[1]} for k, v in stats.items()},
            "bigram_entropy_bits": bigram_entropy_bits(x),
            "unigram_entropy_bits": unigram_entropy_bits(x)}, x
