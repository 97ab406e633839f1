/*
 * test_eval.c — the NELBO through the public API (nctmc_eval(); the closed
 * forms, medians and nu_hat edges of lib/math/nelbo_math.h and lib/run/ are
 * test_eval_math.c's), against the forward process written again from its
 * definitions (tests/forward_ref.h):
 *
 *  (a) the bound itself, on problems small enough to enumerate (S = 4,
 *      L = 3: 64 states): the exact -log p_theta(x0) of the learned reverse
 *      CTMC from the Kolmogorov equation (RK4 in double on the generator
 *      built from the model's rates at every state), the exact NELBO of
 *      paper Thm. 3.2 in its original (unswapped) form, both integrated
 *      on one grid at two resolutions to measure the quadrature error; the
 *      bound must hold for every x0, be tight where the model is the exact
 *      reverse process, and nctmc_eval()'s Monte Carlo estimate must agree
 *      with the exact NELBO within a few standard errors; the swap of the
 *      theorem's integrand into L_cond + D_t;
 *  (b) the per-bucket rate statistics, the reliability table (against a
 *      brute-force rebuild from the same draws, re-derived with
 *      tests/philox_ref.h, itself checked against Random123's known
 *      answers), cancellation, bad parameters and determinism.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nctmc.h"
#include "forward_ref.h"
#include "philox_ref.h"
#include "test_util.h"

#define LN2 0.69314718055994530942

/* ------------------------------------------------------------------------ */
/* Models                                                                   */
/* ------------------------------------------------------------------------ */

#define S_EX 4
#define L_EX 3
#define N_STATES 64 /* S_EX^L_EX */

static nctmc_context *g_ctx;

static nctmc_model *make_model_link(int process, int schedule, float pu, float eps,
                                    int n_classes, uint64_t seed, nctmc_exit_link link)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    /* the 0.2.0 pair, or 0.3.0's defaults */
    c.exit_link = link;
    c.time_input = link == NCTMC_EXIT_LINK_SIGMA ? NCTMC_TIME_INPUT_T : NCTMC_TIME_INPUT_LOG_SNR;
    c.vocab_size = S_EX;
    c.vocab_pad_multiple = 0;
    c.seq_len = L_EX;
    c.n_layers = 2;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.n_classes = n_classes;
    c.process = (nctmc_process)process;
    c.schedule = (nctmc_schedule)schedule;
    c.mixture_uniform = pu;
    c.schedule_eps = eps;
    c.seed = seed;
    nctmc_model *m = NULL;
    nctmc_status st = nctmc_model_create(g_ctx, &c, &m);
    CHECK(st == NCTMC_OK, "model_create: %s", nctmc_context_last_error(g_ctx));
    return m;
}

/* Most tests here set the rate head to give chosen rates, written for the
 * sigma link (log lambda = h + log sigma_t). */
static nctmc_model *make_model(int process, int schedule, float pu, float eps, int n_classes,
                               uint64_t seed)
{
    return make_model_link(process, schedule, pu, eps, n_classes, seed, NCTMC_EXIT_LINK_SIGMA);
}

static void write_tensor(nctmc_model *m, const char *name, const float *v, int64_t n)
{
    nctmc_status st = nctmc_model_write_tensor(m, name, v, n);
    CHECK(st == NCTMC_OK, "write %s: %s", name, nctmc_model_last_error(m));
}

/* Random values in every tensor (so the output layer and the rate head are
 * not zero and every weight matters); the scale keeps the rates moderate. */
static void randomize(nctmc_model *m, uint64_t seed, float scale)
{
    test_rng rng = test_rng_seed(seed);
    for (int32_t k = 0; k < nctmc_model_n_tensors(m); k++) {
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, k, &info);
        float *v = malloc((size_t)info.n_elements * sizeof *v);
        test_fill_uniform(&rng, v, (size_t)info.n_elements, -scale, scale);
        write_tensor(m, info.name, v, info.n_elements);
        free(v);
    }
}

/* Only the output layer and the rate head random (small): a slightly wrong
 * version of the exact reverse process of the uniform data. */
static void perturb_output(nctmc_model *m, uint64_t seed, float scale)
{
    static const char *names[] = {"output_layer.linear.weight", "output_layer.linear.bias",
                                  "output_layer.rate_head.weight"};
    test_rng rng = test_rng_seed(seed);
    for (int k = 0; k < 3; k++) {
        int32_t idx;
        nctmc_model_find_tensor(m, names[k], &idx);
        nctmc_tensor_info info = {.struct_size = sizeof info};
        nctmc_model_tensor_info(m, idx, &info);
        float *v = malloc((size_t)info.n_elements * sizeof *v);
        test_fill_uniform(&rng, v, (size_t)info.n_elements, -scale, scale);
        write_tensor(m, names[k], v, info.n_elements);
        free(v);
    }
}

/* A fresh model has a zero output layer (uniform jumps) and h = 0. With
 * the bias below it is the exact reverse process of uniform data: rate
 * sigma_t pi_j into every j != i, since q_t = pi at every t. (The masked
 * process needs nothing: its exit rate is exact already.) */
/* Uniform data's exact reverse rate is sigma (1 - 1/S) at every state:
 * h = log(1 - 1/S) under the sigma link, h = 0 under the noise-posterior
 * link (its context-free optimum); the jumps are uniform (zero logits). */
static void make_exact_for_uniform_data(nctmc_model *m, int process, nctmc_exit_link link)
{
    if (process != NCTMC_PROCESS_UNIFORM)
        return;
    float b = link == NCTMC_EXIT_LINK_SIGMA ? logf((float)(S_EX - 1) / (float)S_EX) : 0.0f;
    write_tensor(m, "output_layer.rate_head.bias", &b, 1);
}

/* ------------------------------------------------------------------------ */
/* (a) the exact -log p and the exact NELBO                                 */
/* ------------------------------------------------------------------------ */

/* The model's rates at every state at one time: rate[(x * L + pos) * S + j]
 * = lambda_theta(x, pos) r_theta(j | x, pos), 0 at j = x_pos. */
typedef struct grid_point {
    double t;       /* the grid's time: the forward process is taken here */
    double jac;     /* dt/ds = t (1 - t), s = -logit(t) */
    double rate[N_STATES * L_EX * S_EX];
    double ell[N_STATES];   /* Thm 3.2 integrand at each state, summed over positions */
} grid_point;

typedef struct exact_problem {
    nctmc_model *m;
    ref_proc rp;
    double T;        /* the bound's T (prior placed there) */
    double t_top;    /* where the integration starts (T, or below 1 in float) */
    double t_min;    /* where it stops (the rest to 0 is negligible) */
    int32_t tokens[N_STATES * L_EX];
    float times[N_STATES];
    float log_rate[N_STATES * L_EX];
    float jump_lp[N_STATES * L_EX * S_EX];
    int n_data;      /* data tokens */
    int n_x0;        /* data sequences: n_data^L */
    int x0_state[N_STATES];  /* state index of each data sequence */
} exact_problem;

static int state_token(int x, int pos)
{
    for (int k = 0; k < pos; k++)
        x /= S_EX;
    return x % S_EX;
}

static int state_with(int x, int pos, int j)
{
    int unit = 1;
    for (int k = 0; k < pos; k++)
        unit *= S_EX;
    return x + (j - state_token(x, pos)) * unit;
}

static void exact_init(exact_problem *ex, nctmc_model *m, double T)
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_model_get_config(m, &c);
    ex->m = m;
    ex->rp = ref_make(c.process, c.schedule, c.vocab_size, c.mixture_uniform, c.schedule_eps);
    ex->T = T;
    /* 1 - 2^-23: the first float time below 1 that is not rounded up */
    ex->t_top = T < 1.0 ? T : 1.0 - 1.0 / 8388608.0;
    /* below ~1e-8 the cosine schedule's 1 - cos(.) rounds to 0 in the
     * library's exact masked rate; what is left below t_min is negligible
     * (a jump probability ~ t_min, or t_min^2 for cosine; ode_slack) */
    ex->t_min = ex->rp.schedule == NCTMC_SCHEDULE_COSINE ? 1e-7 : 1e-12;
    for (int x = 0; x < N_STATES; x++)
        for (int pos = 0; pos < L_EX; pos++)
            ex->tokens[x * L_EX + pos] = state_token(x, pos);
    ex->n_data = ref_n_data(&ex->rp);
    ex->n_x0 = 0;
    for (int x = 0; x < N_STATES; x++) {
        bool data = true;
        for (int pos = 0; pos < L_EX; pos++)
            data = data && state_token(x, pos) < ex->n_data;
        if (data)
            ex->x0_state[ex->n_x0++] = x;
    }
}

/* The Thm 3.2 integrand at state x (forward form, before any swap):
 * sum_{y} R(x,y) log(R(x,y) / Rtheta(y,x)) - R(x,y) + Rtheta(x,y) over the
 * single-position changes y of x, R(x,y) = sigma pi_{y_pos}. */
static double thm_integrand(const exact_problem *ex, const grid_point *g, double sigma, int x)
{
    double sum = 0.0;
    for (int pos = 0; pos < L_EX; pos++) {
        int i = state_token(x, pos);
        for (int j = 0; j < S_EX; j++) {
            if (j == i)
                continue;
            int y = state_with(x, pos, j);
            double R = sigma * (double)ref_pi(&ex->rp, j);
            double back = g->rate[(y * L_EX + pos) * S_EX + i];
            if (R > 0.0)
                sum += R * log(R / back) - R;
            sum += g->rate[(x * L_EX + pos) * S_EX + j];
        }
    }
    return sum;
}

static void eval_grid_point(exact_problem *ex, double s, grid_point *g)
{
    /* The model takes float times: its rates at t are the network's at
     * float(t), a staircase in t. Everything else (q_t, R_t, sigma_t, the
     * Jacobian) is taken at t itself, so the ODE and the NELBO are both
     * exact integrals for that one well-defined model. (Near t = 1 the
     * staircase steps are not small against 1 - t.) */
    g->t = 1.0 / (1.0 + exp(s));
    g->jac = g->t * (1.0 - g->t);
    float tf = (float)g->t;
    tf = tf < 1.0f ? tf : nextafterf(1.0f, 0.0f);
    for (int b = 0; b < N_STATES; b++)
        ex->times[b] = tf;
    nctmc_forward_params fw;
    nctmc_forward_params_init(&fw);
    fw.batch = N_STATES;
    fw.length = L_EX;
    fw.tokens = ex->tokens;
    fw.times = ex->times;
    fw.log_rate = ex->log_rate;
    fw.jump_logprobs = ex->jump_lp;
    nctmc_status st = nctmc_model_forward(ex->m, &fw);
    if (st != NCTMC_OK) {
        CHECK(false, "forward: %s", nctmc_model_last_error(ex->m));
        return;
    }
    for (int r = 0; r < N_STATES * L_EX; r++)
        for (int j = 0; j < S_EX; j++) {
            double lr = (double)ex->log_rate[r] + (double)ex->jump_lp[r * S_EX + j];
            g->rate[r * S_EX + j] = j == ex->tokens[r] ? 0.0 : exp(lr);
        }
    double sigma = (double)ref_sigma(&ex->rp, g->t);
    for (int x = 0; x < N_STATES; x++)
        g->ell[x] = thm_integrand(ex, g, sigma, x);
}

/* dp/ds = jac * (flow into each state - flow out), the model CTMC run
 * backwards in t. */
static void kolmogorov(const grid_point *g, const double *p, double *dp)
{
    for (int x = 0; x < N_STATES; x++)
        dp[x] = 0.0;
    for (int x = 0; x < N_STATES; x++)
        for (int pos = 0; pos < L_EX; pos++)
            for (int j = 0; j < S_EX; j++) {
                double flow = p[x] * g->rate[(x * L_EX + pos) * S_EX + j];
                dp[state_with(x, pos, j)] += flow;
                dp[x] -= flow;
            }
    for (int x = 0; x < N_STATES; x++)
        dp[x] *= g->jac;
}

static void rk4_step(const grid_point *g0, const grid_point *g1, const grid_point *g2, double h,
                     double *p)
{
    double k1[N_STATES], k2[N_STATES], k3[N_STATES], k4[N_STATES], tmp[N_STATES];
    kolmogorov(g0, p, k1);
    for (int x = 0; x < N_STATES; x++)
        tmp[x] = p[x] + 0.5 * h * k1[x];
    kolmogorov(g1, tmp, k2);
    for (int x = 0; x < N_STATES; x++)
        tmp[x] = p[x] + 0.5 * h * k2[x];
    kolmogorov(g1, tmp, k3);
    for (int x = 0; x < N_STATES; x++)
        tmp[x] = p[x] + h * k3[x];
    kolmogorov(g2, tmp, k4);
    for (int x = 0; x < N_STATES; x++)
        p[x] += h / 6.0 * (k1[x] + 2.0 * k2[x] + 2.0 * k3[x] + k4[x]);
}

/* E_{x_t ~ q_t(.|x0)}[integrand] for every data sequence x0. */
static void expected_integrand(const exact_problem *ex, const grid_point *g, double *out)
{
    long double a = ref_alpha(&ex->rp, g->t);
    double q1[S_EX][S_EX]; /* q1[x0][i] */
    for (int x0 = 0; x0 < S_EX; x0++)
        for (int i = 0; i < S_EX; i++)
            q1[x0][i] = x0 < ex->n_data ? (double)ref_q(&ex->rp, a, i, x0) : 0.0;
    for (int k = 0; k < ex->n_x0; k++) {
        int x0 = ex->x0_state[k];
        double sum = 0.0;
        for (int x = 0; x < N_STATES; x++) {
            double w = 1.0;
            for (int pos = 0; pos < L_EX; pos++)
                w *= q1[state_token(x0, pos)][state_token(x, pos)];
            sum += w * g->ell[x];
        }
        out[k] = sum;
    }
}

/* Results at two resolutions (coarse: twice the step). */
typedef struct exact_answer {
    double neglogp[2][N_STATES];   /* [fine/coarse][k] for data sequence k */
    double nelbo[2][N_STATES];
    double prior_ce[N_STATES];     /* sum over positions of -E_{q_T} log pi */
    double tails[N_STATES];        /* |the fitted tails beyond the grid| */
    double ode_slack[N_STATES];    /* how far -log p can move below t_min */
} exact_answer;

static double prior_cross_entropy(const exact_problem *ex, int x0)
{
    long double a = ref_alpha(&ex->rp, ex->T), ce = 0;
    if (ex->T >= 1.0 && ex->rp.schedule != NCTMC_SCHEDULE_LOGLINEAR)
        a = 0; /* alpha_1 = 0 exactly (cos(pi/2) rounds to 6e-17) */
    for (int pos = 0; pos < L_EX; pos++)
        for (int i = 0; i < S_EX; i++) {
            long double q = ref_q(&ex->rp, a, i, state_token(x0, pos));
            if (q > 0)
                ce -= q * logl(ref_pi(&ex->rp, i));
        }
    return (double)ce;
}

/* The integrand near an end of the grid, for the tail beyond it. */
typedef struct end_sample {
    double t;
    double f[N_STATES];
} end_sample;

static void keep_end(end_sample *ts, const grid_point *g, const double *f, int n)
{
    ts->t = g->t;
    for (int k = 0; k < n; k++)
        ts->f[k] = f[k];
}

/* With T = 1 the grid stops at t_top = 1 - 2^-23 (the model takes float
 * times below 1). Near 1 the integrand is A + B log(1/(1 - t)) + o(1) (the
 * masked process's D-like term grows like that; elsewhere B ~ 0); fitted
 * on two points, the tail is delta (A + B (1 + log(1/delta))). */
static void add_top_tail(const exact_problem *ex, const end_sample *a, const end_sample *b,
                         exact_answer *ans)
{
    if (ex->T < 1.0)
        return;
    double la = log(1.0 / (1.0 - a->t)), lb = log(1.0 / (1.0 - b->t));
    double delta = 1.0 - ex->t_top;
    for (int k = 0; k < ex->n_x0; k++) {
        double B = (a->f[k] - b->f[k]) / (la - lb), A = a->f[k] - B * la;
        double tail = delta * (A + B * (1.0 + log(1.0 / delta)));
        ans->nelbo[0][k] += tail;
        ans->nelbo[1][k] += tail;
        ans->tails[k] += fabs(tail);
    }
}

/* Below t_min the integrand is A + B log t + o(1) (log t from the noisy
 * positions' 1/t rates times their probability ~ t); fitted on two points,
 * the rest of the integral is t_min (A + B (log t_min - 1)). */
static void add_bottom_tail(const exact_problem *ex, const end_sample *a, const end_sample *b,
                            exact_answer *ans)
{
    double la = log(a->t), lb = log(b->t), tm = a->t;
    for (int k = 0; k < ex->n_x0; k++) {
        double B = (a->f[k] - b->f[k]) / (la - lb), A = a->f[k] - B * la;
        double tail = tm * (A + B * (log(tm) - 1.0));
        ans->nelbo[0][k] += tail;
        ans->nelbo[1][k] += tail;
        ans->tails[k] += fabs(tail);
    }
}

static double exit_rate(const grid_point *g, int x)
{
    double exit = 0.0;
    for (int r = 0; r < L_EX * S_EX; r++)
        exit += g->rate[x * L_EX * S_EX + r];
    return exit;
}

/* Below t_min the chain still moves. p(x0) changes there by at most twice
 * t_min times the largest exit rate (inflow plus outflow) — or, where rates
 * blow up as t -> 0 (the masked process's 1/t at masks), by at most the
 * mass still on non-data states plus twice t_min times the largest exit
 * rate of a data state. (Rates at t_min stand for those below it.) */
static void ode_slack(const exact_problem *ex, const grid_point *last, const double *p,
                      exact_answer *ans)
{
    double off_data = 1.0, max_data = 0.0, max_all = 0.0;
    for (int k = 0; k < ex->n_x0; k++) {
        off_data -= p[ex->x0_state[k]];
        max_data = fmax(max_data, exit_rate(last, ex->x0_state[k]));
    }
    for (int x = 0; x < N_STATES; x++)
        max_all = fmax(max_all, exit_rate(last, x));
    double room = fmin(fmax(off_data, 0.0) + 2.0 * ex->t_min * max_data,
                       2.0 * ex->t_min * max_all);
    for (int k = 0; k < ex->n_x0; k++)
        ans->ode_slack[k] = log1p(room / p[ex->x0_state[k]]);
}

/*
 * One pass over the grid s_j = s_top + j eta, j = 0 .. 4n (s = -logit t,
 * so s runs from t_top down to t_min; near both ends the rates in s stay
 * bounded where they blow up in t). The fine solution takes RK4 steps of
 * 2 eta and Simpson with spacing eta; the coarse one RK4 steps of 4 eta and
 * Simpson with 2 eta, on the even points. Five points are kept at a time.
 */
static void exact_solve(exact_problem *ex, int n, exact_answer *ans)
{
    double s_top = -log(ex->t_top / (1.0 - ex->t_top));
    double s_end = -log(ex->t_min / (1.0 - ex->t_min));
    double eta = (s_end - s_top) / (4.0 * n);
    grid_point *ring = malloc(5 * sizeof *ring);
    double p[2][N_STATES], integrand[N_STATES];
    end_sample top[2], bottom[2];
    /* a point about 2 units of s below the top, for the tail's fit */
    int top_fit_j = 4 * (int)ceil(2.0 / (4.0 * eta));
    /* the prior pi^{(x) L} at t_top */
    for (int x = 0; x < N_STATES; x++) {
        double w = 1.0;
        for (int pos = 0; pos < L_EX; pos++)
            w *= (double)ref_pi(&ex->rp, state_token(x, pos));
        p[0][x] = p[1][x] = w;
    }
    for (int k = 0; k < ex->n_x0; k++)
        ans->nelbo[0][k] = ans->nelbo[1][k] = ans->tails[k] = 0.0;
    for (int j = 0; j <= 4 * n; j++) {
        grid_point *g = &ring[j % 5];
        eval_grid_point(ex, s_top + j * eta, g);
        expected_integrand(ex, g, integrand);
        if (j == 0 || j == top_fit_j)
            keep_end(&top[j == 0 ? 0 : 1], g, integrand, ex->n_x0);
        if (j == 4 * n || j == 4 * n - top_fit_j)
            keep_end(&bottom[j == 4 * n ? 0 : 1], g, integrand, ex->n_x0);
        /* Simpson: fine over all points, coarse over the even ones */
        double wf = (j == 0 || j == 4 * n) ? 1.0 : (j % 2 ? 4.0 : 2.0);
        double wc = (j == 0 || j == 4 * n) ? 1.0 : (j % 4 == 2 ? 4.0 : 2.0);
        for (int k = 0; k < ex->n_x0; k++) {
            ans->nelbo[0][k] += wf * eta / 3.0 * g->jac * integrand[k];
            if (j % 2 == 0)
                ans->nelbo[1][k] += wc * 2.0 * eta / 3.0 * g->jac * integrand[k];
        }
        if (j >= 2 && j % 2 == 0)
            rk4_step(&ring[(j - 2) % 5], &ring[(j - 1) % 5], g, 2.0 * eta, p[0]);
        if (j >= 4 && j % 4 == 0)
            rk4_step(&ring[(j - 4) % 5], &ring[(j - 2) % 5], g, 4.0 * eta, p[1]);
    }
    add_top_tail(ex, &top[0], &top[1], ans);
    add_bottom_tail(ex, &bottom[0], &bottom[1], ans);
    ode_slack(ex, &ring[(4 * n) % 5], p[0], ans);
    for (int k = 0; k < ex->n_x0; k++) {
        ans->prior_ce[k] = prior_cross_entropy(ex, ex->x0_state[k]);
        for (int r = 0; r < 2; r++) {
            ans->neglogp[r][k] = -log(p[r][ex->x0_state[k]]);
            ans->nelbo[r][k] += ans->prior_ce[k];
        }
    }
    free(ring);
}

/* nctmc_eval on `copies` copies of data sequence x0. */
static nctmc_status run_eval(nctmc_model *m, int x0_state, int copies, int n_time, float t_max,
                             nctmc_time_sampling sampling, uint64_t seed,
                             nctmc_eval_result *res)
{
    int32_t *tokens = malloc((size_t)copies * L_EX * sizeof *tokens);
    for (int c = 0; c < copies; c++)
        for (int pos = 0; pos < L_EX; pos++)
            tokens[c * L_EX + pos] = state_token(x0_state, pos);
    nctmc_eval_params p;
    nctmc_eval_params_init(&p);
    p.n_sequences = copies;
    p.length = L_EX;
    p.tokens = tokens;
    p.batch_size = 256;
    p.n_time_samples = n_time;
    p.t_max = t_max;
    p.seed = seed;
    p.time_sampling = sampling;
    nctmc_eval_result_init(res);
    nctmc_status st = nctmc_eval(m, &p, res);
    free(tokens);
    return st;
}

typedef struct bound_case {
    const char *name;
    int process, schedule;
    float pu, eps;
    float t_max;          /* 0: automatic */
    int kind;             /* 0 random weights, 1 exact reverse of uniform data, 2 perturbed */
    float scale;
    nctmc_exit_link link;
} bound_case;

static double cpu_seconds(clock_t since)
{
    return (double)(clock() - since) / CLOCKS_PER_SEC;
}

static void test_bound_case(const bound_case *bc, int n_grid)
{
    clock_t t0 = clock();
    nctmc_model *m = make_model_link(bc->process, bc->schedule, bc->pu, bc->eps, 0, 3, bc->link);
    if (!m)
        return;
    if (bc->kind == 0)
        randomize(m, 17 + (uint64_t)bc->process, bc->scale);
    else
        make_exact_for_uniform_data(m, bc->process, bc->link);
    if (bc->kind == 2)
        perturb_output(m, 23, bc->scale);
    double T = bc->t_max != 0.0f ? (double)bc->t_max
               : bc->process == NCTMC_PROCESS_MASKED ? 1.0 : (double)0.999f;
    exact_problem *ex = calloc(1, sizeof *ex);
    exact_answer *ans = calloc(1, sizeof *ans);
    exact_init(ex, m, T);
    exact_solve(ex, n_grid, ans);

    /* the bound for every data sequence, up to the measured quadrature error */
    int violations = 0, worst_k = 0;
    double worst_margin = INFINITY, max_qerr = 0.0, max_quad = 0.0, min_gap = INFINITY, max_gap = -INFINITY;
    for (int k = 0; k < ex->n_x0; k++) {
        /* quadrature (fine vs coarse), 1% of the fitted tails, and what
         * the chain can still do below t_min */
        double quad = fabs(ans->nelbo[0][k] - ans->nelbo[1][k]) +
                      fabs(ans->neglogp[0][k] - ans->neglogp[1][k]);
        double qerr = quad + 0.01 * ans->tails[k] + ans->ode_slack[k] + 1e-12;
        double gap = ans->nelbo[0][k] - ans->neglogp[0][k];
        max_quad = fmax(max_quad, quad);
        max_qerr = fmax(max_qerr, qerr);
        min_gap = fmin(min_gap, gap);
        max_gap = fmax(max_gap, gap);
        if (gap < -qerr)
            violations++;
        if (gap / qerr < worst_margin) {
            worst_margin = gap / qerr;
            worst_k = k;
        }
    }
    int k0 = worst_k;
    printf("  %s: over all %d x0, NELBO - (-log p) in [%.3g, %.3g] nats, numerical error "
           "<= %.2g;\n    closest to the bound, x0 #%d: -log p = %.9f, NELBO = %.9f nats\n",
           bc->name, ex->n_x0, min_gap, max_gap, max_qerr, k0, ans->neglogp[0][k0],
           ans->nelbo[0][k0]);
    CHECK(violations == 0, "%s: NELBO < -log p beyond the quadrature error for %d of %d x0 "
          "(worst x0 #%d: NELBO %.9g, -log p %.9g)",
          bc->name, violations, ex->n_x0, worst_k, ans->nelbo[0][worst_k],
          ans->neglogp[0][worst_k]);
    CHECK(max_quad < 1e-5 && max_qerr < 1e-5,
          "%s: not converged (fine vs coarse %.3g, error bound %.3g)", bc->name, max_quad,
          max_qerr);
    /* probabilities of the data sequences cannot exceed 1 in total */
    double total = 0.0;
    for (int k = 0; k < ex->n_x0; k++)
        total += exp(-ans->neglogp[0][k]);
    /* (less than 1 where the model can end on a mask) */
    CHECK(total <= 1.0 + 1e-7 && total > 0.0, "%s: sum of p(x0) over data = %.9g", bc->name,
          total);
    if (bc->kind == 1) {
        /* the exact reverse process of uniform data: p(x0) = n_data^-L and
         * Jensen's inequality is an equality */
        double want = L_EX * log((double)ex->n_data);
        CHECK(fabs(ans->neglogp[0][k0] - want) < 1e-6, "%s: -log p %.9g, want %.9g", bc->name,
              ans->neglogp[0][k0], want);
        CHECK(fabs(max_gap) < 1e-5 && fabs(min_gap) < 1e-5,
              "%s: the bound should be tight, gaps in [%.3g, %.3g]", bc->name, min_gap, max_gap);
    } else if (bc->kind == 2) {
        CHECK(min_gap > 1e-6 && max_gap < 0.05,
              "%s: expected a small positive gap, got [%.3g, %.3g]", bc->name, min_gap,
              max_gap);
    } else {
        CHECK(min_gap > 1e-4, "%s: random weights should leave a clear gap, min %.3g", bc->name,
              min_gap);
    }

    /* nctmc_eval's Monte Carlo estimate against the exact NELBO, with the
     * times spread evenly in t and in sqrt(t) (importance-weighted): both
     * estimate the same integral */
    int picks[3] = {0, ex->n_x0 / 2, ex->n_x0 - 1};
    double prior_kl_bits = 0.0;
    for (int c = 0; c < 6; c++) {
        int k = picks[c % 3];
        nctmc_time_sampling sampling = c < 3 ? NCTMC_TIME_SAMPLING_UNIFORM
                                             : NCTMC_TIME_SAMPLING_SQRT;
        nctmc_eval_result res;
        nctmc_status st = run_eval(m, ex->x0_state[k], 96, 64, bc->t_max, sampling,
                                   1000 + (uint64_t)c, &res);
        CHECK(st == NCTMC_OK, "%s: eval: %s", bc->name, nctmc_model_last_error(m));
        if (st != NCTMC_OK)
            continue;
        double exact_bits = ans->nelbo[0][k] / (L_EX * LN2);
        double z = (res.nelbo_bits_per_token - exact_bits) / res.std_error_bits;
        printf("    x0 #%2d, t %-7s: exact NELBO %.5f bits/token, MC %.5f +- %.5f "
               "(z = %+.2f), -log2 p %.5f\n",
               k, c < 3 ? "uniform" : "sqrt", exact_bits, res.nelbo_bits_per_token,
               res.std_error_bits, z, ans->neglogp[0][k] / (L_EX * LN2));
        CHECK(fabs(z) < 4.0, "%s x0 #%d (%s): MC %.6f +- %.6f vs exact %.6f (z = %.2f)",
              bc->name, k, c < 3 ? "uniform t" : "sqrt t", res.nelbo_bits_per_token,
              res.std_error_bits, exact_bits, z);
        /* random weights put the integrand's bulk at large t, where the
         * sqrt density samples less: its spread may be up to twice as wide */
        CHECK(res.std_error_bits < (c < 3 ? 0.1 : 0.2) * exact_bits + 1e-3,
              "%s: standard error %.3g too large for %.3g", bc->name, res.std_error_bits,
              exact_bits);
        CHECK(res.t_max == T, "%s: t_max used %g want %g", bc->name, res.t_max, T);
        prior_kl_bits = res.prior_bits_per_token;
    }
    /* the reported prior is KL(q_T || pi) per token */
    long double a = ref_alpha(&ex->rp, T), kl = 0;
    if (T >= 1.0 && ex->rp.schedule != NCTMC_SCHEDULE_LOGLINEAR)
        a = 0;
    for (int i = 0; i < S_EX; i++) {
        long double q = ref_q(&ex->rp, a, i, 0);
        if (q > 0)
            kl += q * logl(q / ref_pi(&ex->rp, i));
    }
    CHECK(fabs(prior_kl_bits - (double)kl / LN2) < 1e-9 + 1e-9 * (double)kl,
          "%s: prior %.12g bits, want %.12g", bc->name, prior_kl_bits, (double)kl / LN2);
    printf("    (%.1f s of CPU)\n", cpu_seconds(t0));
    free(ex);
    free(ans);
    nctmc_model_free(m);
}

/* The swap: at fixed t, E_q[Thm 3.2 integrand] = E_q[L_cond + D_t] for each x0,
 * with L_cond from its definition sum_j f(Rhat_j, lambda r_j) and D_t by
 * summation (tests/forward_ref.h; test_eval_math.c holds the library's
 * closed form to that sum). */
static void test_swap_identity(void)
{
    nctmc_model *m = make_model(NCTMC_PROCESS_MIXTURE, NCTMC_SCHEDULE_COSINE, 0.4f, 0.0f, 0, 9);
    if (!m)
        return;
    randomize(m, 31, 0.4f);
    exact_problem *ex = calloc(1, sizeof *ex);
    grid_point *g = malloc(sizeof *g);
    exact_init(ex, m, 0.999);
    double worst = 0.0;
    for (int ti = 0; ti < 4; ti++) {
        double s = -log(0.2 / 0.8) + ti * 1.7 - 3.0;
        eval_grid_point(ex, s, g);
        double thm[N_STATES];
        expected_integrand(ex, g, thm);
        long double a = ref_alpha(&ex->rp, g->t), sigma = ref_sigma(&ex->rp, g->t);
        for (int k = 0; k < ex->n_x0; k++) {
            int x0 = ex->x0_state[k];
            double swapped = 0.0;
            for (int x = 0; x < N_STATES; x++) {
                double w = 1.0, ell = 0.0;
                for (int pos = 0; pos < L_EX; pos++) {
                    int i = state_token(x, pos), c0 = state_token(x0, pos);
                    w *= (double)ref_q(&ex->rp, a, i, c0);
                    long double qi = ref_q(&ex->rp, a, i, c0);
                    for (int j = 0; j < S_EX; j++) {
                        if (j == i)
                            continue;
                        double rhat = (double)(sigma * ref_pi(&ex->rp, i) *
                                               ref_q(&ex->rp, a, j, c0) / qi);
                        double b = g->rate[(x * L_EX + pos) * S_EX + j];
                        ell += (rhat > 0.0 ? rhat * log(rhat / b) - rhat : 0.0) + b;
                    }
                    long double d_scale;
                    ell += (double)ref_d(&ex->rp, g->t, i, c0, &d_scale);
                }
                swapped += w * ell;
            }
            worst = fmax(worst, fabs(swapped - thm[k]) / (fabs(thm[k]) + 1e-3));
        }
    }
    CHECK(worst < 1e-9, "E[L_cond + D] vs the theorem's integrand: worst relative %.3g", worst);
    free(g);
    free(ex);
    nctmc_model_free(m);
}

static void test_bound(void)
{
    /* 4 n + 1 model evaluations of all 64 states per case */
    const int n_grid = 500;
    static const bound_case cases[] = {
        {"uniform linear, random", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 0, 0.4f, NCTMC_EXIT_LINK_SIGMA},
        {"uniform loglinear eps=.05 T=1, random", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LOGLINEAR, 0,
         0.05f, 1.0f, 0, 0.4f, NCTMC_EXIT_LINK_SIGMA},
        {"masked linear, random", NCTMC_PROCESS_MASKED, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 0, 0.4f, NCTMC_EXIT_LINK_SIGMA},
        {"masked cosine, random", NCTMC_PROCESS_MASKED, NCTMC_SCHEDULE_COSINE, 0, 0, 0, 0, 0.4f, NCTMC_EXIT_LINK_SIGMA},
        {"mixture cosine p_u=.5, random", NCTMC_PROCESS_MIXTURE, NCTMC_SCHEDULE_COSINE, 0.5f, 0, 0, 0,
         0.4f, NCTMC_EXIT_LINK_SIGMA},
        {"uniform linear, exact reverse", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 1, 0, NCTMC_EXIT_LINK_SIGMA},
        {"masked linear, exact reverse", NCTMC_PROCESS_MASKED, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 1, 0, NCTMC_EXIT_LINK_SIGMA},
        {"uniform cosine, perturbed", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_COSINE, 0, 0, 0, 2, 0.02f, NCTMC_EXIT_LINK_SIGMA},
        {"uniform linear, random, noise link", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 0,
         0.4f, NCTMC_EXIT_LINK_NOISE_POSTERIOR},
        {"mixture cosine p_u=.5, random, noise link", NCTMC_PROCESS_MIXTURE, NCTMC_SCHEDULE_COSINE, 0.5f,
         0, 0, 0, 0.4f, NCTMC_EXIT_LINK_NOISE_POSTERIOR},
        {"uniform linear, exact reverse, noise link", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0,
         0, 1, 0, NCTMC_EXIT_LINK_NOISE_POSTERIOR},
        {"uniform cosine, perturbed, noise link", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_COSINE, 0, 0, 0, 2,
         0.02f, NCTMC_EXIT_LINK_NOISE_POSTERIOR},
        {"uniform linear, random, denoiser link", NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 0,
         0.2f, NCTMC_EXIT_LINK_DENOISER},
        {"mixture loglinear p_u=.5, random, denoiser link", NCTMC_PROCESS_MIXTURE,
         NCTMC_SCHEDULE_LOGLINEAR, 0.5f, 0.05f, 0, 0, 0.2f, NCTMC_EXIT_LINK_DENOISER},
    };
#if defined(NCTMC_TEST_SANITIZED)
    /* sanitizer builds (tests/meson.build): one case of each process, of
     * each link and of the exact reverse process, the same code paths; the
     * others only vary the numbers, at 5x the time under the sanitizers */
    static const size_t subset[] = {0, 3, 6, 9, 13};
    for (size_t k = 0; k < sizeof subset / sizeof subset[0]; k++)
        test_bound_case(&cases[subset[k]], n_grid);
#else
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        test_bound_case(&cases[c], n_grid);
#endif
}

/* ------------------------------------------------------------------------ */
/* (b) calibration, cancellation, bad parameters, determinism               */
/* ------------------------------------------------------------------------ */

static nctmc_eval_params basic_params(const int32_t *tokens, int64_t n_seq)
{
    nctmc_eval_params p;
    nctmc_eval_params_init(&p);
    p.n_sequences = n_seq;
    p.length = L_EX;
    p.tokens = tokens;
    p.n_time_samples = 16;
    p.seed = 5;
    return p;
}

static int32_t *data_tokens(int64_t n_seq, int n_data, uint64_t seed)
{
    test_rng rng = test_rng_seed(seed);
    int32_t *t = malloc((size_t)n_seq * L_EX * sizeof *t);
    for (int64_t i = 0; i < n_seq * L_EX; i++)
        t[i] = test_randint(&rng, n_data);
    return t;
}

/* The q-weighted mean true rate over noise states i != x0 = 0. */
static double ref_noisy_rate(const ref_proc *rp, double t)
{
    long double a = ref_alpha(rp, t), num = 0, den = 0;
    for (int i = 1; i < rp->S; i++) {
        long double q = ref_q(rp, a, i, 0);
        num += q * ref_lam_hat(rp, t, i, 0);
        den += q;
    }
    return (double)(num / den);
}

static bool within(double x, double lo, double hi, double rel)
{
    return x >= lo * (1 - rel) && x <= hi * (1 + rel);
}

/* Where lambda_theta depends on t only, each bucket's medians lie between
 * its rates at the bucket's ends; the true rates match the definitions. */
static void check_buckets(const char *name, const nctmc_eval_result *r, const ref_proc *rp,
                          double (*model_rate)(const ref_proc *, double), int64_t n_positions)
{
    int64_t total = 0;
    int bad_median = 0, bad_true = 0, bad_edges = 0;
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++) {
        const nctmc_rate_bucket *k = &r->buckets[b];
        total += k->n_clean + k->n_noisy;
        if (fabs(k->t_lo - r->t_max * b / NCTMC_EVAL_BUCKETS) > 1e-15 ||
            fabs(k->t_hi - r->t_max * (b + 1) / NCTMC_EVAL_BUCKETS) > 1e-15)
            bad_edges++;
        double r_lo = model_rate(rp, k->t_lo > 0 ? k->t_lo : 1e-12), r_hi = model_rate(rp, k->t_hi);
        double lo = fmin(r_lo, r_hi), hi = fmax(r_lo, r_hi);
        bool clean_ok = rp->process == NCTMC_PROCESS_MASKED ? k->median_rate_clean == 0.0
                                                        : within(k->median_rate_clean, lo, hi, 1e-5);
        if (k->n_clean == 0 || k->n_noisy == 0 || !clean_ok ||
            !within(k->median_rate_noisy, lo, hi, 1e-5)) {
            bad_median++;
            fprintf(stderr, "  %s bucket %d [%g, %g): n %lld/%lld medians %g %g, range [%g, %g]\n",
                    name, b, k->t_lo, k->t_hi, (long long)k->n_clean, (long long)k->n_noisy,
                    k->median_rate_clean, k->median_rate_noisy, lo, hi);
        }
        double tc = 0.5 * (k->t_lo + k->t_hi);
        double want_clean = ref_lam_hat(rp, tc, 0, 0), want_noisy = ref_noisy_rate(rp, tc);
        if (fabs(k->true_rate_clean - want_clean) > 1e-9 * want_clean + 1e-300 ||
            fabs(k->true_rate_noisy - want_noisy) > 1e-9 * want_noisy)
            bad_true++;
    }
    CHECK(total == n_positions, "%s: bucket counts add to %lld, want %lld", name,
          (long long)total, (long long)n_positions);
    CHECK(bad_edges == 0, "%s: %d buckets with wrong edges", name, bad_edges);
    CHECK(bad_median == 0, "%s: %d buckets with medians outside the rate's range", name,
          bad_median);
    CHECK(bad_true == 0, "%s: %d buckets with wrong true rates", name, bad_true);
}

/* lambda_theta of the exact-reverse models of uniform data */
static double rate_uniform_exact(const ref_proc *rp, double t)
{
    return (double)ref_sigma(rp, t) * (rp->S - 1) / rp->S;
}

static double rate_masked_exact(const ref_proc *rp, double t)
{
    /* sigma a / (1 - a) = -a' / (1 - a), finite at t = 1 */
    return (double)(-ref_dalpha(rp, t) / (1 - ref_alpha(rp, t)));
}

static void test_calibration(void)
{
    for (int masked = 0; masked < 2; masked++) {
        int process = masked ? NCTMC_PROCESS_MASKED : NCTMC_PROCESS_UNIFORM;
        nctmc_model *m = make_model(process, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 3);
        if (!m)
            continue;
        make_exact_for_uniform_data(m, process, NCTMC_EXIT_LINK_SIGMA);
        ref_proc rp = ref_make(process, NCTMC_SCHEDULE_LINEAR, S_EX, 0, 0);
        /* small: every value kept; large: past the reservoir's cap */
        static const int64_t sizes[2] = {300, 24000};
        for (int big = 0; big < 2; big++) {
#if defined(NCTMC_TEST_SANITIZED)
            /* sanitizer builds (tests/meson.build): the reservoir past its
             * cap on the uniform process only; the code does not depend on
             * the process */
            if (big && masked)
                continue;
#endif
            int64_t n_seq = sizes[big];
            int32_t *tok = data_tokens(n_seq, ref_n_data(&rp), 41);
            nctmc_eval_params p = basic_params(tok, n_seq);
            p.n_time_samples = big ? 8 : 16;
            p.batch_size = 512;
            nctmc_eval_result r;
            nctmc_eval_result_init(&r);
            nctmc_status st = nctmc_eval(m, &p, &r);
            CHECK(st == NCTMC_OK, "calibration eval: %s", nctmc_model_last_error(m));
            char name[64];
            snprintf(name, sizeof name, "%s, %lld sequences", ref_proc_name(process),
                     (long long)n_seq);
            check_buckets(name, &r, &rp, masked ? rate_masked_exact : rate_uniform_exact,
                          n_seq * p.n_time_samples * L_EX);
            if (big) {
                int64_t most = 0;
                for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++)
                    most = r.buckets[b].n_clean > most ? r.buckets[b].n_clean : most;
                CHECK(most > 65536, "the large run should pass the reservoir's cap (%lld)",
                      (long long)most);
            }
            if (!big) {
                printf("  calibration (%s, exact reverse of uniform data), rates:\n", name);
                for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++) {
                    const nctmc_rate_bucket *k = &r.buckets[b];
                    printf("    t [%.3f, %.3f): clean %.4g (true %.4g, n %lld), noisy %.4g "
                           "(true %.4g, n %lld)\n",
                           k->t_lo, k->t_hi, k->median_rate_clean, k->true_rate_clean,
                           (long long)k->n_clean, k->median_rate_noisy, k->true_rate_noisy,
                           (long long)k->n_noisy);
                }
            }
            free(tok);
        }
        nctmc_model_free(m);
    }
}

/* ---- the reliability table ------------------------------------------------ */

/* eval's Philox purpose, the first counter word's low byte (NCTMC_RNG_EVAL
 * of lib/math/philox.h; test_eval_math.c asserts the value) */
#define EVAL_RNG_PURPOSE 9u

/* The eval's draws, re-derived from its documented Philox counter layout
 * (docs/math.md, NELBO, "Random numbers") with tests/philox_ref.h, so that
 * the test knows every row's t, x_t and x0 without asking the library. */
static philox_ref_block rel_draw(uint64_t seed, uint32_t stream, uint32_t k, int64_t s,
                                 uint32_t pos)
{
    return philox_ref(EVAL_RNG_PURPOSE | stream << 8 | (uint32_t)((uint64_t)s >> 32) << 16, k,
                      (uint32_t)s, pos, seed);
}

static double rel_u53(uint32_t hi, uint32_t lo)
{
    return ((double)((uint64_t)(hi >> 5) << 26 | (uint64_t)(lo >> 6)) + 0.5) /
           9007199254740992.0;
}

static float rel_time(uint64_t seed, double T, int32_t n, int32_t k, int64_t s)
{
    philox_ref_block r = rel_draw(seed, 0, (uint32_t)k, s, 0);
    float t = (float)(T * ((double)k + rel_u53(r.w[0], r.w[1])) / (double)n);
    return t < 1.0f ? t : nextafterf(1.0f, 0.0f);
}

/* x_t: x0 with probability a_t; else the mask (masked; mixture with
 * probability 1 - p_u), else a uniform data token. */
static int rel_noise(const ref_proc *rp, uint64_t seed, int32_t k, int64_t s, int32_t pos,
                     double t, int x0)
{
    philox_ref_block r = rel_draw(seed, 1, (uint32_t)k, s, (uint32_t)pos);
    if (!(rel_u53(r.w[0], r.w[1]) < (double)(1 - ref_alpha(rp, t))))
        return x0;
    int mask = rp->S - 1;
    if (rp->process == NCTMC_PROCESS_MASKED)
        return mask;
    if (rp->process == NCTMC_PROCESS_MIXTURE &&
        !(((double)r.w[2] + 0.5) / 4294967296.0 < (double)rp->pu))
        return mask;
    philox_ref_block d = rel_draw(seed, 2, (uint32_t)k, s, (uint32_t)pos);
    return (int)(((uint64_t)d.w[0] << 32 | d.w[1]) % (uint64_t)ref_n_data(rp));
}

/* nu_hat from the definitions: lambda = e^h sigma_t (the exit-rate link
 * with a rate head that outputs h everywhere) against the true conditional
 * rates of i clean and i noise (ref_lam_hat sums the reverse rates). */
static double rel_nu(const ref_proc *rp, double t, int i, float h)
{
    double lam = exp((double)h) * (double)ref_sigma(rp, t);
    double lam_c = ref_lam_hat(rp, t, i, i), lam_n = ref_lam_hat(rp, t, i, i == 0 ? 1 : 0);
    double nu = (lam - lam_c) / (lam_n - lam_c);
    return nu < 0 ? 0 : (nu > 1 ? 1 : nu);
}

typedef struct rel_table {
    int64_t count[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];
    int64_t noisy[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];
    double sum_nu[NCTMC_EVAL_BUCKETS][NCTMC_EVAL_NU_BINS];
    int64_t total;
    double max_closed_form_error;   /* |nu - (1 - a)(1 - pi)|, see below */
} rel_table;

/* The table, position by position, as nctmc_eval() should have built it. */
static void rel_brute_force(const ref_proc *rp, const nctmc_eval_params *p, double T,
                            float h, rel_table *out)
{
    memset(out, 0, sizeof *out);
    for (int64_t s = 0; s < p->n_sequences; s++)
        for (int32_t k = 0; k < p->n_time_samples; k++) {
            double t = rel_time(p->seed, T, p->n_time_samples, k, s);
            int band = (int)(t / T * NCTMC_EVAL_BUCKETS);
            band = band >= NCTMC_EVAL_BUCKETS ? NCTMC_EVAL_BUCKETS - 1 : band;
            for (int32_t pos = 0; pos < p->length; pos++) {
                int x0 = p->tokens[s * p->length + pos];
                int xt = rel_noise(rp, p->seed, k, s, pos, t, x0);
                if (rp->process == NCTMC_PROCESS_MASKED || xt == ref_n_data(rp))
                    continue;   /* an exact rate, or the mixture's mask */
                double nu = rel_nu(rp, t, xt, h);
                int bin = (int)(nu * NCTMC_EVAL_NU_BINS);
                bin = bin >= NCTMC_EVAL_NU_BINS ? NCTMC_EVAL_NU_BINS - 1 : bin;
                out->count[band][bin]++;
                out->noisy[band][bin] += xt != x0;
                out->sum_nu[band][bin] += nu;
                out->total++;
                /* the exact reverse process of uniform data knows nothing
                 * but t: its nu is the prior noise share (1 - a)(1 - pi) */
                double closed = (double)((1 - ref_alpha(rp, t)) * (1 - ref_pi(rp, xt)));
                out->max_closed_form_error = fmax(out->max_closed_form_error, fabs(nu - closed));
            }
        }
}

/* nctmc_eval()'s table against the brute force: the same positions in the
 * same cells, the same noisy counts, the same mean nu_hat, and ECE = the
 * count-weighted mean of |mean nu_hat - observed share|. */
static void rel_compare(const char *name, const nctmc_eval_result *r, const rel_table *want)
{
    int bad_cells = 0, filled = 0;
    double err_all = 0;
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++) {
        double err = 0;
        int64_t n = 0;
        for (int k = 0; k < NCTMC_EVAL_NU_BINS; k++) {
            const nctmc_reliability_cell *c = &r->reliability[b][k];
            int64_t wn = want->count[b][k];
            double mean = wn ? want->sum_nu[b][k] / (double)wn : NAN;
            double share = wn ? (double)want->noisy[b][k] / (double)wn : NAN;
            bool ok = c->count == wn && c->n_noisy == want->noisy[b][k] &&
                      (wn ? fabs(c->mean_nu - mean) <= 1e-9 && c->observed_noisy == share
                          : isnan(c->mean_nu) && isnan(c->observed_noisy));
            if (!ok) {
                bad_cells++;
                fprintf(stderr, "  %s cell (%d, %d): n %lld/%lld noisy %lld/%lld nu %.12g/%.12g "
                                "share %g/%g\n",
                        name, b, k, (long long)c->count, (long long)wn, (long long)c->n_noisy,
                        (long long)want->noisy[b][k], c->mean_nu, mean, c->observed_noisy,
                        share);
            }
            if (wn) {
                filled++;
                err += (double)wn * fabs(mean - share);
                n += wn;
            }
        }
        double want_band = n ? err / (double)n : NAN;
        CHECK(n ? fabs(r->ece_bucket[b] - want_band) <= 1e-9 : isnan(r->ece_bucket[b]),
              "%s: ECE of bucket %d is %.12g, want %.12g", name, b, r->ece_bucket[b], want_band);
        err_all += err;
    }
    double want_ece = want->total ? err_all / (double)want->total : NAN;
    CHECK(bad_cells == 0, "%s: %d of the table's cells differ from the brute force", name,
          bad_cells);
    CHECK(r->n_reliability == want->total, "%s: %lld positions in the table, want %lld", name,
          (long long)r->n_reliability, (long long)want->total);
    CHECK(want->total ? fabs(r->ece - want_ece) <= 1e-9 : isnan(r->ece),
          "%s: ECE %.12g, want %.12g", name, r->ece, want_ece);
    printf("  reliability (%s): %lld positions in %d cells, ECE %.4f\n", name,
           (long long)want->total, filled, r->ece);
}

/* A model whose rate head outputs h at every position (zero weights):
 * lambda_theta = e^h sigma_t, a known value. */
static void set_rate_head(nctmc_model *m, float h)
{
    float w[16] = {0};   /* d_model of make_model() */
    write_tensor(m, "output_layer.rate_head.weight", w, 16);
    write_tensor(m, "output_layer.rate_head.bias", &h, 1);
}

typedef struct rel_case {
    const char *name;
    int process;
    float pu;
    float h_offset;   /* h - log((S - 1) / S): 0 is the exact reverse of uniform data */
} rel_case;

static void rel_run(const rel_case *c, nctmc_eval_result *r)
{
    nctmc_model *m = make_model(c->process, NCTMC_SCHEDULE_LINEAR, c->pu, 0, 0, 3);
    if (!m)
        return;
    randomize(m, 21, 0.3f);   /* everything but the rate head matters nothing */
    float h = logf((float)(S_EX - 1) / (float)S_EX) + c->h_offset;
    set_rate_head(m, h);
    ref_proc rp = ref_make(c->process, NCTMC_SCHEDULE_LINEAR, S_EX, c->pu, 0);
    int64_t n_seq = 1500;
    int32_t *tok = data_tokens(n_seq, ref_n_data(&rp), 43);
    nctmc_eval_params p = basic_params(tok, n_seq);
    p.batch_size = 256;
    nctmc_eval_result_init(r);
    nctmc_status st = nctmc_eval(m, &p, r);
    CHECK(st == NCTMC_OK, "%s: eval: %s", c->name, nctmc_model_last_error(m));
    rel_table want;
    rel_brute_force(&rp, &p, r->t_max, h, &want);
    rel_compare(c->name, r, &want);
    /* h = log(3/4) rounded to float: e^h is off by ~3e-8 relatively, which
     * near T (lam_n - lam_c ~ a_T lam_n) moves nu_hat by ~1e-5 */
    if (c->process == NCTMC_PROCESS_UNIFORM && c->h_offset == 0.0f)
        CHECK(want.max_closed_form_error < 1e-4,
              "%s: the reference nu_hat is off the closed form by %g", c->name,
              want.max_closed_form_error);
    free(tok);
    nctmc_model_free(m);
}

static void test_reliability(void)
{
    static const rel_case cases[] = {
        {"uniform, exact reverse of uniform data", NCTMC_PROCESS_UNIFORM, 0, 0.0f},
        {"uniform, rates 4.5x too high", NCTMC_PROCESS_UNIFORM, 0, 1.5f},
        {"uniform, rates 4.5x too low", NCTMC_PROCESS_UNIFORM, 0, -1.5f},
        {"mixture p_u = .5", NCTMC_PROCESS_MIXTURE, 0.5f, 0.5f},
        {"masked", NCTMC_PROCESS_MASKED, 0, 0.0f},
    };
    nctmc_eval_result r[5];
    for (int k = 0; k < 5; k++)
        rel_run(&cases[k], &r[k]);
    /* what the table is for: the calibrated model's nu_hat matches the
     * observed noise share up to sampling error (cells of thousands of
     * positions: ~0.01), the wrong ones do not; clipping is reached */
    CHECK(r[0].ece < 0.02 && r[1].ece > 0.1 && r[2].ece > 0.1,
          "ECE calibrated %.4f, too high %.4f, too low %.4f", r[0].ece, r[1].ece, r[2].ece);
    CHECK(r[1].reliability[NCTMC_EVAL_BUCKETS - 1][NCTMC_EVAL_NU_BINS - 1].count > 0 &&
              r[2].reliability[NCTMC_EVAL_BUCKETS - 1][0].count > 0,
          "rates past lam_n land in the last bin, below lam_c in the first");
    bool masked_empty = r[4].n_reliability == 0 && isnan(r[4].ece);
    for (int b = 0; b < NCTMC_EVAL_BUCKETS; b++)
        for (int k = 0; k < NCTMC_EVAL_NU_BINS; k++)
            masked_empty = masked_empty && r[4].reliability[b][k].count == 0;
    CHECK(masked_empty, "the masked process has an empty table");
}

typedef struct progress_log {
    int calls;
    int stop_at;
    int64_t last_done, total;
    bool monotonic;
} progress_log;

static int32_t on_progress(int64_t done, int64_t total, void *user)
{
    progress_log *pl = user;
    pl->calls++;
    pl->monotonic = pl->monotonic && done > pl->last_done && done <= total;
    pl->last_done = done;
    pl->total = total;
    return pl->calls != pl->stop_at;
}

static void test_cancel(void)
{
    nctmc_model *m = make_model(NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 3);
    if (!m)
        return;
    randomize(m, 8, 0.3f);
    int32_t *tok = data_tokens(10, S_EX, 2);
    nctmc_eval_params p = basic_params(tok, 10);
    p.n_time_samples = 4;
    p.batch_size = 8;
    progress_log pl = {0, 0, 0, 0, true};
    p.progress = on_progress;
    p.user_data = &pl;
    nctmc_eval_result r;
    nctmc_eval_result_init(&r);
    nctmc_status st = nctmc_eval(m, &p, &r);
    CHECK(st == NCTMC_OK && pl.calls == 5 && pl.monotonic && pl.last_done == 40 &&
              pl.total == 40,
          "progress: st %d, %d calls, last %lld of %lld", st, pl.calls,
          (long long)pl.last_done, (long long)pl.total);
    /* stop after the second pass: 16 rows = 4 whole sequences */
    progress_log stop = {0, 2, 0, 0, true};
    p.user_data = &stop;
    nctmc_eval_result rc;
    nctmc_eval_result_init(&rc);
    st = nctmc_eval(m, &p, &rc);
    CHECK(st == NCTMC_ERR_CANCELLED && stop.calls == 2, "cancel: st %d after %d calls", st,
          stop.calls);
    CHECK(strstr(nctmc_model_last_error(m), "cancel") != NULL, "cancel message: %s",
          nctmc_model_last_error(m));
    CHECK(rc.n_tokens == 4 * L_EX && isfinite(rc.nelbo_bits_per_token) &&
              isfinite(rc.std_error_bits),
          "cancelled result covers 4 sequences: n_tokens %lld, nelbo %g", (long long)rc.n_tokens,
          rc.nelbo_bits_per_token);
    free(tok);
    nctmc_model_free(m);
}

/* Fails with `want`, a message, and the result untouched. */
static void expect_error(nctmc_model *m, const nctmc_eval_params *p, nctmc_status want,
                         const char *what)
{
    nctmc_eval_result r, before;
    nctmc_eval_result_init(&r);
    r.nelbo_bits_per_token = 12345.0;
    before = r;
    nctmc_status st = nctmc_eval(m, p, &r);
    const char *msg = nctmc_model_last_error(m);
    CHECK(st == want && msg[0] != '\0' && memcmp(&r, &before, sizeof r) == 0,
          "%s: status %d (want %d), message \"%s\"", what, st, want, msg);
    if (getenv("TEST_EVAL_VERBOSE"))
        printf("  %-28s -> %s\n", what, msg);
}

static void test_bad_params(void)
{
    nctmc_model *m = make_model(NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 3);
    nctmc_model *mk = make_model(NCTMC_PROCESS_MASKED, NCTMC_SCHEDULE_LINEAR, 0, 0, 0, 3);
    nctmc_model *mkl = make_model(NCTMC_PROCESS_MASKED, NCTMC_SCHEDULE_LOGLINEAR, 0, 1e-3f, 0, 3);
    nctmc_model *ul = make_model(NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LOGLINEAR, 0, 1e-3f, 0, 3);
    nctmc_model *mc = make_model(NCTMC_PROCESS_UNIFORM, NCTMC_SCHEDULE_LINEAR, 0, 0, 2, 3);
    if (!m || !mk || !mkl || !ul || !mc)
        return;
    int32_t tok[2 * L_EX] = {0, 1, 2, 3, 2, 1};
    nctmc_eval_params p = basic_params(tok, 2);
    nctmc_eval_result r;
    nctmc_eval_result_init(&r);
    CHECK(nctmc_eval(NULL, &p, &r) == NCTMC_ERR_INVALID_ARGUMENT, "NULL model");
    expect_error(m, NULL, NCTMC_ERR_INVALID_ARGUMENT, "NULL params");
    CHECK(nctmc_eval(m, &p, NULL) == NCTMC_ERR_INVALID_ARGUMENT, "NULL result");
    nctmc_eval_result rs;
    nctmc_eval_result_init(&rs);
    rs.struct_size = 3;
    CHECK(nctmc_eval(m, &p, &rs) == NCTMC_ERR_INVALID_ARGUMENT && rs.struct_size == 3,
          "bad result struct_size");
    nctmc_eval_params q;
#define BAD(field, value, model, status)                                  \
    do {                                                                   \
        q = p;                                                             \
        q.field = value;                                                   \
        expect_error(model, &q, status, #field " = " #value);              \
    } while (0)
    /* below the first published layout (which ended at user_data) */
    BAD(struct_size, offsetof(nctmc_eval_params, user_data), m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(n_sequences, 0, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(n_sequences, -3, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(n_sequences, ((int64_t)1 << 48) + 1, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(n_sequences, INT64_MAX, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(length, 0, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(length, L_EX + 1, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(tokens, NULL, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(batch_size, 0, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(batch_size, -1, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(n_time_samples, 0, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(time_sampling, NCTMC_TIME_SAMPLING_LOGIT, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(time_sampling, 3, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(time_sampling, -1, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(t_max, NAN, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(t_max, -0.25f, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(t_max, 1.5f, m, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(t_max, 1.0f, m, NCTMC_ERR_INVALID_ARGUMENT);      /* sigma -> inf at 1 */
    BAD(t_max, 0.5f, mk, NCTMC_ERR_INVALID_ARGUMENT);     /* masked needs T = 1 */
    BAD(t_max, 0.0f, mkl, NCTMC_ERR_UNSUPPORTED);         /* a_1 = eps > 0 */
    BAD(labels, tok, m, NCTMC_ERR_INVALID_ARGUMENT);      /* unconditional model */
    int32_t bad_tok[2 * L_EX] = {0, 1, 2, 3, 4, 1};
    BAD(tokens, bad_tok, m, NCTMC_ERR_INVALID_ARGUMENT);
    int32_t neg_tok[2 * L_EX] = {0, -1, 2, 3, 2, 1};
    BAD(tokens, neg_tok, m, NCTMC_ERR_INVALID_ARGUMENT);
    int32_t mask_tok[2 * L_EX] = {0, 1, 2, 0, 3, 1}; /* 3 is the mask */
    BAD(tokens, mask_tok, mk, NCTMC_ERR_INVALID_ARGUMENT);
    int32_t labels_bad[2] = {0, 3}, labels_neg[2] = {-1, 0};
    BAD(labels, labels_bad, mc, NCTMC_ERR_INVALID_ARGUMENT);
    BAD(labels, labels_neg, mc, NCTMC_ERR_INVALID_ARGUMENT);
#undef BAD
    /* what is accepted */
    int32_t labels_ok[2] = {1, 2};  /* 2 = the null label */
    q = p;
    q.labels = labels_ok;
    CHECK(nctmc_eval(mc, &q, &r) == NCTMC_OK, "labels incl. null: %s",
          nctmc_model_last_error(mc));
    q = p;
    q.t_max = 1.0f;
    CHECK(nctmc_eval(ul, &q, &r) == NCTMC_OK && r.t_max == 1.0, "loglinear at T = 1: %s",
          nctmc_model_last_error(ul));
    q.n_sequences = 1;
    int32_t masked_ok[L_EX] = {2, 0, 1};
    q.tokens = masked_ok;
    CHECK(nctmc_eval(mk, &q, &r) == NCTMC_OK && r.t_max == 1.0 && isnan(r.std_error_bits),
          "masked at T = 1, one sequence (no standard error): %s", nctmc_model_last_error(mk));
    q.t_max = 0.0f;
    CHECK(nctmc_eval(mk, &q, &r) == NCTMC_OK && r.t_max == 1.0, "masked automatic T");
    q = p;
    q.t_max = 0.0f;
    CHECK(nctmc_eval(m, &q, &r) == NCTMC_OK && r.t_max == (double)0.999f,
          "uniform automatic T = %.9g", r.t_max);
    q.batch_size = 100000; /* more than there are rows: capped */
    CHECK(nctmc_eval(m, &q, &r) == NCTMC_OK, "large batch_size: %s", nctmc_model_last_error(m));
    nctmc_model_free(m);
    nctmc_model_free(mk);
    nctmc_model_free(mkl);
    nctmc_model_free(ul);
    nctmc_model_free(mc);
}

static void test_determinism(void)
{
    nctmc_model *m = make_model(NCTMC_PROCESS_MIXTURE, NCTMC_SCHEDULE_LINEAR, 0.3f, 0, 2, 4);
    if (!m)
        return;
    randomize(m, 12, 0.4f);
    int32_t *tok = data_tokens(12, S_EX - 1, 7);
    nctmc_eval_params p = basic_params(tok, 12);
    p.n_time_samples = 5;
    nctmc_eval_result a, b;
    nctmc_eval_result_init(&a);
    nctmc_eval_result_init(&b);
    nctmc_eval(m, &p, &a);
    nctmc_eval(m, &p, &b);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "same seed: results differ (%.17g vs %.17g)",
          a.nelbo_bits_per_token, b.nelbo_bits_per_token);
    /* The draws do not depend on batch_size; the CPU backend's products
     * round a row differently in some batch shapes (seen: 60 rows of 3
     * tokens vs 8), so other sizes agree to float rounding, not bits. */
    static const int32_t batches[] = {1, 7, 60};
    for (int k = 0; k < 3; k++) {
        nctmc_eval_params q = p;
        q.batch_size = batches[k];
        nctmc_eval_result_init(&b);
        nctmc_eval(m, &q, &b);
        double d = fabs(b.nelbo_bits_per_token - a.nelbo_bits_per_token);
        CHECK(d <= 1e-6 * a.nelbo_bits_per_token &&
                  fabs(b.std_error_bits - a.std_error_bits) <= 1e-5 * a.std_error_bits &&
                  b.buckets[3].n_noisy == a.buckets[3].n_noisy,
              "batch_size %d changes the result: %.17g vs %.17g, se %.17g vs %.17g", batches[k],
              b.nelbo_bits_per_token, a.nelbo_bits_per_token, b.std_error_bits,
              a.std_error_bits);
        if (d != 0.0)
            printf("  note: batch_size %d vs 8 differ by %.3g bits/token (backend rounding)\n",
                   batches[k], d);
    }
    nctmc_eval_params q = p;
    q.seed = 6;
    nctmc_eval_result_init(&b);
    nctmc_eval(m, &q, &b);
    CHECK(b.nelbo_bits_per_token != a.nelbo_bits_per_token, "another seed, same result");
    /* NULL labels are the null label (n_classes = 2) */
    int32_t nulls[12], ones[12];
    for (int s = 0; s < 12; s++) {
        nulls[s] = 2;
        ones[s] = 1;
    }
    q = p;
    q.labels = nulls;
    nctmc_eval_result_init(&b);
    nctmc_eval(m, &q, &b);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "NULL labels differ from explicit null labels");
    q.labels = ones;
    nctmc_eval_result_init(&b);
    nctmc_eval(m, &q, &b);
    CHECK(b.nelbo_bits_per_token != a.nelbo_bits_per_token, "labels have no effect");
    /* a context with more threads computes the same bits */
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    cp.n_threads = 3;
    nctmc_context *ctx3 = NULL;
    nctmc_context_create(&cp, &ctx3);
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    nctmc_model_get_config(m, &c);
    nctmc_model *m3 = NULL;
    if (ctx3 && nctmc_model_create(ctx3, &c, &m3) == NCTMC_OK) {
        randomize(m3, 12, 0.4f);
        nctmc_eval_result_init(&b);
        nctmc_eval(m3, &p, &b);
        CHECK(memcmp(&a, &b, sizeof a) == 0, "3 threads: %.17g vs %.17g",
              b.nelbo_bits_per_token, a.nelbo_bits_per_token);
    }
    nctmc_model_free(m3);
    nctmc_context_free(ctx3);
    free(tok);
    nctmc_model_free(m);
}

/* tests/philox_ref.h on Random123's known-answer vectors for Philox4x32-10
 * (kat_vectors: counter, key words k0 k1, result); test_eval_math.c holds
 * it to the library's own philox4x32_10 as well. */
static void test_philox_ref(void)
{
    static const uint32_t kat[][10] = {
        {0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u,
         0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
         0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
         0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u},
    };
    for (size_t n = 0; n < sizeof kat / sizeof kat[0]; n++) {
        const uint32_t *v = kat[n];
        philox_ref_block r = philox_ref(v[0], v[1], v[2], v[3], (uint64_t)v[5] << 32 | v[4]);
        CHECK(r.w[0] == v[6] && r.w[1] == v[7] && r.w[2] == v[8] && r.w[3] == v[9],
              "Philox4x32-10 known answer %zu: %08x %08x %08x %08x, want %08x %08x %08x %08x",
              n, r.w[0], r.w[1], r.w[2], r.w[3], v[6], v[7], v[8], v[9]);
    }
}

int main(void)
{
    nctmc_context_params cp;
    nctmc_context_params_init(&cp);
    cp.backend = "cpu";
    /* one thread: the tiny model's products gain nothing from a pool */
    cp.n_threads = 1;
    nctmc_status st = nctmc_context_create(&cp, &g_ctx);
    CHECK(st == NCTMC_OK, "context");
    if (st != NCTMC_OK)
        return test_finish("eval");
    static const struct {
        const char *name;
        void (*run)(void);
    } parts[] = {{"philox", test_philox_ref},
                 {"swap identity", test_swap_identity}, {"bound", test_bound},
                 {"calibration", test_calibration}, {"reliability", test_reliability},
                 {"cancel", test_cancel},
                 {"bad parameters", test_bad_params}, {"determinism", test_determinism}};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        clock_t t0 = clock();
        parts[k].run();
        printf("%s: %.1f s of CPU\n", parts[k].name, cpu_seconds(t0));
    }
    nctmc_context_free(g_ctx);
    return test_finish("eval");
}
