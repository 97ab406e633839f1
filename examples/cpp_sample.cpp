/*
 * cpp_sample.cpp — the C++ wrappers of <nctmc.hpp> in one small program:
 *
 *   cpp_sample [CHECKPOINT]
 *
 * loads CHECKPOINT (or, without one, creates a tiny untrained model of 16
 * byte-level states), samples three sequences by tau-leaping and prints
 * each as token ids, and as text when the model has a tokenizer. Every
 * handle is freed by its destructor; a failing call throws nctmc::error,
 * whose what() is the library's message. C++11.
 */
#include <cstdio>
#include <exception>
#include <vector>

#include <nctmc.hpp>

static nctmc::model make_model(const nctmc::context &ctx, int argc, char **argv)
{
    if (argc > 1)
        return nctmc::model::load(ctx, argv[1]);
    nctmc_model_config config;
    nctmc_model_config_init(&config);
    config.vocab_size = 16;
    config.seq_len = 12;
    config.n_layers = 1;
    config.d_model = 32;
    config.n_heads = 2;
    config.cond_dim = 16;
    return nctmc::model(ctx, config);
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        std::fprintf(stderr, "usage: cpp_sample [CHECKPOINT]\n");
        return 2;
    }
    try {
        nctmc::context ctx = nctmc::context::create("cpu");
        nctmc::model model = make_model(ctx, argc, argv);

        nctmc_sampler_params sp;
        nctmc_sampler_params_init(&sp);
        sp.max_batch = 3;
        nctmc::sampler sampler(model, &sp);

        nctmc_sample_params params;
        nctmc_sample_params_init(&params);
        params.batch = 3;
        params.n_steps = 16;
        params.seed = 7;
        const int32_t length = model.seq_len();
        std::vector<int32_t> tokens = sampler.sample(params, length);

        nctmc::tokenizer tok;
        if (model.tokenizer())
            tok = nctmc::tokenizer::clone(model.tokenizer());
        for (int32_t b = 0; b < params.batch; b++) {
            const int32_t *row = tokens.data() + static_cast<std::size_t>(b) * length;
            for (int32_t i = 0; i < length; i++)
                std::printf("%d ", static_cast<int>(row[i]));
            std::printf("\n");
            if (tok)
                std::printf("%s\n", tok.decode(row, static_cast<std::size_t>(length)).c_str());
        }
    } catch (const nctmc::error &e) {
        std::fprintf(stderr, "cpp_sample: %s (%s)\n", e.what(), nctmc_status_string(e.status()));
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "cpp_sample: %s\n", e.what());
        return 1;
    }
    return 0;
}
