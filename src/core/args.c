/* The public argument structs' defaults, and the view of a validated conv1d_update problem as a
 * conv1d one. A leaf of src/core: it calls nothing but memset. */
#include "gdn_internal.h"

#include <string.h>

gdn_conv1d_args gdn_conv1d_default_args(void)
{
    gdn_conv1d_args a;
    memset(&a, 0, sizeof a);
    a.activation = GDN_ACT_SILU;
    return a;
}

gdn_conv1d_update_args gdn_conv1d_update_default_args(void)
{
    gdn_conv1d_update_args a;
    memset(&a, 0, sizeof a);
    a.activation = GDN_ACT_SILU;
    return a;
}

gdn_gating_params gdn_gating_default_params(void)
{
    gdn_gating_params g;
    memset(&g, 0, sizeof g);
    g.a_form = GDN_A_LOG;
    g.softplus_threshold = GDN_SOFTPLUS_THRESHOLD;
    return g;
}

gdn_rmsnorm_args gdn_rmsnorm_default_args(void)
{
    gdn_rmsnorm_args a;
    memset(&a, 0, sizeof a);
    a.eps = 1e-6f;
    a.norm_before_gate = 1;
    return a;
}

gdn_delta_rule_args gdn_delta_rule_default_args(void)
{
    gdn_delta_rule_args a;
    memset(&a, 0, sizeof a);
    a.state_layout = GDN_STATE_KV;
    a.gva = GDN_GVA_BLOCK;
    a.algorithm = GDN_ALGO_AUTO;
    a.precision = GDN_PRECISION_AUTO;
    a.gating = gdn_gating_default_params();
    return a;
}

void gdn_conv1d_update_as_prefill(const gdn_conv1d_update_problem *p, gdn_conv1d_problem *q)
{
    const gdn_conv1d_update_args *u = &p->a;
    memset(q, 0, sizeof *q);
    q->a = gdn_conv1d_default_args();
    q->a.x = u->x;
    q->a.out = u->out;
    gdn_tensor *views[2] = {&q->a.x, &q->a.out};
    for (int i = 0; i < 2; i++) {
        gdn_tensor *t = views[i];
        t->ndim = 3;
        t->shape[2] = t->shape[1];
        t->stride[2] = t->stride[1];
        t->shape[1] = 1;
        t->stride[1] = 0;
    }
    q->a.weight = u->weight;
    q->a.bias = u->bias;
    q->a.conv_state = u->conv_state;
    q->a.state_slots = u->state_slots;
    q->a.activation = u->activation;
    q->seqs = p->seqs; /* has_init absent: every sequence continues its state */
    q->seqs.slots = u->state_slots.data ? &q->a.state_slots : NULL;
    q->C = p->C;
    q->W = p->W;
    q->has_state = true;
}
