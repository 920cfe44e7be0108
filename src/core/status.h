/* Status propagation, the one definition for the library, the testkit, the tool and the tests.
 * Self-contained (it needs only gdn.h's gdn_status), so code outside src/ includes it too. */
#ifndef GDN_STATUS_H
#define GDN_STATUS_H

#include "gdn.h"

/* Returns expr's status from the calling function when it is not GDN_OK. */
#define GDN_TRY(expr) GDN_TRY_ELSE(expr, (void)0)

/* The same, running the statement on_error first (free what was made, print a message). */
#define GDN_TRY_ELSE(expr, on_error)                                                               \
    do {                                                                                           \
        const gdn_status gdn_try_st_ = (expr);                                                     \
        if (gdn_try_st_ != GDN_OK) {                                                               \
            on_error;                                                                              \
            return gdn_try_st_;                                                                    \
        }                                                                                          \
    } while (0)

/* Returns the status of call, run between gdn_context_enter and gdn_context_leave
 * (gdn_internal.h): every public function that touches a context's mutable parts runs so. */
#define GDN_GUARDED(ctx, fn, call)                                                                 \
    do {                                                                                           \
        gdn_status gdn_guard_st_ = gdn_context_enter(ctx, fn);                                     \
        if (gdn_guard_st_ != GDN_OK)                                                               \
            return gdn_guard_st_;                                                                  \
        gdn_guard_st_ = (call);                                                                    \
        gdn_context_leave(ctx);                                                                    \
        return gdn_guard_st_;                                                                      \
    } while (0)

#endif /* GDN_STATUS_H */
