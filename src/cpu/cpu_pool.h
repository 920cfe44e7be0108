/* A persistent pthread pool owned by a context: no thread is created per call. */
#ifndef GDN_CPU_POOL_H
#define GDN_CPU_POOL_H

#include <stdint.h>

typedef struct cpu_pool cpu_pool;

/* fn(arg, task, worker) for every task in [0, tasks); worker in [0, threads) names the calling
 * thread so each can use its own scratch. */
typedef void (*cpu_task_fn)(void *arg, int64_t task, int worker);

/* A pool of `threads` workers (the calling thread is worker 0). NULL on failure. */
cpu_pool *cpu_pool_create(int threads);
void cpu_pool_destroy(cpu_pool *pool);
int cpu_pool_threads(const cpu_pool *pool);
/* Runs every task and returns when all are done. Tasks are handed out one at a time from a
 * shared counter, so uneven tasks balance themselves. */
void cpu_pool_run(cpu_pool *pool, int64_t tasks, cpu_task_fn fn, void *arg);

#endif
