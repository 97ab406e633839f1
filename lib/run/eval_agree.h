/*
 * eval_agree.h — before a data-parallel nctmc_eval() sums anything, its
 * ranks check that they evaluate the same thing and that none of them
 * refused its own call, so that every rank fails alike instead of waiting
 * for one that has already returned.
 */
#ifndef NCTMC_EVAL_AGREE_H
#define NCTMC_EVAL_AGREE_H

#include "model/model.h"

/* Collective over p->comm when it has several ranks (else returns `local`
 * at once). `local` is this rank's own verdict on its call (NCTMC_OK or the
 * error already written into m->last_error). Every rank returns NCTMC_OK,
 * or each an error: a rank that refused keeps its own status and message;
 * the others say which ranks refused, or what differs from rank 0 (the
 * library version, the model's configuration, the parameters, the tokens
 * or labels). */
nctmc_status eval_agree(nctmc_model *m, const nctmc_eval_params *p, nctmc_status local);

#endif /* NCTMC_EVAL_AGREE_H */
