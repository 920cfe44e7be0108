/* The reference backend's op table. */
#include "ref.h"

static int ref_num_threads(const gdn_context *ctx)
{
    (void)ctx;
    return 1;
}

const gdn_backend_ops gdn_ref_backend = {
    .id = GDN_BACKEND_REF,
    .name = "ref",
    .conv1d = ref_conv1d,
    .conv1d_update = ref_conv1d_update,
    .gating = ref_gating,
    .l2norm = ref_l2norm,
    .rmsnorm_gated = ref_rmsnorm_gated,
    .delta_rule_workspace = ref_delta_rule_workspace,
    .delta_rule = ref_delta_rule,
    .num_threads = ref_num_threads,
};
