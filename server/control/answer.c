/* A control command's answer. Answers that list clients (ps, get_client_list,
 * get_client_info, get_device_client_list) grow with them: a fixed buffer cut ps at a few
 * thousand clients, far below the client limit's bound. The answer is built whole before it
 * is sent (it is written under the clients' lock, which must never wait on a slow reader),
 * so it grows as written, bounded by a ceiling sized from the client limit (controlsock.c),
 * and goes back to its first size after a long one. */
#include "server/control/answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int srv_answer_init(struct srv_answer *a, size_t first, size_t max)
{
    *a = (struct srv_answer){.first = first < 1 ? 1 : first, .max = max, .fd = -1};
    if (a->max < a->first) a->max = a->first;
    a->buf = malloc(a->first);
    if (!a->buf) return -1;
    a->cap = a->first;
    a->buf[0] = '\0';
    return 0;
}

/* Grows buf to hold need bytes (the NUL counted), or as many as max and memory allow. */
static void grow(struct srv_answer *a, size_t need)
{
    if (need <= a->cap) return;
    size_t to = a->cap <= a->max / 2 ? a->cap * 2 : a->max; /* doubling: few reallocs */
    if (to < need) to = need;
    if (to > a->max) to = a->max;
    char *b = to > a->cap ? realloc(a->buf, to) : NULL;
    if (!b) return; /* the caller cuts at what is there */
    a->buf = b;
    a->cap = to;
}

size_t srv_answer_room(struct srv_answer *a, size_t want)
{
    size_t need;
    if (__builtin_add_overflow(a->n + 1, want, &need)) need = a->max; /* n < cap <= max */
    grow(a, need);
    return a->cap - a->n;
}

void srv_answer_vsay(struct srv_answer *a, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int m = vsnprintf(a->buf + a->n, a->cap - a->n, fmt, ap);
    if (m >= 0 && (size_t)m >= a->cap - a->n) {
        /* It did not fit: grow and write it again, cut where max (or memory) says. */
        srv_answer_room(a, (size_t)m);
        m = vsnprintf(a->buf + a->n, a->cap - a->n, fmt, again);
    }
    va_end(again);
    if (m < 0) return;
    if ((size_t)m >= a->cap - a->n) {
        a->n = a->cap - 1;
        a->cut = 1;
    } else {
        a->n += (size_t)m;
    }
}

void srv_answer_reset(struct srv_answer *a)
{
    if (a->cap > a->first) {
        char *b = realloc(a->buf, a->first);
        if (b) {
            a->buf = b;
            a->cap = a->first;
        }
    }
    a->n = 0;
    a->cut = 0;
    a->buf[0] = '\0';
    if (a->fd >= 0) close(a->fd);
    a->fd = -1;
}

void srv_answer_free(struct srv_answer *a)
{
    free(a->buf);
    a->buf = NULL;
    if (a->fd >= 0) close(a->fd);
    a->fd = -1;
    a->n = a->cap = 0;
}

size_t srv_answer_ceiling(size_t base, size_t clients, size_t per_client)
{
    size_t all;
    if (__builtin_mul_overflow(clients, per_client, &all) ||
        __builtin_add_overflow(all, base, &all))
        return (size_t)-1;
    return all;
}
