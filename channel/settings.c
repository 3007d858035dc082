/* The settings reader of both ends: the table (settings.def) and strict parsing, one rule
 * for every variable. An empty value is as unset. A bad value is said once per process,
 * naming the variable as the user set it (MPSSHIM_X or CUDA_MPS_X), its value, what is
 * accepted and what is used instead.
 *
 * Read raw with getenv, not through here: LD_PRELOAD (the server drops the shim from it),
 * CUDA_VISIBLE_DEVICES (the driver's variable, passed to the server as the client has it),
 * SLURM_JOB_ID (Slurm's, it names the job's pipe directory), MPSSHIM_READY_FD,
 * MPSSHIM_STANDBY_OF and MPSSHIM_RECYCLE (set by mpsshim itself for the server it starts,
 * never by a user), the CUDA_MPS_* the server clears from its environment, and the CPU test
 * driver's MPSSHIM_CPUDRV_* and MPSSHIM_TEST_* (tests/cpudrv: a test fixture, not mpsshim). */
#define _GNU_SOURCE
#include "channel/settings.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const struct chan_setting chan_settings[CHAN_SET_N] = {
#define SETTING(id, name, mps, side, kind, lo, hi, dflt, choices, on_bad, doc)                     \
    [CHAN_SET_##id] = {name, mps, side, kind, lo, hi, dflt, choices, on_bad, doc},
#include "channel/settings.def"
#undef SETTING
};

enum origin { FROM_DEFAULT, FROM_ENV, FROM_BAD, FROM_OVERRIDE };

static _Atomic int origin[CHAN_SET_N];
static atomic_flag said[CHAN_SET_N];
static void (*reporter)(const char *line);
/* The value in force and its source, for the server's status: copied when read (the server
 * clears CUDA_MPS_* from its environment afterwards), by the first reader only. */
static atomic_flag noted[CHAN_SET_N];
static char value_of[CHAN_SET_N][128], from_of[CHAN_SET_N][80];

void chan_settings_reporter(void (*say)(const char *line))
{
    reporter = say;
}

/* The value and the variable it came from: ours, else MPS's; NULL when both are unset or
 * empty. */
static const char *raw(enum chan_setting_id id, const char **var)
{
    const struct chan_setting *s = &chan_settings[id];
    const char *v = getenv(s->name);
    *var = s->name;
    if ((!v || !*v) && s->mps) {
        v = getenv(s->mps);
        *var = s->mps;
    }
    return v && *v ? v : NULL;
}

int chan_parse_size(const char *s, unsigned long long *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s)) return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -1; /* beyond 2^64: refused, not capped */
    const char *units = "KMGT", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (*end && !u) return -1;
    unsigned shift = u ? 10u * (unsigned)(u - units + 1) : 0;
    if (*end && end[1] && !(toupper((unsigned char)end[1]) == 'B' && !end[2])) return -1;
    if (shift && v > (~0ull >> shift)) return -1;
    *out = v << shift;
    return 0;
}

int chan_parse_count(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out)
{
    char *end;
    if (!isdigit((unsigned char)*s)) return -1; /* strtoull takes signs and spaces */
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static const char *const bool_words[] = {"0", "no", "false", "off", "1", "yes", "true", "on"};

/* A value of a numeric or boolean kind: 0, or -1 when it is not one. A boolean whose
 * default is "auto" (decided where it is used: its reader says how) takes "auto" too, as
 * CHAN_SETTING_AUTO. */
static int parse_num(const struct chan_setting *s, const char *v, unsigned long long *out)
{
    if (s->kind == CHAN_SET_BOOL) {
        for (int i = 0; i < 8; i++)
            if (strcasecmp(v, bool_words[i]) == 0) return *out = i >= 4, 0;
        if (strcmp(s->dflt, "auto") == 0 && strcasecmp(v, "auto") == 0)
            return *out = CHAN_SETTING_AUTO, 0;
        return -1;
    }
    if (s->kind == CHAN_SET_SIZE) {
        if (chan_parse_size(v, out) != 0) return -1;
        return *out < s->lo || *out > s->hi ? -1 : 0;
    }
    return chan_parse_count(v, s->lo, s->hi, out);
}

/* "DEVICE=SIZE,...": each size one a setting takes, from s->lo; the devices are left to the
 * server, which alone knows them. 0 or -1. */
static int device_sizes(const struct chan_setting *s, const char *v)
{
    char item[256];
    unsigned long long n;
    while (*v) {
        size_t len = strcspn(v, ",");
        if (len == 0) { /* empty items are skipped, as the server skips them */
            v++;
            continue;
        }
        if (len >= sizeof(item)) return -1;
        memcpy(item, v, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        if (!eq || eq == item || chan_parse_size(eq + 1, &n) != 0 || n < s->lo) return -1;
        v += len + (v[len] == ',');
    }
    return 0;
}

static int choice_of(const struct chan_setting *s, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *c = s->choices; c && *c; i++) {
        size_t len = strcspn(c, "|");
        if (len == n && strncmp(c, v, n) == 0) return i;
        c += len + (c[len] == '|');
    }
    return -1;
}

void chan_setting_accepts(enum chan_setting_id id, char *out, size_t len)
{
    const struct chan_setting *s = &chan_settings[id];
    static const char *const unit[] = {[CHAN_SET_COUNT] = "a whole number",
                                       [CHAN_SET_SECONDS] = "a whole number of seconds",
                                       [CHAN_SET_US] = "a whole number of microseconds",
                                       [CHAN_SET_MB] = "a whole number of MiB",
                                       [CHAN_SET_SIZE] =
                                           "a size in bytes (K, M, G, T: 2^10, 2^20...)"};
    switch (s->kind) {
    case CHAN_SET_BOOL:
        snprintf(out, len, "%s0 or 1 (no/yes, false/true, off/on)",
                 strcmp(s->dflt, "auto") == 0 ? "auto, " : "");
        break;
    case CHAN_SET_CHOICE:
        snprintf(out, len, "one of %s", s->choices);
        break;
    case CHAN_SET_PATH:
        snprintf(out, len, "a path");
        break;
    case CHAN_SET_DEVICE_SIZES:
        snprintf(out, len, "DEVICE=SIZE,... (ordinals or UUIDs, sizes such as 512M)");
        break;
    default:
        if (s->hi == ~0ull)
            snprintf(out, len, "%s from %llu", unit[s->kind], s->lo);
        else
            snprintf(out, len, "%s from %llu to %llu", unit[s->kind], s->lo, s->hi);
    }
}

/* Says that var=v is bad, once per setting and process. */
static void refuse(enum chan_setting_id id, const char *var, const char *v)
{
    const struct chan_setting *s = &chan_settings[id];
    /* The value as set, its control characters as '?': one line, whatever it holds. */
    char shown[65];
    size_t n = 0;
    for (; v[n] && n < sizeof(shown) - 1; n++)
        shown[n] = (unsigned char)v[n] < 0x20 || v[n] == 0x7f ? '?' : v[n];
    shown[n] = '\0';
    if (!atomic_flag_test_and_set(&noted[id])) {
        snprintf(value_of[id], sizeof(value_of[id]), "%s", s->dflt);
        snprintf(from_of[id], sizeof(from_of[id]), "default: %s=%.40s refused", var, shown);
        atomic_store(&origin[id], FROM_BAD);
    }
    if (atomic_flag_test_and_set(&said[id])) return;
    char acc[128], line[512];
    chan_setting_accepts(id, acc, sizeof(acc));
    if (s->on_bad == CHAN_BAD_REFUSE)
        snprintf(line, sizeof(line), "%s=%s is not %s: this client is refused", var, shown, acc);
    else
        snprintf(line, sizeof(line), "%s=%s is not %s: the default, %s, is used", var, shown, acc,
                 s->dflt);
    if (reporter)
        reporter(line);
    else
        fprintf(stderr, "mpsshim: %s\n", line);
}

static void took(enum chan_setting_id id, const char *var, const char *v)
{
    if (atomic_flag_test_and_set(&noted[id])) return;
    snprintf(value_of[id], sizeof(value_of[id]), "%s", v);
    snprintf(from_of[id], sizeof(from_of[id]), "env %s", var);
    atomic_store(&origin[id], FROM_ENV);
}

int chan_setting_get(enum chan_setting_id id, unsigned long long *v)
{
    const char *var, *s = raw(id, &var);
    unsigned long long n;
    if (!s) return 0;
    if (parse_num(&chan_settings[id], s, &n) != 0) {
        refuse(id, var, s);
        return 0;
    }
    took(id, var, s);
    *v = n;
    return 1;
}

unsigned long long chan_setting_num(enum chan_setting_id id)
{
    unsigned long long v = 0;
    if (!chan_setting_get(id, &v)) parse_num(&chan_settings[id], chan_settings[id].dflt, &v);
    return v;
}

int chan_setting_choice(enum chan_setting_id id)
{
    const char *var, *s = raw(id, &var);
    int i = s ? choice_of(&chan_settings[id], s) : -1;
    if (i >= 0) {
        took(id, var, s);
        return i;
    }
    if (s) refuse(id, var, s);
    return choice_of(&chan_settings[id], chan_settings[id].dflt);
}

const char *chan_setting_text(enum chan_setting_id id, int *bad)
{
    const struct chan_setting *s = &chan_settings[id];
    const char *var, *v = raw(id, &var);
    unsigned long long n;
    if (bad) *bad = 0;
    if (!v) return NULL;
    int bad_value = s->kind == CHAN_SET_DEVICE_SIZES ? device_sizes(s, v) != 0
                    : s->kind != CHAN_SET_PATH       ? parse_num(s, v, &n) != 0
                                                     : 0;
    if (bad_value) {
        refuse(id, var, v);
        if (bad) *bad = 1;
        return v;
    }
    took(id, var, v);
    return v;
}

int chan_setting_default_ok(enum chan_setting_id id)
{
    const struct chan_setting *s = &chan_settings[id];
    unsigned long long v;
    if (s->dflt[0] == '(' || s->kind == CHAN_SET_PATH) return 1;
    if (s->kind == CHAN_SET_CHOICE) return choice_of(s, s->dflt) >= 0;
    return parse_num(s, s->dflt, &v) == 0;
}

void chan_setting_override(enum chan_setting_id id, const char *value, const char *from)
{
    atomic_flag_test_and_set(&noted[id]);
    snprintf(value_of[id], sizeof(value_of[id]), "%s", value);
    snprintf(from_of[id], sizeof(from_of[id]), "%s", from);
    atomic_store(&origin[id], FROM_OVERRIDE);
}

void chan_setting_origin(enum chan_setting_id id, char *value, size_t vlen, char *from, size_t flen)
{
    int known = atomic_load(&origin[id]) != FROM_DEFAULT;
    snprintf(value, vlen, "%s", known ? value_of[id] : chan_settings[id].dflt);
    snprintf(from, flen, "%s", known ? from_of[id] : "default");
}

void chan_settings_check(const char *side)
{
    for (int i = 0; i < CHAN_SET_N; i++) {
        const struct chan_setting *s = &chan_settings[i];
        unsigned long long v;
        if (strcmp(s->side, side) != 0 && strcmp(s->side, "both") != 0) continue;
        if (s->kind == CHAN_SET_CHOICE)
            chan_setting_choice((enum chan_setting_id)i);
        else if (s->kind == CHAN_SET_PATH || s->kind == CHAN_SET_DEVICE_SIZES ||
                 s->on_bad == CHAN_BAD_REFUSE)
            chan_setting_text((enum chan_setting_id)i, NULL);
        else
            chan_setting_get((enum chan_setting_id)i, &v);
    }
}
