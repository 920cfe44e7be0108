/* The gdn command-line tool: one file per subcommand. */
#ifndef GDN_TOOL_H
#define GDN_TOOL_H

#include "common.h"

int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* gdn bench's rows for the cpu backend (gdn_bench_cpu.c): op is all, prefill, decode or peak. */
int bench_cpu(gdn_context *ctx, const char *op, bool json, const char *json_path, uint64_t seed);

/* Options every subcommand shares. */
typedef struct tool_options {
    gdn_backend backend;
    int threads;
    bool json;
    gdn_dtype dtype;
    bool dtype_given;        /* --dtype was on the command line (bench: its default differs) */
    uint64_t seed;
    bool seed_given;
} tool_options;

/* Parses --backend B, --threads N, --json, --dtype D, --seed S. Returns 0, or prints the
 * problem and returns 2 (also for an unknown option). --help never reaches it (gdn_main.c). */
int parse_common_options(int argc, char **argv, tool_options *o);
/* A context for the options' backend; prints gdn's message and returns NULL on failure. */
gdn_context *open_context(const tool_options *o);

#endif
