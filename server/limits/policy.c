/* Per-client limits: what the operator set (control commands) and what the client asked
 * for (its environment), resolved once when the client connects, as MPS fixes a client's
 * limits when it starts. The lowest applicable limit wins. */
#include "server/core/server.h"
#include "server/limits/account.h"
#include "server/limits/policy.h"
#include "server/core/devices.h"
#include "channel/settings.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_policy srv_policy;
int srv_prio_least, srv_prio_greatest;
struct srv_sm_info srv_sm[CHAN_MAX_DEVICES];

void srv_policy_init(void)
{
    pthread_mutex_init(&srv_policy.lock, NULL);
    srv_policy.default_pct = 100;
    srv_policy.server_pct = 0;
    srv_policy.default_priority = 0;
}

/* The settings a control user made, as numbers for a server that carries on from this one
 * (handover.c after a fault, recycle.c when idle): " pct spct prio mem0 smem0 mem1 ...". */
int srv_policy_encode(char *b, size_t n)
{
    struct srv_policy *p = &srv_policy;
    pthread_mutex_lock(&p->lock);
    int k = snprintf(b, n, " %d %d %d", p->default_pct, p->server_pct, p->default_priority);
    for (int d = 0; d < CHAN_MAX_DEVICES && k > 0 && (size_t)k < n; d++)
        k += snprintf(b + k, n - (size_t)k, " %llu %llu", (unsigned long long)p->default_mem[d],
                      (unsigned long long)p->server_mem[d]);
    pthread_mutex_unlock(&p->lock);
    return k > 0 && (size_t)k < n ? 0 : -1;
}

int srv_parse_nums(const char **s, unsigned long long *v, int n)
{
    for (int i = 0; i < n; i++) {
        const char *q = *s + (**s == ' ');
        char *end;
        if (!isdigit((unsigned char)*q)) return -1; /* strtoull would take signs and more spaces */
        errno = 0;
        v[i] = strtoull(q, &end, 10);
        if (errno || (*end && *end != ' ')) return -1;
        *s = end;
    }
    return 0;
}

/* What srv_policy_encode wrote, after srv_policy_init (the carried settings win); -1 if
 * malformed (nothing taken). */
int srv_policy_decode(const char *s)
{
    unsigned long long v[3 + 2 * CHAN_MAX_DEVICES];
    if (srv_parse_nums(&s, v, (int)(sizeof(v) / sizeof(v[0]))) != 0 || *s) return -1;
    if (v[0] < 1 || v[0] > 100 || v[1] > 100 || v[2] > 1) return -1;
    struct srv_policy *p = &srv_policy;
    pthread_mutex_lock(&p->lock);
    p->default_pct = (int)v[0];
    p->server_pct = (int)v[1];
    p->default_priority = (int)v[2];
    for (int d = 0; d < CHAN_MAX_DEVICES; d++) {
        p->default_mem[d] = v[3 + 2 * d];
        p->server_mem[d] = v[4 + 2 * d];
    }
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int srv_parse_size(const char *s, uint64_t *out)
{
    unsigned long long v;
    if (chan_parse_size(s, &v) != 0) return -1; /* one rule for settings and commands */
    *out = v;
    return 0;
}

void srv_format_size(uint64_t v, char *out, size_t len)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4; i++) {
        unsigned shift = (unsigned)(40 - 10 * i);
        if (v && v % (1ull << shift) == 0) {
            snprintf(out, len, "%llu%c", (unsigned long long)(v >> shift), units[i]);
            return;
        }
    }
    snprintf(out, len, "%llu", (unsigned long long)v);
}

int srv_device_by_name(const char *s)
{
    if (!s || !*s) return -1;
    if (isdigit((unsigned char)*s)) {
        char *end;
        long d = strtol(s, &end, 10);
        return *end || d < 0 || d >= srv.ndev ? -1 : (int)d;
    }
    /* A UUID as nvidia-smi prints it, "GPU-xxxxxxxx-xxxx-...", or a prefix of one. */
    for (int d = 0; d < srv.ndev; d++) {
        char name[64];
        srv_dev_uuid(d, name, sizeof(name));
        size_t n = strlen(s);
        if (n > 4 && strncasecmp(name, s, n) == 0) return d;
    }
    return -1;
}

/* "0=1G,1=512M" (ordinals or UUIDs) into per-device limits; 0 or -1 with *why. */
static int parse_mem_limits(const char *s, uint64_t *mem, char *why, size_t len)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", s);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        uint64_t v;
        if (!eq) {
            snprintf(why, len, "\"%s\" is not DEVICE=SIZE", item);
            return -1;
        }
        *eq = '\0';
        int d = srv_device_by_name(item);
        if (d < 0) {
            snprintf(why, len, "no device \"%s\" (ordinal or UUID)", item);
            return -1;
        }
        if (srv_parse_size(eq + 1, &v) != 0 || v == 0) {
            snprintf(why, len, "\"%s\" is not a size such as 512M or 2G", eq + 1);
            return -1;
        }
        mem[d] = v;
    }
    return 0;
}

unsigned srv_policy_sms(int dev, int pct)
{
    const struct srv_sm_info *in = &srv_sm[dev];
    if (pct >= 100 || !in->align) return in->total;
    /* Nearest multiple of the partition granularity: 25% of 132 SMs is 33, which gives 32
     * as MPS does; never below the smallest partition, never above the device. */
    unsigned exact = (unsigned)((uint64_t)in->total * (unsigned)pct / 100);
    unsigned n = (exact + in->align / 2) / in->align * in->align;
    if (n < in->min) n = in->min;
    return n > in->total ? in->total : n;
}

/* As strict as the client's reader (channel/settings.c), which says a bad value first. */
static int parse_int(const char *s, int lo, int hi, int *out)
{
    unsigned long long v;
    if (chan_parse_count(s, (unsigned long long)lo, (unsigned long long)hi, &v) != 0) return -1;
    *out = (int)v;
    return 0;
}

int srv_policy_resolve(const struct chan_hello *h, struct srv_limits *out, char *why, size_t len)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&srv_policy.lock);
    int pct = srv_policy.server_pct ? srv_policy.server_pct : srv_policy.default_pct;
    out->priority = srv_policy.default_priority;
    for (int d = 0; d < srv.ndev; d++)
        out->mem[d] =
            srv_policy.server_mem[d] ? srv_policy.server_mem[d] : srv_policy.default_mem[d];
    pthread_mutex_unlock(&srv_policy.lock);

    int want;
    if (*h->active_thread_percentage) {
        if (parse_int(h->active_thread_percentage, 1, 100, &want) != 0) {
            snprintf(why, len, "ACTIVE_THREAD_PERCENTAGE=%s is not a percentage from 1 to 100",
                     h->active_thread_percentage);
            return -1;
        }
        if (want < pct) pct = want;
    }
    out->pct = pct;
    if (*h->client_priority && parse_int(h->client_priority, 0, 1, &out->priority) != 0) {
        snprintf(why, len, "CLIENT_PRIORITY=%s is neither 0 (normal) nor 1 (below normal)",
                 h->client_priority);
        return -1;
    }
    if (*h->pinned_mem_limit) {
        uint64_t mine[CHAN_MAX_DEVICES] = {0};
        char what[200];
        if (parse_mem_limits(h->pinned_mem_limit, mine, what, sizeof(what)) != 0) {
            snprintf(why, len, "PINNED_DEVICE_MEM_LIMIT=%s: %s", h->pinned_mem_limit, what);
            return -1;
        }
        for (int d = 0; d < srv.ndev; d++)
            if (mine[d] && (!out->mem[d] || mine[d] < out->mem[d])) out->mem[d] = mine[d];
    }
    for (int d = 0; d < srv.ndev; d++) {
        out->sms[d] = srv_policy_sms(d, pct);
        out->part[d] = -1;
    }
    return 0;
}

int srv_policy_stream_priority(const struct srv_client *c, int dev, int requested)
{
    /* Lower numbers run first. Below-normal clients' streams sit two steps under what a
     * normal client gets for the same request. Within each class a throttled client's
     * streams (those in a green partition) sit one step above an unthrottled one's: the
     * unthrottled may use every SM, the partition's included, and without this they take
     * its SMs over (a 50% client beside a 100% one ran slower than under MPS: bench/NOTES.md,
     * "Priority of throttled streams"). Clamped to the device's range. */
    int least = srv_prio_least, greatest = srv_prio_greatest;
    /* In 64 bits: the client's requested priority is any int (INT_MIN overflowed here:
     * UBSan under the structured fuzz target). */
    int64_t p =
        (int64_t)requested - (c->lim->priority == 0 ? 2 : 0) - (c->lim->part[dev] >= 0 ? 1 : 0);
    if (p < greatest) p = greatest;
    if (p > least) p = least;
    return (int)p;
}
