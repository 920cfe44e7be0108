/* The CPU backend's thread pool: workers sleep on a condition variable between jobs and take
 * tasks from an atomic counter; the caller works too and waits for the last task to finish.
 *
 * fork() copies a process with only the thread that called it: a pool made before the fork has
 * no workers in the child, and its lock may have been copied held. Every fork bumps a counter
 * (pthread_atfork), and a pool that sees the counter moved builds its lock and workers anew
 * before its next job, so a context made before a fork works in the child. */
#define _POSIX_C_SOURCE 200809L
#include "cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

struct cpu_pool {
    int threads;              /* workers running, the caller included */
    int wanted;               /* workers asked for */
    uint64_t forks_seen;      /* the fork count when the workers were started */
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation;      /* bumped for every job; workers wait for a new one */
    bool stop;
    /* the current job */
    cpu_task_fn fn;
    void *arg;
    int64_t tasks;
    atomic_int_fast64_t next; /* next task to hand out */
    int busy;                 /* workers still inside the job */
};

typedef struct worker_start {
    cpu_pool *pool;
    int id;
} worker_start;

static void work(cpu_pool *p, int id)
{
    for (;;) {
        int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->tasks)
            return;
        p->fn(p->arg, t, id);
    }
}

static void *worker_main(void *arg)
{
    worker_start ws = *(worker_start *)arg;
    free(arg);
    cpu_pool *p = ws.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        work(p, ws.id);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static atomic_uint_fast64_t forks;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;

static void count_fork(void) { atomic_fetch_add(&forks, 1); }
static void install_fork_hook(void) { pthread_atfork(NULL, NULL, count_fork); }

/* Fresh synchronisation and workers 1 .. wanted-1 (the caller is worker 0). */
static void start_workers(cpu_pool *p)
{
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->stop = false;
    p->generation = 0;
    p->busy = 0;
    p->forks_seen = atomic_load(&forks);
    p->threads = p->wanted;
    for (int i = 1; i < p->wanted; i++) {
        worker_start *ws = malloc(sizeof *ws);
        if (ws) {
            ws->pool = p;
            ws->id = i;
        }
        if (!ws || pthread_create(&p->workers[i], NULL, worker_main, ws) != 0) {
            free(ws);
            p->threads = i; /* run with the workers that did start */
            break;
        }
    }
}

cpu_pool *cpu_pool_create(int threads)
{
    pthread_once(&fork_hook_once, install_fork_hook);
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->wanted = threads < 1 ? 1 : threads;
    atomic_init(&p->next, 0);
    p->workers = calloc((size_t)p->wanted, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return NULL;
    }
    start_workers(p);
    return p;
}

/* In a child of fork() the workers do not exist and the lock's state is the parent's. */
static bool forked_since_start(const cpu_pool *p) { return atomic_load(&forks) != p->forks_seen; }

void cpu_pool_destroy(cpu_pool *p)
{
    if (!p)
        return;
    if (forked_since_start(p)) { /* nothing to stop or join here */
        free(p->workers);
        free(p);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->workers);
    free(p);
}

int cpu_pool_threads(const cpu_pool *p) { return p->threads; }

void cpu_pool_run(cpu_pool *p, int64_t tasks, cpu_task_fn fn, void *arg)
{
    if (tasks <= 0)
        return;
    if (forked_since_start(p))
        start_workers(p);
    if (p->threads == 1 || tasks == 1) { /* nothing to share: no locks, no wake-ups */
        for (int64_t t = 0; t < tasks; t++)
            fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->tasks = tasks;
    atomic_store(&p->next, 0);
    p->busy = p->threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    work(p, 0);
    pthread_mutex_lock(&p->lock);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
