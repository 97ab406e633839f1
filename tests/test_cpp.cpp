/*
 * test_cpp.cpp — the C++ wrappers of include/nctmc.hpp, through the public
 * library only: construction of each handle, moves (a moved-from object is
 * empty and safe to destroy, the moved-to one works, move assignment frees
 * what it replaces), failures thrown as nctmc::error with the library's
 * status and message (read from the handle the C call stores it in), and
 * sampling that matches the C API bit for bit. Built as C++11 with
 * -pedantic; run it under ASan too (a handle freed twice or leaked shows).
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nctmc.hpp"

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            std::fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, \
                         #cond);                                                  \
            std::fprintf(stderr, __VA_ARGS__);                                    \
            std::fprintf(stderr, "\n");                                           \
            std::exit(1);                                                         \
        }                                                                         \
    } while (0)

static const int32_t S = 12, L = 8, BATCH = 2;

static nctmc_model_config tiny_config()
{
    nctmc_model_config c;
    nctmc_model_config_init(&c);
    c.vocab_size = S;
    c.seq_len = L;
    c.n_layers = 1;
    c.d_model = 16;
    c.n_heads = 2;
    c.cond_dim = 16;
    c.seed = 3;
    return c;
}

static nctmc_sample_params sample_params(uint64_t seed)
{
    nctmc_sample_params p;
    nctmc_sample_params_init(&p);
    p.batch = BATCH;
    p.length = L;
    p.n_steps = 4;
    p.seed = seed;
    return p;
}

static nctmc_sampler_params sampler_params()
{
    nctmc_sampler_params sp;
    nctmc_sampler_params_init(&sp);
    sp.max_batch = BATCH;
    return sp;
}

/* The same draw through the C API directly. */
static std::vector<int32_t> sample_with_c(nctmc_model *m, uint64_t seed)
{
    nctmc_sampler_params sp = sampler_params();
    nctmc_sampler *s = nullptr;
    CHECK(nctmc_sampler_create(m, &sp, &s) == NCTMC_OK, "C sampler_create");
    std::vector<int32_t> out(static_cast<std::size_t>(BATCH * L));
    nctmc_sample_params p = sample_params(seed);
    p.tokens_out = out.data();
    CHECK(nctmc_sample(s, &p) == NCTMC_OK, "C sample: %s", nctmc_sampler_last_error(s));
    nctmc_sampler_free(s);
    return out;
}

static void test_construct_and_sample()
{
    nctmc::context ctx = nctmc::context::create("cpu", 1);
    CHECK(ctx && ctx.backend() == "cpu" && ctx.n_threads() == 1, "context");
    nctmc::model m(ctx, tiny_config());
    CHECK(m && m.seq_len() == L && m.vocab_size() == S, "model getters");
    CHECK(m.config().n_layers == 1, "config");
    nctmc_sampler_params sp = sampler_params();
    nctmc::sampler s(m, &sp);
    std::vector<int32_t> a = s.sample(sample_params(5), L);
    CHECK(a.size() == static_cast<std::size_t>(BATCH * L), "sample size");
    for (std::size_t i = 0; i < a.size(); i++)
        CHECK(a[i] >= 0 && a[i] < S, "token %d out of range", static_cast<int>(a[i]));
    CHECK(a == sample_with_c(m.get(), 5), "C++ and C samples differ");
    CHECK(s.sample(sample_params(5), L) == a, "not deterministic");
    CHECK(s.sample(sample_params(6), L) != a, "the seed changed nothing");

    nctmc::tokenizer tok = nctmc::tokenizer::bytes();
    CHECK(tok.vocab_size() == 256, "bytes tokenizer");
    std::vector<int32_t> ids = tok.encode("hi!");
    CHECK(ids.size() == 3 && ids[0] == 'h' && ids[2] == '!', "encode");
    CHECK(tok.decode(ids) == "hi!", "decode");
}

static void test_moves()
{
    nctmc::context ctx = nctmc::context::create("cpu", 1);
    nctmc::model m(ctx, tiny_config());
    nctmc_model *raw = m.get();
    nctmc::model moved(std::move(m));
    CHECK(!m && m.get() == nullptr && moved.get() == raw, "move construction");
    CHECK(std::string(m.last_error()).empty() && m.seq_len() == 0, "moved-from getters");

    /* move assignment frees what the target held (ASan: no leak) */
    nctmc::model other(ctx, tiny_config());
    other = std::move(moved);
    CHECK(!moved && other.get() == raw, "move assignment");
    nctmc::model &alias = other; /* self-assignment, unseen by -Wself-move */
    other = std::move(alias);
    CHECK(other.get() == raw, "self move assignment");

    nctmc_sampler_params sp = sampler_params();
    nctmc::sampler s(other, &sp);
    nctmc::sampler s2;
    CHECK(!s2, "default sampler is empty");
    s2 = std::move(s);
    CHECK(!s && s2, "sampler moved");

    /* the sampler keeps the model and the context alive */
    std::vector<int32_t> before = s2.sample(sample_params(9), L);
    other = nctmc::model();
    ctx = nctmc::context();
    CHECK(!other && !ctx, "reset by assignment");
    CHECK(s2.sample(sample_params(9), L) == before, "sample after the model was released");

    nctmc_sampler *released = s2.release();
    CHECK(!s2 && released, "release");
    nctmc_sampler_free(released);

    nctmc::tokenizer t1 = nctmc::tokenizer::bytes();
    nctmc::tokenizer t2(std::move(t1));
    CHECK(!t1 && t2.vocab_size() == 256, "tokenizer moved");
}

static void test_errors()
{
    /* context creation: the message comes from the error buffer */
    try {
        nctmc::context bad = nctmc::context::create("no-such-backend", 1);
        CHECK(false, "an unknown backend was accepted");
    } catch (const nctmc::error &e) {
        CHECK(e.status() == NCTMC_ERR_NOT_FOUND,
              "status %s", nctmc_status_string(e.status()));
        CHECK(std::strstr(e.what(), "no-such-backend") != nullptr, "message: %s", e.what());
    }

    nctmc::context ctx = nctmc::context::create("cpu", 1);
    /* model creation: the context's message */
    nctmc_model_config c = tiny_config();
    c.vocab_size = 1;
    try {
        nctmc::model bad(ctx, c);
        CHECK(false, "vocab_size 1 was accepted");
    } catch (const nctmc::error &e) {
        CHECK(e.status() == NCTMC_ERR_INVALID_ARGUMENT, "status %s",
              nctmc_status_string(e.status()));
        CHECK(std::strcmp(e.what(), nctmc_context_last_error(ctx.get())) == 0 &&
                  std::strstr(e.what(), "vocab_size") != nullptr,
              "message '%s' vs '%s'", e.what(), nctmc_context_last_error(ctx.get()));
    }

    /* loading: the path in the message, status IO */
    try {
        nctmc::model bad = nctmc::model::load(ctx, "/nonexistent/nctmc-cpp-test.safetensors");
        CHECK(false, "a missing file loaded");
    } catch (const nctmc::error &e) {
        CHECK(e.status() == NCTMC_ERR_IO, "status %s", nctmc_status_string(e.status()));
        CHECK(std::strstr(e.what(), "nctmc-cpp-test") != nullptr, "message: %s", e.what());
    }

    /* sampling: the sampler's message; the sampler stays usable */
    nctmc::model m(ctx, tiny_config());
    nctmc_sampler_params sp = sampler_params();
    nctmc::sampler s(m, &sp);
    nctmc_sample_params p = sample_params(1);
    p.batch = BATCH + 1;
    try {
        s.sample(p, L);
        CHECK(false, "a batch above max_batch was accepted");
    } catch (const nctmc::error &e) {
        CHECK(e.status() == NCTMC_ERR_INVALID_ARGUMENT, "status %s",
              nctmc_status_string(e.status()));
        CHECK(std::string(e.what()) == s.last_error() && std::strlen(e.what()) > 0,
              "message '%s' vs '%s'", e.what(), s.last_error());
        const std::runtime_error &base = e;
        CHECK(std::string(base.what()) == e.what(), "runtime_error base");
    }
    CHECK(s.sample(sample_params(1), L).size() == static_cast<std::size_t>(BATCH * L),
          "sampler after a failure");

    /* a sampler that cannot be created: the model's message */
    sp.max_batch = -1;
    try {
        nctmc::sampler bad(m, &sp);
        CHECK(false, "max_batch -1 was accepted");
    } catch (const nctmc::error &e) {
        CHECK(e.status() == NCTMC_ERR_INVALID_ARGUMENT && std::string(e.what()) == m.last_error(),
              "message '%s' vs '%s'", e.what(), m.last_error());
    }

    /* a tokenizer's own message */
    nctmc::tokenizer tok = nctmc::tokenizer::bytes();
    const int32_t bad_token = 999;
    try {
        tok.decode(&bad_token, 1);
        CHECK(false, "token 999 decoded");
    } catch (const nctmc::error &e) {
        CHECK(e.status() == NCTMC_ERR_INVALID_ARGUMENT &&
                  std::string(e.what()) == tok.last_error() && std::strlen(e.what()) > 0,
              "message '%s'", e.what());
    }
}

int main()
{
    test_construct_and_sample();
    test_moves();
    test_errors();
    std::printf("test_cpp: ok\n");
    return 0;
}
