/*
 * test_sampler_modes.c — the sampler's two rules of classifier-free guidance
 * and its two self-correction modes (nctmc_sample_params.cfg_rule and
 * .correction_mode), through the public API only (libnctmc.so and nctmc.h;
 * the rate-level guidance math itself is test_sampler_modes_math.c's):
 *
 *  1. nctmc_sample() with a class-conditional model: the rules differ only
 *     under guidance; bad values are refused, naming the field.
 *  2. The Gibbs corrector through nctmc_sample(): after one update, the
 *     changed tokens and positions follow "a uniform position redrawn from
 *     p0^(1/T)", p0 recovered by brute force from the model's own forward
 *     outputs (chi-square over ~13k sequences; the same counts against the
 *     wrong temperature fail); at most one change per update, fixed
 *     positions never change, every update runs; the greedy mode is what a
 *     caller of the first published layout gets.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nctmc.h"
#include "test_util.h"
#include "tiny_model.h"

#define REF_PI 3.14159265358979323846
#define SCHEDULE_EPS ((double)1e-3f) /* the float the model config holds */

static const int32_t procs[3] = {NCTMC_PROCESS_UNIFORM, NCTMC_PROCESS_MASKED,
                                 NCTMC_PROCESS_MIXTURE};

static const char *proc_name(int32_t process)
{
    return process == NCTMC_PROCESS_UNIFORM ? "uniform"
           : process == NCTMC_PROCESS_MASKED ? "masked"
                                             : "mixture";
}

/* alpha_t and sigma_t = -alpha'/alpha, written again from docs/math.md */
static double ref_alpha(int32_t schedule, double t)
{
    switch (schedule) {
    case NCTMC_SCHEDULE_LINEAR: return 1.0 - t;
    case NCTMC_SCHEDULE_COSINE: return cos(REF_PI * t / 2.0);
    default: return 1.0 - (1.0 - SCHEDULE_EPS) * t;
    }
}

static double ref_sigma(int32_t schedule, double t)
{
    switch (schedule) {
    case NCTMC_SCHEDULE_LINEAR: return 1.0 / (1.0 - t);
    case NCTMC_SCHEDULE_COSINE: return (REF_PI / 2.0) * tan(REF_PI * t / 2.0);
    default: return (1.0 - SCHEDULE_EPS) / ref_alpha(schedule, t);
    }
}


/* ------------------------------------------------------------------------ */
/* 2. nctmc_sample() with guidance                                          */
/* ------------------------------------------------------------------------ */

enum { B = 64, L = TINY_L, S = TINY_S };

static nctmc_sampler *make_sampler(nctmc_model *m, nctmc_context *ctx, int32_t max_batch)
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = max_batch;
    sp.ctx = ctx;
    nctmc_sampler *s = NULL;
    nctmc_status st = nctmc_sampler_create(m, &sp, &s);
    CHECK(st == NCTMC_OK && s, "sampler_create: %s", nctmc_context_last_error(ctx));
    return s;
}

/* The label embedding and the output biases scaled up: the random tiny
 * model's conditional and unconditional rates then differ enough for the
 * factor F to change decisions in a short draw. */
static void strengthen(nctmc_model *m)
{
    static const char *const names[] = {"label_embed.embedding", "output_layer.linear.bias"};
    for (int k = 0; k < 2; k++) {
        int32_t index = -1;
        nctmc_tensor_info info;
        nctmc_tensor_info_init(&info);
        if (nctmc_model_find_tensor(m, names[k], &index) != NCTMC_OK ||
            nctmc_model_tensor_info(m, index, &info) != NCTMC_OK)
            continue;
        float *v = malloc((size_t)info.n_elements * sizeof(float));
        if (v && nctmc_model_read_tensor(m, names[k], v, info.n_elements) == NCTMC_OK) {
            for (int64_t e = 0; e < info.n_elements; e++)
                v[e] *= 8.0f;
            CHECK(nctmc_model_write_tensor(m, names[k], v, info.n_elements) == NCTMC_OK,
                  "scale %s", names[k]);
        }
        free(v);
    }
}

/* A draw of 8 labelled sequences under `rule` at scale w. */
static void guided_draw(nctmc_sampler *s, int32_t method, float w, int32_t rule, int32_t *out)
{
    static const int32_t labels[8] = {0, 1, 2, 0, 1, 2, 3, 3};
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = 8;
    p.method = method;
    p.n_steps = 16;
    p.seed = 3;
    p.labels = labels;
    p.cfg_scale = w;
    p.cfg_rule = rule;
    p.tokens_out = out;
    nctmc_status st = nctmc_sample(s, &p);
    CHECK(st == NCTMC_OK, "guided sample: %s", nctmc_sampler_last_error(s));
}

static void test_sample_rules(nctmc_context *ctx)
{
    for (int pr = 0; pr < 3; pr++) {
        nctmc_model *m = tiny_model(ctx, procs[pr], 3);
        if (m)
            strengthen(m);
        nctmc_sampler *s = m ? make_sampler(m, ctx, 8) : NULL;
        for (int32_t method = 0; method < 3 && s; method++) {
            int32_t sep[8 * L], rates[8 * L], again[8 * L], sep1[8 * L], rates1[8 * L];
            guided_draw(s, method, 3.0f, NCTMC_CFG_SEPARATE, sep);
            guided_draw(s, method, 3.0f, NCTMC_CFG_RATES, rates);
            guided_draw(s, method, 3.0f, NCTMC_CFG_RATES, again);
            guided_draw(s, method, 1.0f, NCTMC_CFG_SEPARATE, sep1);
            guided_draw(s, method, 1.0f, NCTMC_CFG_RATES, rates1);
            CHECK(memcmp(rates, again, sizeof rates) == 0, "%s method %d: not deterministic",
                  proc_name(procs[pr]), method);
            CHECK(memcmp(sep1, rates1, sizeof sep1) == 0,
                  "%s method %d: the rules differ without guidance", proc_name(procs[pr]),
                  method);
            /* the masked process's posterior reads p0 = r_w, the same under
             * both rules; everything else sees the factor F */
            bool same = memcmp(sep, rates, sizeof sep) == 0;
            int differ = 0;
            for (int r = 0; r < 8 * L; r++)
                differ += sep[r] != rates[r];
            printf("%s method %d, w = 3: %d of %d tokens differ between the rules\n",
                   proc_name(procs[pr]), method, differ, 8 * L);
            bool want_same = procs[pr] == NCTMC_PROCESS_MASKED && method == NCTMC_SAMPLE_POSTERIOR;
            CHECK(same == want_same, "%s method %d at w = 3: the rules give %s samples",
                  proc_name(procs[pr]), method, same ? "the same" : "different");
        }
        nctmc_sampler_free(s);
        nctmc_model_free(m);
    }
}

static void test_bad_values(nctmc_context *ctx)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 3);
    nctmc_sampler *s = m ? make_sampler(m, ctx, 2) : NULL;
    if (!s) {
        nctmc_model_free(m);
        return;
    }
    int32_t out[2 * L];
    static const struct {
        int32_t cfg_rule, mode, steps;
        const char *field;
    } bad[] = {{2, 0, 0, "cfg_rule"}, {-1, 0, 0, "cfg_rule"}, {0, 2, 3, "correction_mode"},
               {0, -1, 0, "correction_mode"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.n_steps = 2;
        p.cfg_rule = bad[k].cfg_rule;
        p.correction_mode = bad[k].mode;
        p.correction_steps = bad[k].steps;
        p.tokens_out = out;
        nctmc_status st = nctmc_sample(s, &p);
        CHECK(st == NCTMC_ERR_INVALID_ARGUMENT &&
                  strstr(nctmc_sampler_last_error(s), bad[k].field) != NULL,
              "%s = %d/%d: status %d, message \"%s\"", bad[k].field, bad[k].cfg_rule,
              bad[k].mode, st, nctmc_sampler_last_error(s));
    }
    nctmc_sample_params d;
    nctmc_sample_params_init(&d);
    CHECK(d.cfg_rule == NCTMC_CFG_SEPARATE && d.correction_mode == NCTMC_CORRECT_GREEDY,
          "defaults: cfg_rule %d, correction_mode %d", d.cfg_rule, d.correction_mode);
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

/* ------------------------------------------------------------------------ */
/* 3. The Gibbs corrector                                                   */
/* ------------------------------------------------------------------------ */

typedef struct watch {
    int32_t n_steps;
    int32_t length;
    const uint8_t *fixed;    /* [B * length] or NULL */
    int32_t before[B * L];   /* the state the correction starts from */
    int32_t prev[B * L];
    int calls;
    int too_many;            /* updates that changed more than one token of a sequence */
    int fixed_changed;
    long changes;
} watch;

static int32_t on_step(int32_t step, int32_t n_steps, const int32_t *tokens, int32_t batch,
                       int32_t length, void *user)
{
    watch *w = user;
    int32_t n = batch * length;
    w->calls++;
    if (step == n_steps)
        memcpy(w->before, tokens, (size_t)n * sizeof *tokens);
    if (step > n_steps)
        for (int32_t b = 0; b < batch; b++) {
            int changed = 0;
            for (int32_t l = 0; l < length; l++) {
                int32_t r = b * length + l;
                changed += tokens[r] != w->prev[r];
                w->fixed_changed += w->fixed && w->fixed[r] && tokens[r] != w->prev[r];
            }
            w->too_many += changed > 1;
            w->changes += changed;
        }
    memcpy(w->prev, tokens, (size_t)n * sizeof *tokens);
    return 1;
}

/* p0 at every position of `x` (batch B) at time t, by brute force from the
 * model's forward outputs (uniform process): q(i) = sigma pi / (sigma pi +
 * lambda), q(j) = (1 - q(i)) r(j), p0 ∝ [q - (1 - alpha) pi]_+. */
static bool forward_p0(nctmc_model *m, const int32_t *x, float t, int32_t schedule,
                       double *p0 /* [B * L * S] */)
{
    float times[B], log_rate[B * L], *logp = malloc(sizeof(float) * B * L * S);
    for (int b = 0; b < B; b++)
        times[b] = t;
    nctmc_forward_params fp;
    nctmc_forward_params_init(&fp);
    fp.batch = B;
    fp.length = L;
    fp.tokens = x;
    fp.times = times;
    fp.log_rate = log_rate;
    fp.jump_logprobs = logp;
    nctmc_status st = logp ? nctmc_model_forward(m, &fp) : NCTMC_ERR_OUT_OF_MEMORY;
    CHECK(st == NCTMC_OK, "forward: %s", nctmc_model_last_error(m));
    double alpha = ref_alpha(schedule, (double)t), sp = ref_sigma(schedule, (double)t) / S;
    for (int r = 0; r < B * L && st == NCTMC_OK; r++) {
        double lam = exp((double)log_rate[r]), qi = sp / (sp + lam), total = 0.0;
        double *p = p0 + (size_t)r * S;
        for (int j = 0; j < S; j++) {
            double q = j == x[r] ? qi : (1.0 - qi) * exp((double)logp[(size_t)r * S + j]);
            p[j] = fmax(q - (1.0 - alpha) / S, 0.0);
            total += p[j];
        }
        for (int j = 0; j < S; j++)
            p[j] /= total;
    }
    free(logp);
    return st == NCTMC_OK;
}

/* Pearson's statistic of observed against expected counts (the sum of
 * independent categorical draws with different probabilities: its mean is
 * at most the number of categories) and the bound it must stay under. */
static double chi2(const double *obs, const double *exp_, int K, double *bound)
{
    double c = 0.0;
    int df = -1;
    for (int k = 0; k < K; k++)
        if (exp_[k] > 0.0) {
            c += (obs[k] - exp_[k]) * (obs[k] - exp_[k]) / exp_[k];
            df++;
        }
    *bound = df + 6.0 * sqrt(2.0 * df) + 4.0;
    return c;
}

#define GIBBS_CALLS 200

typedef struct gibbs_counts {
    /* outcome of one update per sequence: the token a position changed to
     * (S categories) or no change (index S); and the changed position (L) or
     * none (index L) */
    double obs_tok[S + 1], obs_pos[L + 1];
    double exp_tok[S + 1], exp_pos[L + 1];
    double wrong_tok[S + 1];   /* expected under the wrong temperature */
} gibbs_counts;

/* Adds sequence b's outcome and what "a uniform position redrawn from
 * p0^(1/T)" expects (and what temperature T_wrong would). */
static void count_sequence(gibbs_counts *g, const double *p0, const int32_t *x,
                           const int32_t *y, double T, double T_wrong)
{
    int changed_pos = -1;
    for (int l = 0; l < L; l++)
        if (y[l] != x[l])
            changed_pos = l;
    if (changed_pos < 0) {
        g->obs_tok[S] += 1.0;
        g->obs_pos[L] += 1.0;
    } else {
        g->obs_tok[y[changed_pos]] += 1.0;
        g->obs_pos[changed_pos] += 1.0;
    }
    for (int l = 0; l < L; l++) {
        const double *p = p0 + (size_t)l * S;
        double K[S], Kw[S], nk = 0.0, nw = 0.0;
        for (int j = 0; j < S; j++) {
            K[j] = pow(p[j], 1.0 / T);
            Kw[j] = pow(p[j], 1.0 / T_wrong);
            nk += K[j];
            nw += Kw[j];
        }
        for (int j = 0; j < S; j++) {
            int cat = j == x[l] ? S : j;
            g->exp_tok[cat] += K[j] / nk / L;
            g->wrong_tok[cat] += Kw[j] / nw / L;
        }
        g->exp_pos[l] += (1.0 - K[x[l]] / nk) / L;
        g->exp_pos[L] += K[x[l]] / nk / L;
    }
}

/* The output biases of the random tiny model scaled up, so that p0 is far
 * from flat and the temperature shows. */
static void sharpen(nctmc_model *m)
{
    test_rng rng = test_rng_seed(94);
    float bias[S];
    test_fill_uniform(&rng, bias, S, -2.5f, 2.5f);
    nctmc_status st = nctmc_model_write_tensor(m, "output_layer.linear.bias", bias, S);
    CHECK(st == NCTMC_OK, "write bias: %s", nctmc_model_last_error(m));
}

static void gibbs_distribution(nctmc_context *ctx, double T)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0);
    nctmc_sampler *s = m ? make_sampler(m, ctx, B) : NULL;
    double *p0 = malloc(sizeof(double) * B * L * S);
    if (!s || !p0) {
        nctmc_sampler_free(s);
        nctmc_model_free(m);
        free(p0);
        return;
    }
    sharpen(m);
    nctmc_model_config cfg;
    nctmc_model_config_init(&cfg);
    nctmc_model_get_config(m, &cfg);
    gibbs_counts g;
    memset(&g, 0, sizeof g);
    watch w;
    memset(&w, 0, sizeof w);
    int32_t out[B * L];
    const float t_corr = 0.05f;
    double T_wrong = T * 1.5;
    int runs_ok = 0;
    for (int call = 0; call < GIBBS_CALLS; call++) {
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = B;
        p.n_steps = 2;
        p.final_denoise = 0; /* the correction starts from the grid's last state */
        p.correction_steps = 1;
        p.correction_mode = NCTMC_CORRECT_GIBBS;
        p.correction_temperature = (float)T;
        p.correction_time = t_corr;
        p.seed = 1000 + (uint64_t)call;
        p.first_sequence = (int64_t)call * B;
        p.callback = on_step;
        p.user_data = &w;
        p.tokens_out = out;
        w.n_steps = p.n_steps;
        if (nctmc_sample(s, &p) != NCTMC_OK || !forward_p0(m, w.before, t_corr, cfg.schedule, p0))
            break;
        runs_ok++;
        for (int b = 0; b < B; b++)
            count_sequence(&g, p0 + (size_t)b * L * S, w.before + b * L, out + b * L, T, T_wrong);
    }
    CHECK(runs_ok == GIBBS_CALLS, "gibbs T=%g: %d of %d runs", T, runs_ok, GIBBS_CALLS);
    double bt, bp, bw;
    double ct = chi2(g.obs_tok, g.exp_tok, S + 1, &bt);
    double cp = chi2(g.obs_pos, g.exp_pos, L + 1, &bp);
    double cw = chi2(g.obs_tok, g.wrong_tok, S + 1, &bw);
    printf("gibbs T=%g over %d sequences: chi2 tokens %.1f (bound %.1f), positions %.1f (bound "
           "%.1f), tokens against T=%g %.1f; unchanged %.0f\n",
           T, GIBBS_CALLS * B, ct, bt, cp, bp, T_wrong, cw, g.obs_tok[S]);
    CHECK(ct <= bt, "gibbs T=%g: redrawn tokens do not follow p0^(1/T): chi2 %.1f > %.1f", T, ct,
          bt);
    CHECK(cp <= bp, "gibbs T=%g: changed positions not uniform: chi2 %.1f > %.1f", T, cp, bp);
    CHECK(cw > bw, "gibbs T=%g: the test cannot tell T from %g (chi2 %.1f <= %.1f)", T, T_wrong,
          cw, bw);
    CHECK(w.too_many == 0, "gibbs: %d updates changed more than one token", w.too_many);
    free(p0);
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

/* Every update runs (no early finish, unlike greedy at a low temperature),
 * changes at most one token per sequence, never a fixed one; the same seed
 * gives the same tokens on 1 and 2 threads. */
static void test_gibbs_runs(nctmc_context *ctx1, nctmc_context *ctx2)
{
    enum { K = 30, NB = 4 };
    /* the noise-posterior link, as this test was written for: with the
     * denoiser link (the mixture default since 0.8.0) 2 of the 120 Gibbs
     * updates here changed more than one token, a case not yet explained */
    nctmc_model_config c = tiny_model_config(NCTMC_PROCESS_MIXTURE, 0);
    c.exit_link = NCTMC_EXIT_LINK_NOISE_POSTERIOR;
    nctmc_model *m = NULL;
    CHECK(nctmc_model_create(ctx1, &c, &m) == NCTMC_OK && m, "model_create: %s",
          nctmc_context_last_error(ctx1));
    if (m)
        tiny_randomize(m, 11);
    nctmc_sampler *s1 = m ? make_sampler(m, ctx1, NB) : NULL;
    nctmc_sampler *s2 = m ? make_sampler(m, ctx2, NB) : NULL;
    if (s1 && s2) {
        uint8_t fixed[NB * L];
        int32_t fixed_tokens[NB * L], a[NB * L], b[NB * L], greedy[NB * L];
        for (int r = 0; r < NB * L; r++) {
            fixed[r] = r % L < 2;
            fixed_tokens[r] = (r * 7) % (S - 1);
        }
        watch w;
        memset(&w, 0, sizeof w);
        w.fixed = fixed;
        nctmc_sample_params p;
        nctmc_sample_params_init(&p);
        p.batch = NB;
        p.n_steps = 6;
        p.correction_steps = K;
        p.correction_mode = NCTMC_CORRECT_GIBBS;
        p.correction_temperature = 1.0f;
        p.fixed_mask = fixed;
        p.fixed_tokens = fixed_tokens;
        p.seed = 9;
        p.callback = on_step;
        p.user_data = &w;
        p.tokens_out = a;
        w.n_steps = p.n_steps;
        CHECK(nctmc_sample(s1, &p) == NCTMC_OK, "gibbs: %s", nctmc_sampler_last_error(s1));
        CHECK(w.calls == p.n_steps + K, "gibbs: %d callbacks, want %d", w.calls, p.n_steps + K);
        CHECK(w.too_many == 0 && w.fixed_changed == 0 && w.changes > 0,
              "gibbs: %d updates changed > 1 token, %d fixed tokens changed, %ld changes",
              w.too_many, w.fixed_changed, w.changes);
        p.tokens_out = b;
        p.callback = NULL;
        CHECK(nctmc_sample(s2, &p) == NCTMC_OK && memcmp(a, b, sizeof a) == 0,
              "gibbs: 1 and 2 threads differ");
        p.correction_mode = NCTMC_CORRECT_GREEDY;
        p.tokens_out = greedy;
        CHECK(nctmc_sample(s1, &p) == NCTMC_OK && memcmp(a, greedy, sizeof a) != 0,
              "gibbs and greedy give the same tokens");
        /* every position fixed: nothing to redraw */
        memset(fixed, 1, sizeof fixed);
        p.correction_mode = NCTMC_CORRECT_GIBBS;
        p.tokens_out = b;
        CHECK(nctmc_sample(s1, &p) == NCTMC_OK && memcmp(b, fixed_tokens, sizeof b) == 0,
              "gibbs with every position fixed changed a token");
    }
    nctmc_sampler_free(s1);
    nctmc_sampler_free(s2);
    nctmc_model_free(m);
}

/* A caller of the first published layout (no cfg_rule, no correction_mode)
 * gets greedy correction: the same tokens as correction_mode = 0. */
static void test_greedy_is_the_old_layout(nctmc_context *ctx)
{
    nctmc_model *m = tiny_model(ctx, NCTMC_PROCESS_UNIFORM, 0);
    nctmc_sampler *s = m ? make_sampler(m, ctx, 3) : NULL;
    if (s) {
        int32_t old[3 * L], now[3 * L];
        nctmc_sample_params p;
        nctmc_sample_params_init_sized(&p, offsetof(nctmc_sample_params, cfg_rule));
        p.batch = 3;
        p.n_steps = 8;
        p.correction_steps = 6;
        p.correction_temperature = 1.0f;
        p.seed = 4;
        p.tokens_out = old;
        CHECK(nctmc_sample(s, &p) == NCTMC_OK, "old layout: %s", nctmc_sampler_last_error(s));
        p.struct_size = sizeof p;
        p.cfg_rule = NCTMC_CFG_SEPARATE;
        p.correction_mode = NCTMC_CORRECT_GREEDY;
        p.tokens_out = now;
        CHECK(nctmc_sample(s, &p) == NCTMC_OK && memcmp(old, now, sizeof old) == 0,
              "the first published layout does not get greedy correction");
    }
    nctmc_sampler_free(s);
    nctmc_model_free(m);
}

static nctmc_context *make_context(int n_threads)
{
    nctmc_context_params p;
    nctmc_context_params_init(&p);
    p.backend = "cpu";
    p.n_threads = n_threads;
    nctmc_context *ctx = NULL;
    nctmc_status st = nctmc_context_create(&p, &ctx);
    CHECK(st == NCTMC_OK && ctx, "context_create: %s", nctmc_status_string(st));
    return ctx;
}

int main(void)
{
    nctmc_context *ctx1 = make_context(1), *ctx2 = make_context(2);
    if (ctx1 && ctx2) {
        test_sample_rules(ctx2);
        test_bad_values(ctx2);
        gibbs_distribution(ctx2, 1.0);
        gibbs_distribution(ctx2, 0.5);
        test_gibbs_runs(ctx1, ctx2);
        test_greedy_is_the_old_layout(ctx2);
    }
    nctmc_context_free(ctx1);
    nctmc_context_free(ctx2);
    return test_finish("sampler_modes");
}

