/*
 * nctmc.hpp — C++ RAII wrappers over the C API of nctmc.h (header only).
 *
 * Needs C++11 (nothing later) and links the same library (-lnctmc); every
 * call goes through the functions of nctmc.h, whose documentation holds for
 * the wrappers too. What the header adds:
 *
 *  - Each handle (context, model, sampler, trainer, tokenizer, dataset,
 *    dataset_writer) is a move-only type that owns one C handle and frees it
 *    with the matching nctmc_X_free() in its destructor. A moved-from object
 *    is empty (get() == nullptr, explicit operator bool false): it may be
 *    destroyed, assigned to or moved from again, and nothing else. The C
 *    lifetimes still hold: a model keeps its context alive, a sampler or a
 *    trainer its model, so the C++ objects may be destroyed in any order.
 *  - A failing call throws nctmc::error, a std::runtime_error whose what()
 *    is the library's message — read from the last_error function of the
 *    handle the C function stores its errors in (nctmc.h says which), or,
 *    for context creation, from the error buffer the wrapper passes — and
 *    whose status() is the nctmc_status; when the library left no message,
 *    what() is nctmc_status_string(status).
 *  - get() gives the C handle for any function the wrappers do not cover;
 *    release() gives up ownership (the caller then frees it).
 *
 * Threads: as for the C handles (nctmc.h, "Threads").
 */
#ifndef NCTMC_HPP
#define NCTMC_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "nctmc.h"

namespace nctmc {

/** A failed library call: the status and the library's message. */
class error : public std::runtime_error {
public:
    error(nctmc_status status, const char *message)
        : std::runtime_error(message && message[0] ? message : nctmc_status_string(status)),
          status_(status) {}
    /** The nctmc_status the call returned (never NCTMC_OK). */
    nctmc_status status() const noexcept { return status_; }

private:
    nctmc_status status_;
};

namespace detail {

/** Throws nctmc::error(st, message) unless st is NCTMC_OK. */
inline void check(nctmc_status st, const char *message)
{
    if (st != NCTMC_OK)
        throw error(st, message);
}

/** One owned C handle of type T, freed by Free. Move-only. */
template <class T, void (*Free)(T *)>
class handle {
public:
    handle() noexcept : p_(nullptr) {}
    explicit handle(T *p) noexcept : p_(p) {}
    handle(const handle &) = delete;
    handle &operator=(const handle &) = delete;
    handle(handle &&other) noexcept : p_(other.p_) { other.p_ = nullptr; }
    handle &operator=(handle &&other) noexcept
    {
        if (this != &other) {
            Free(p_);
            p_ = other.p_;
            other.p_ = nullptr;
        }
        return *this;
    }
    ~handle() { Free(p_); }

    T *get() const noexcept { return p_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }
    /** Gives up ownership: the caller frees the returned handle. */
    T *release() noexcept
    {
        T *p = p_;
        p_ = nullptr;
        return p;
    }

protected:
    T *p_;
};

/** The message of a call that stored its error in ctx ("" without one). */
inline const char *context_message(const nctmc_context *ctx)
{
    return ctx ? nctmc_context_last_error(ctx) : "";
}

} // namespace detail

/** A compute backend and its threads (nctmc_context_create()). */
class context : public detail::handle<nctmc_context, nctmc_context_free> {
public:
    context() noexcept {}
    explicit context(nctmc_context *p) noexcept : handle(p) {}
    /** nctmc_context_create(&params); the error buffer is the wrapper's
     *  when params sets none. */
    explicit context(const nctmc_context_params &params)
    {
        nctmc_context_params p = params;
        char buffer[1024];
        buffer[0] = '\0';
        if (!p.error_buffer) {
            p.error_buffer = buffer;
            p.error_buffer_size = sizeof buffer;
        }
        nctmc_context *ctx = nullptr;
        nctmc_status st = nctmc_context_create(&p, &ctx);
        detail::check(st, p.error_buffer);
        p_ = ctx;
    }
    /** A context on `backend` ("cpu", "cuda", "auto", ...) with n_threads
     *  CPU threads (0: all), logging nothing. */
    static context create(const char *backend = "auto", int32_t n_threads = 0)
    {
        nctmc_context_params p;
        detail::check(nctmc_context_params_init(&p), nullptr);
        p.backend = backend;
        p.n_threads = n_threads;
        return context(p);
    }

    std::string backend() const { return nctmc_context_backend(p_); }
    int32_t n_threads() const noexcept { return nctmc_context_n_threads(p_); }
    const char *last_error() const noexcept { return detail::context_message(p_); }
};

/** A model (nctmc_model_create(), nctmc_model_load_ex()). */
class model : public detail::handle<nctmc_model, nctmc_model_free> {
public:
    model() noexcept {}
    explicit model(nctmc_model *p) noexcept : handle(p) {}
    /** Fresh weights for `config` on ctx's backend. */
    model(const context &ctx, const nctmc_model_config &config)
    {
        nctmc_model *m = nullptr;
        nctmc_status st = nctmc_model_create(ctx.get(), &config, &m);
        detail::check(st, detail::context_message(ctx.get()));
        p_ = m;
    }
    /** Loads a checkpoint; params nullptr: the defaults (mapped when it can). */
    static model load(const context &ctx, const std::string &path,
                      const nctmc_load_params *params = nullptr)
    {
        nctmc_model *m = nullptr;
        nctmc_status st = nctmc_model_load_ex(ctx.get(), path.c_str(), params, &m);
        detail::check(st, detail::context_message(ctx.get()));
        return model(m);
    }

    /** Writes the model's checkpoint (nctmc_model_save()). */
    void save(const std::string &path) const
    {
        detail::check(nctmc_model_save(p_, path.c_str()), last_error());
    }
    nctmc_model_config config() const
    {
        nctmc_model_config c;
        detail::check(nctmc_model_config_init(&c), nullptr);
        detail::check(nctmc_model_get_config(p_, &c), last_error());
        return c;
    }
    int32_t seq_len() const noexcept { return nctmc_model_seq_len(p_); }
    int32_t vocab_size() const noexcept { return nctmc_model_vocab_size(p_); }
    bool is_mapped() const noexcept { return nctmc_model_is_mapped(p_) != 0; }
    /** The model's tokenizer (owned by the model), or nullptr. */
    const nctmc_tokenizer *tokenizer() const noexcept { return nctmc_model_get_tokenizer(p_); }
    const char *last_error() const noexcept { return p_ ? nctmc_model_last_error(p_) : ""; }
};

/** A sampler of a model (nctmc_sampler_create()). */
class sampler : public detail::handle<nctmc_sampler, nctmc_sampler_free> {
public:
    sampler() noexcept {}
    explicit sampler(nctmc_sampler *p) noexcept : handle(p) {}
    /** params nullptr: the defaults. Errors come from params->ctx when
     *  given, else from the model. */
    explicit sampler(const model &m, const nctmc_sampler_params *params = nullptr)
    {
        nctmc_sampler *s = nullptr;
        nctmc_status st = nctmc_sampler_create(m.get(), params, &s);
        detail::check(st, params && params->ctx ? detail::context_message(params->ctx)
                                                : m.last_error());
        p_ = s;
    }

    /** nctmc_sample(): the samples go to params.tokens_out. */
    void sample(const nctmc_sample_params &params)
    {
        detail::check(nctmc_sample(p_, &params), last_error());
    }
    /** Samples params.batch sequences of `length` tokens (params.length, or
     *  the sampler's max_length when 0 — then pass it as length) into a
     *  new vector; params.tokens_out is ignored. */
    std::vector<int32_t> sample(nctmc_sample_params params, int32_t length)
    {
        std::vector<int32_t> out(static_cast<std::size_t>(params.batch) *
                                 static_cast<std::size_t>(length));
        params.length = length;
        params.tokens_out = out.data();
        sample(params);
        return out;
    }
    /** Stops a running sample() from another thread. */
    void cancel() noexcept { nctmc_sampler_cancel(p_); }
    const char *last_error() const noexcept { return p_ ? nctmc_sampler_last_error(p_) : ""; }
};

/** A trainer that updates a model in place (nctmc_trainer_create()). */
class trainer : public detail::handle<nctmc_trainer, nctmc_trainer_free> {
public:
    trainer() noexcept {}
    explicit trainer(nctmc_trainer *p) noexcept : handle(p) {}
    /** params nullptr: the defaults. Errors come from the model. */
    explicit trainer(model &m, const nctmc_trainer_params *params = nullptr)
    {
        nctmc_trainer *t = nullptr;
        nctmc_status st = nctmc_trainer_create(m.get(), params, &t);
        detail::check(st, m.last_error());
        p_ = t;
    }

    /** One step on the caller's batch; labels may be nullptr. A skipped
     *  non-finite step throws too (status NCTMC_ERR_NON_FINITE). */
    nctmc_train_stats step(const int32_t *tokens, const int32_t *labels = nullptr)
    {
        nctmc_train_stats stats;
        detail::check(nctmc_train_stats_init(&stats), nullptr);
        detail::check(nctmc_trainer_step(p_, tokens, labels, &stats), last_error());
        return stats;
    }
    void save(const std::string &path)
    {
        detail::check(nctmc_trainer_save(p_, path.c_str()), last_error());
    }
    const char *last_error() const noexcept { return p_ ? nctmc_trainer_last_error(p_) : ""; }
};

/** A tokenizer (nctmc_tokenizer_create_bytes(), _load(), _clone(), ...). */
class tokenizer : public detail::handle<nctmc_tokenizer, nctmc_tokenizer_free> {
public:
    tokenizer() noexcept {}
    explicit tokenizer(nctmc_tokenizer *p) noexcept : handle(p) {}

    static tokenizer bytes()
    {
        nctmc_tokenizer *t = nullptr;
        detail::check(nctmc_tokenizer_create_bytes(&t), nullptr);
        return tokenizer(t);
    }
    /** A file of nctmc_tokenizer_save(); ctx may be an empty context (the
     *  message is then only the status's name, and goes to the
     *  process-wide log callback). */
    static tokenizer load(const context &ctx, const std::string &path)
    {
        nctmc_tokenizer *t = nullptr;
        nctmc_status st = nctmc_tokenizer_load(ctx.get(), path.c_str(), &t);
        detail::check(st, detail::context_message(ctx.get()));
        return tokenizer(t);
    }
    /** An independent copy, e.g. of model::tokenizer(). */
    static tokenizer clone(const nctmc_tokenizer *source)
    {
        nctmc_tokenizer *t = nullptr;
        detail::check(nctmc_tokenizer_clone(source, &t), nullptr);
        return tokenizer(t);
    }

    int32_t vocab_size() const noexcept { return nctmc_tokenizer_vocab_size(p_); }
    std::vector<int32_t> encode(const std::string &text)
    {
        std::size_t n = 0;
        detail::check(nctmc_tokenizer_encode(p_, text.data(), text.size(), nullptr, 0, &n),
                      last_error());
        std::vector<int32_t> tokens(n);
        detail::check(nctmc_tokenizer_encode(p_, text.data(), text.size(), tokens.data(),
                                             tokens.size(), &n),
                      last_error());
        return tokens;
    }
    std::string decode(const int32_t *tokens, std::size_t n_tokens)
    {
        std::size_t n = 0;
        detail::check(nctmc_tokenizer_decode(p_, tokens, n_tokens, nullptr, 0, &n),
                      last_error());
        std::vector<char> text(n + 1);
        detail::check(nctmc_tokenizer_decode(p_, tokens, n_tokens, text.data(), text.size(), &n),
                      last_error());
        return std::string(text.data(), n);
    }
    std::string decode(const std::vector<int32_t> &tokens)
    {
        return decode(tokens.data(), tokens.size());
    }
    const char *last_error() const noexcept { return p_ ? nctmc_tokenizer_last_error(p_) : ""; }
};

/** A token shard opened for reading (nctmc_dataset_open()). */
class dataset : public detail::handle<nctmc_dataset, nctmc_dataset_free> {
public:
    dataset() noexcept {}
    explicit dataset(nctmc_dataset *p) noexcept : handle(p) {}
    /** ctx may be an empty context (see tokenizer::load()). */
    static dataset open(const context &ctx, const std::string &path)
    {
        nctmc_dataset *d = nullptr;
        nctmc_status st = nctmc_dataset_open(ctx.get(), path.c_str(), &d);
        detail::check(st, detail::context_message(ctx.get()));
        return dataset(d);
    }

    nctmc_dataset_info info() const
    {
        nctmc_dataset_info i;
        detail::check(nctmc_dataset_info_init(&i), nullptr);
        detail::check(nctmc_dataset_get_info(p_, &i), last_error());
        return i;
    }
    std::vector<int32_t> read_tokens(int64_t first, int64_t count)
    {
        std::vector<int32_t> out(count > 0 ? static_cast<std::size_t>(count) : 0);
        detail::check(nctmc_dataset_read_tokens(p_, first, count, out.data()), last_error());
        return out;
    }
    const char *last_error() const noexcept { return p_ ? nctmc_dataset_last_error(p_) : ""; }
};

/** A streaming shard writer (nctmc_dataset_writer_create()); a shard not
 *  committed never appears. */
class dataset_writer : public detail::handle<nctmc_dataset_writer, nctmc_dataset_writer_free> {
public:
    dataset_writer() noexcept {}
    explicit dataset_writer(nctmc_dataset_writer *p) noexcept : handle(p) {}
    dataset_writer(const context &ctx, const std::string &path, int32_t vocab_size,
                   int32_t seq_len)
    {
        nctmc_dataset_writer *w = nullptr;
        nctmc_status st =
            nctmc_dataset_writer_create(ctx.get(), path.c_str(), vocab_size, seq_len, &w);
        detail::check(st, detail::context_message(ctx.get()));
        p_ = w;
    }

    void append(const int32_t *tokens, int64_t n)
    {
        detail::check(nctmc_dataset_writer_append(p_, tokens, n), last_error());
    }
    nctmc_dataset_info commit()
    {
        nctmc_dataset_info i;
        detail::check(nctmc_dataset_info_init(&i), nullptr);
        detail::check(nctmc_dataset_writer_commit(p_, &i), last_error());
        return i;
    }
    const char *last_error() const noexcept
    {
        return p_ ? nctmc_dataset_writer_last_error(p_) : "";
    }
};

} // namespace nctmc

#endif
