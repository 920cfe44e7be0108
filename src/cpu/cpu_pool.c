/* The CPU backend's thread pool: workers sleep on a condition variable between jobs and take
 * tasks from an atomic counter; the caller works too and waits for the last task to finish. */
#define _POSIX_C_SOURCE 200809L
#include "cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

struct cpu_pool {
    int threads;
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

cpu_pool *cpu_pool_create(int threads)
{
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = threads < 1 ? 1 : threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    p->workers = calloc((size_t)p->threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < p->threads; i++) {
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
    return p;
}

void cpu_pool_destroy(cpu_pool *p)
{
    if (!p)
        return;
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
