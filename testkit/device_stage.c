/* Staging of host tensors on the device (shared by the CUDA and no-CUDA builds). */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>

size_t tensor_span_bytes(const gdn_tensor *t)
{
    int64_t last = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0)
            return 0;
        last += (t->shape[d] - 1) * t->stride[d];
    }
    return (size_t)(last + 1) * gdn_dtype_size(t->dtype);
}

void stage(staging *s, gdn_tensor *t)
{
    if (!t->data)
        return;
    if (s->n == (int)(sizeof s->e / sizeof s->e[0])) {
        fprintf(stderr, "stage: too many tensors\n");
        exit(2);
    }
    size_t bytes = tensor_span_bytes(t);
    void *dev = dev_alloc(bytes ? bytes : 16);
    if (bytes)
        dev_upload(dev, t->data, bytes);
    s->e[s->n].t = t;
    s->e[s->n].host = t->data;
    s->e[s->n].dev = dev;
    s->e[s->n].bytes = bytes;
    s->n++;
    t->data = dev;
}

void unstage(staging *s)
{
    if (s->n == 0)
        return;
    dev_sync();
    for (int i = s->n - 1; i >= 0; i--) {
        if (s->e[i].bytes)
            dev_download(s->e[i].host, s->e[i].dev, s->e[i].bytes);
        s->e[i].t->data = s->e[i].host;
        dev_free(s->e[i].dev);
    }
    s->n = 0;
}

static void stage_all(staging *s, gdn_tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        stage(s, ts[i]);
}

void stage_conv1d_args(staging *s, gdn_conv1d_args *a)
{
    gdn_tensor *all[] = {&a->x, &a->weight, &a->bias, &a->out, &a->conv_state, &a->state_slots,
                         &a->has_initial_state, &a->cu_seqlens};
    stage_all(s, all, sizeof all / sizeof all[0]);
}

void stage_conv1d_update_args(staging *s, gdn_conv1d_update_args *a)
{
    gdn_tensor *all[] = {&a->x, &a->weight, &a->bias, &a->out, &a->conv_state, &a->state_slots};
    stage_all(s, all, sizeof all / sizeof all[0]);
}

void stage_rmsnorm_args(staging *s, gdn_rmsnorm_args *a)
{
    gdn_tensor *all[] = {&a->x, &a->z, &a->weight, &a->out};
    stage_all(s, all, sizeof all / sizeof all[0]);
}

void stage_delta_rule_args(staging *s, gdn_delta_rule_args *a)
{
    gdn_tensor *all[] = {&a->q, &a->k, &a->v, &a->g, &a->beta, &a->out, &a->state,
                         &a->state_slots, &a->has_initial_state, &a->cu_seqlens, &a->gating.A,
                         &a->gating.dt_bias};
    stage_all(s, all, sizeof all / sizeof all[0]);
}
