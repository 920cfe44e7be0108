/* Causal depthwise conv1d + activation (SPEC section 4), prefill and decode. */
#include "ref.h"

#include <string.h>

/* One channel of one sequence. The window holds the last W-1 inputs, oldest first; each input
 * is read before its output is written, so out may be x itself. */
static void conv_channel(const gdn_conv1d_problem *p, int64_t c, int64_t row, int64_t t0,
                         int64_t len, int64_t slot, bool from_state)
{
    const gdn_conv1d_args *a = &p->a;
    const int64_t W = p->W;
    double w[GDN_CONV_MAX_WIDTH], win[GDN_CONV_MAX_WIDTH];
    for (int64_t i = 0; i < W; i++)
        w[i] = gdn_load(&a->weight, c * a->weight.stride[0] + i * a->weight.stride[1]);
    const gdn_tensor *st = &a->conv_state;
    for (int64_t j = 0; j < W - 1; j++)
        win[j] = from_state ? gdn_load(st, slot * st->stride[0] + c * st->stride[1] +
                                               j * st->stride[2])
                            : 0.0;
    double bias = a->bias.data ? gdn_load(&a->bias, c * a->bias.stride[0]) : 0.0;
    for (int64_t t = t0; t < t0 + len; t++) {
        double xt = gdn_load(&a->x, row * a->x.stride[0] + t * a->x.stride[1] + c);
        double acc = bias + w[W - 1] * xt;
        for (int64_t i = 0; i < W - 1; i++)
            acc += w[i] * win[i];
        memmove(win, win + 1, (size_t)(W - 2) * sizeof win[0]);
        win[W - 2] = xt;
        double y = a->activation == GDN_ACT_SILU ? ref_silu(acc) : acc;
        gdn_store(&a->out, row * a->out.stride[0] + t * a->out.stride[1] + c, y);
    }
    if (p->has_state)
        for (int64_t j = 0; j < W - 1; j++)
            gdn_store(st, slot * st->stride[0] + c * st->stride[1] + j * st->stride[2], win[j]);
}

gdn_status ref_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p)
{
    (void)ctx;
    for (int64_t n = 0; n < p->seqs.count; n++) {
        int64_t slot = p->has_state ? gdn_seq_slot(&p->seqs, n) : -1;
        if (p->has_state && slot < 0)
            continue; /* padding */
        bool from_state = p->has_state && gdn_seq_has_init(&p->seqs, n);
        int64_t row, t0, len;
        gdn_seq_span(&p->seqs, n, &row, &t0, &len);
        for (int64_t c = 0; c < p->C; c++)
            conv_channel(p, c, row, t0, len, slot, from_state);
    }
    return GDN_OK;
}

/* Decode is prefill of one token per sequence that continues its state. */
gdn_status ref_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_problem *p)
{
    gdn_conv1d_problem q;
    gdn_conv1d_update_as_prefill(p, &q);
    return ref_conv1d(ctx, &q);
}
