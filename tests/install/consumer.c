/* Links against an installed libgdn and runs one tiny op, checked by hand. */
#include <gdn.h>
#include <math.h>
#include <stdio.h>

int main(void)
{
    gdn_context *ctx;
    if (gdn_context_create(&ctx, NULL) != GDN_OK) {
        fprintf(stderr, "%s\n", gdn_last_error(NULL));
        return 1;
    }
    float x[2] = {3.0f, 4.0f}, y[2];
    gdn_tensor tx = gdn_tensor_1d(x, GDN_F32, 2), ty = gdn_tensor_1d(y, GDN_F32, 2);
    gdn_status st = gdn_l2norm(ctx, &tx, &ty, 0.0f);
    gdn_context_destroy(ctx);
    int ok = st == GDN_OK && fabsf(y[0] - 0.6f) < 1e-6f && fabsf(y[1] - 0.8f) < 1e-6f;
    printf("consumer: libgdn %s, l2norm(3,4) = (%g, %g): %s\n", gdn_version_string(), y[0], y[1],
           ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
