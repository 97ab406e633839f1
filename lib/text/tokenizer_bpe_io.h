/*
 * tokenizer_bpe_io.h — byte-level BPE tokenizers from files: Hugging Face
 * tokenizer.json, GPT-2's vocab.json + merges.txt (tokenizer_bpe_io.c), and
 * the flat form inside our tokenizer files and checkpoints
 * (tokenizer_bpe_flat.c; docs/formats.md).
 */
#ifndef NCTMC_TOKENIZER_BPE_IO_H
#define NCTMC_TOKENIZER_BPE_IO_H

#include "tokenizer_bpe.h"

/* Errors: NCTMC_ERR_IO (cannot read), NCTMC_ERR_FORMAT (with the reason). */
nctmc_status bpe_load_hf_json(const nctmc_allocator *alloc, const char *path, bpe_model **out,
                              char *err, size_t err_size);
nctmc_status bpe_load_gpt2(const nctmc_allocator *alloc, const char *vocab_path,
                           const char *merges_path, bpe_model **out, char *err,
                           size_t err_size);

/* The flat form's three values, from alloc: every token's bytes in id order
 * as lowercase hex, one space between tokens ("bpe_tokens"); the merges by
 * rank as decimal id pairs, all numbers one space apart ("bpe_merges", ""
 * for none); the added tokens' ids, increasing ("bpe_added", NULL for none:
 * the field is then left out). False when out of memory. */
bool bpe_to_texts(const bpe_model *m, const nctmc_allocator *alloc, char **tokens,
                  char **merges, char **added);

/* Parses those values strictly (added may be NULL) and builds the model;
 * NCTMC_ERR_FORMAT with the reason. */
nctmc_status bpe_from_texts(const nctmc_allocator *alloc, const char *tokens,
                            const char *merges, const char *added, bpe_model **out,
                            char *err, size_t err_size);

#endif /* NCTMC_TOKENIZER_BPE_IO_H */
