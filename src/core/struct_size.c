/* The sizes of the public structs, for bindings that mirror them. */
#include "gdn_internal.h"

#include <string.h>

size_t gdn_struct_size(const char *name)
{
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {
        {"gdn_tensor", sizeof(gdn_tensor)},
        {"gdn_context_options", sizeof(gdn_context_options)},
        {"gdn_conv1d_args", sizeof(gdn_conv1d_args)},
        {"gdn_conv1d_update_args", sizeof(gdn_conv1d_update_args)},
        {"gdn_gating_params", sizeof(gdn_gating_params)},
        {"gdn_rmsnorm_args", sizeof(gdn_rmsnorm_args)},
        {"gdn_delta_rule_args", sizeof(gdn_delta_rule_args)},
    };
    for (size_t i = 0; name && i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(name, sizes[i].name))
            return sizes[i].size;
    return 0;
}
