/* The parts the argument generator (fuzz_gen.c) builds every entry point's call from
 * (fuzz_gen_parts.c): extents, dtypes, descriptors with odd strides and shapes, input and output
 * views, sequences with their pools and index tensors, and options. Each lists its plainest
 * option first, so an exhausted libFuzzer input degrades to a small valid call. */
#ifndef GDN_FUZZ_GEN_PARTS_H
#define GDN_FUZZ_GEN_PARTS_H

#include "fuzz_internal.h"

#include <stdbool.h>
#include <stdint.h>

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum { FZ_MAX_SEQS = 48 };

/* Half the cases are calm: every argument is meant to be valid, so the kernels run and are
 * compared. In a hostile case each argument may also be broken, with the chance given at each
 * call of fz_bad(). fz_gen_op decides it for each case. */
extern bool fz_hostile;

static inline bool fz_bad(fz_src *s, int pct) { return fz_hostile && fz_pct(s, pct); }

/* A weight that only counts in hostile cases. */
static inline int fz_hostile_weight(int w) { return fz_hostile ? w : 0; }

/* ---- extents -------------------------------------------------------------------------------- */

int64_t fz_huge_extent(fz_src *s); /* far beyond memory: 2^31 .. INT64_MAX */
int64_t fz_cap(int64_t max, int shrink); /* max halved per retry of an over-budget case */
int64_t fz_extent(fz_src *s, int64_t max, int zero_weight);
int64_t fz_head_dim(fz_src *s, int shrink); /* K or V */

/* ---- dtypes, descriptors, strides, shapes --------------------------------------------------- */

gdn_dtype fz_float_dtype(fz_src *s);
void fz_maybe_bad_dtype(fz_src *s, gdn_tensor *t, int pct);
gdn_tensor fz_make_desc(gdn_dtype dt, int ndim, const int64_t *shape); /* row-major, no data */
void fz_vary_strides(fz_src *s, gdn_tensor *t, bool last_contiguous, int hostile);
void fz_vary_shape(fz_src *s, gdn_tensor *t, int pct);

/* ---- views -------------------------------------------------------------------------------- */

fz_view *fz_input(fz_case *c, fz_src *s, const char *name, gdn_tensor *t, fz_role role,
                  double lo, double hi, int absent_pct);
fz_view *fz_output(fz_case *c, fz_src *s, const char *name, gdn_tensor *out,
                   const gdn_tensor *like, fz_view *in, bool in_place_valid, gdn_dtype dt);
fz_view *fz_index_view(fz_case *c, fz_src *s, const char *name, gdn_tensor *t, gdn_dtype dt,
                       const int64_t *vals, int64_t n);

/* ---- sequences, pools and their index tensors ---------------------------------------------- */

typedef struct fz_seqs {
    int64_t B, T, N, S;
    bool varlen, pool;
    int64_t len[FZ_MAX_SEQS];
} fz_seqs;

void fz_draw_seqs(fz_src *s, fz_seqs *q, int64_t max_t, int pool_pct);
void fz_make_huge_batch(fz_src *s, fz_seqs *q);
/* One slot a sequence (FZ_MAX_SEQS at most): a permutation, some skipped, maybe one bad. */
void fz_slot_values(fz_src *s, const fz_seqs *q, int64_t *v);
void fz_index_tensors(fz_case *c, fz_src *s, const fz_seqs *q, gdn_tensor *cu,
                      gdn_tensor *slots, gdn_tensor *init);

/* ---- options ------------------------------------------------------------------------------- */

int fz_enum_value(fz_src *s, int n);
float fz_eps_value(fz_case *c, fz_src *s);
void fz_gating_params(fz_case *c, fz_src *s, gdn_gating_params *gp, int64_t HV,
                      const char *A_name, const char *dtb_name);

#endif
