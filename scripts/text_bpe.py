#!/usr/bin/env python3
"""Trains the byte-level BPE of the text model's GPU variant
(research/2026-11-26-text-model-gpu.md) on the training split of
scripts/text_corpus.py, with Hugging Face `tokenizers` (the test venv,
build-pyenv/, made by scripts/install-deps.sh):

    build-pyenv/bin/python scripts/text_bpe.py CORPUS/train.txt tokenizer.json [--vocab 4096]

GPT-2's recipe at a size fit for a 2 MB corpus: ByteLevel pre-tokenizer
(no prefix space) and decoder, all 256 byte symbols in the alphabet, merges
of pairs seen at least twice, and `<|endoftext|>` as a special token, so
that `nctmc prepare` separates documents with it. Documents are the
fortunes (between lines `%`); a merge never crosses two of them. The result
is deterministic for a given corpus, vocabulary size and `tokenizers`
version.
"""
import argparse
import re
import sys

try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    sys.exit("text_bpe: cannot import tokenizers (%s); run scripts/install-deps.sh and use "
             "build-pyenv/bin/python" % e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("train_txt")
    ap.add_argument("out_json")
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary size (with the special)")
    args = ap.parse_args()
    with open(args.train_txt, encoding="utf-8") as f:
        docs = [d + "\n" for d in re.split(r"(?m)^%\n", f.read()) if d.strip()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    tok.save(args.out_json)
    n_tokens = sum(len(e.ids) for e in tok.encode_batch(docs))
    n_bytes = sum(len(d.encode()) for d in docs)
    print("text_bpe: %d tokens in the vocabulary; %d documents, %d bytes -> %d tokens "
          "(%.3f tokens/byte) -> %s" % (tok.get_vocab_size(), len(docs), n_bytes, n_tokens,
                                       n_tokens / n_bytes, args.out_json))


if __name__ == "__main__":
    main()
