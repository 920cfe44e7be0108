/* Body of the baseline, compiled once for AVX-512 and once for the baseline ISA
 * (bench_baseline_avx512.c, bench_baseline_generic.c); BASELINE_NAME names the entry point. */
#include "bench_baseline.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

static void scale_row(float *x, float a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= a;
}

static void axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* One (sequence, head): four passes over S per token. */
static void head(const baseline_problem *p, int64_t n, int64_t h, float *tmp)
{
    const int64_t K = p->K, V = p->V, kh = h / (p->HV / p->H);
    float *S = p->state + (n * p->HV + h) * K * V, *ks = tmp, *u = tmp + V;
    for (int64_t t = 0; t < p->T; t++) {
        const float *q = p->q + ((n * p->T + t) * p->H + kh) * K;
        const float *k = p->k + ((n * p->T + t) * p->H + kh) * K;
        const float *v = p->v + ((n * p->T + t) * p->HV + h) * V;
        float *o = p->out + ((n * p->T + t) * p->HV + h) * V;
        const float a = expf(p->g[(n * p->T + t) * p->HV + h]);
        const float b = p->beta[(n * p->T + t) * p->HV + h];
        for (int64_t i = 0; i < K; i++) /* pass 1: decay */
            scale_row(S + i * V, a, V);
        memset(ks, 0, (size_t)V * sizeof *ks); /* pass 2: read k^T S */
        for (int64_t i = 0; i < K; i++)
            axpy(ks, k[i], S + i * V, V);
        for (int64_t j = 0; j < V; j++)
            u[j] = b * (v[j] - ks[j]);
        for (int64_t i = 0; i < K; i++) /* pass 3: write */
            axpy(S + i * V, k[i], u, V);
        memset(o, 0, (size_t)V * sizeof *o); /* pass 4: output */
        for (int64_t i = 0; i < K; i++)
            axpy(o, p->scale * q[i], S + i * V, V);
    }
}

typedef struct job {
    const baseline_problem *p;
    int threads, id;
} job;

static void *worker(void *arg)
{
    job *j = arg;
    float tmp[2 * 1024];
    for (int64_t task = j->id; task < j->p->N * j->p->HV; task += j->threads)
        head(j->p, task / j->p->HV, task % j->p->HV, tmp);
    return NULL;
}

void CAT(BASELINE_NAME, _run)(const baseline_problem *p, int threads)
{
    threads = threads < 1 ? 1 : threads; /* the caller's thread runs job 0 */
    pthread_t *tid = malloc((size_t)threads * sizeof *tid);
    job *jobs = malloc((size_t)threads * sizeof *jobs);
    if (!tid || !jobs) { /* no memory for the threads: every task on the caller's */
        free(tid);
        free(jobs);
        job one = {p, 1, 0};
        worker(&one);
        return;
    }
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){p, threads, i};
        if (i)
            pthread_create(&tid[i], NULL, worker, &jobs[i]);
    }
    worker(&jobs[0]);
    for (int i = 1; i < threads; i++)
        pthread_join(tid[i], NULL);
    free(tid);
    free(jobs);
}
