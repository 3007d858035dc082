/* The handles the client knows itself: those of the types cuda_symbols.txt marks `client`
 * (streams, events), so that a bad one is refused at once, as the real driver does, even
 * by an asynchronous call whose server-side error would only show later, and so that
 * their flags read back without a round trip. The server's registry is authoritative. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct known_key {
    uint64_t value;
    uint32_t type;
    uint32_t pad;
};

struct known {
    struct known_key key;
    struct shim_known info;
    UT_hash_handle hh;
};

/* Guarded by known_lock. */
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;
static struct known *known;

_Atomic int shim_interprocess_events;

void shim_known_add(uint32_t type, uint64_t value, const struct shim_known *info)
{
    if (type == SHIM_HT_CUevent && (info->flags & CU_EVENT_INTERPROCESS))
        atomic_store_explicit(&shim_interprocess_events, 1, memory_order_relaxed);
    struct known *k = calloc(1, sizeof(*k));
    if (!k) return; /* then the server alone checks the handle */
    k->key.value = value;
    k->key.type = type;
    k->info = *info;
    pthread_mutex_lock(&known_lock);
    struct known *old = NULL;
    HASH_FIND(hh, known, &k->key, sizeof(k->key), old);
    if (old) HASH_DEL(known, old);
    HASH_ADD(hh, known, key, sizeof(k->key), k);
    pthread_mutex_unlock(&known_lock);
    free(old);
}

int shim_known_take(uint32_t type, uint64_t value, struct shim_known *out)
{
    struct known_key key = {.value = value, .type = type};
    struct known *k = NULL;
    pthread_mutex_lock(&known_lock);
    HASH_FIND(hh, known, &key, sizeof(key), k);
    if (k) HASH_DEL(known, k);
    pthread_mutex_unlock(&known_lock);
    int found = k != NULL;
    if (k && out) *out = k->info;
    free(k);
    return found ? 0 : -1;
}

int shim_known_remove(uint32_t type, uint64_t value)
{
    return shim_known_take(type, value, NULL);
}

int shim_known_find(uint32_t type, uint64_t value, struct shim_known *out)
{
    struct known_key key = {.value = value, .type = type};
    struct known *k = NULL;
    pthread_mutex_lock(&known_lock);
    HASH_FIND(hh, known, &key, sizeof(key), k);
    if (k && out) *out = k->info;
    pthread_mutex_unlock(&known_lock);
    return k ? 0 : -1;
}

void shim_known_drop_ctx(uint32_t ctx)
{
    pthread_mutex_lock(&known_lock);
    struct known *k, *t;
    HASH_ITER(hh, known, k, t)
        if (k->info.ctx == ctx) {
            HASH_DEL(known, k);
            free(k);
        }
    pthread_mutex_unlock(&known_lock);
}

/* ---------------------------------------------------------------- strings */

/* Strings the driver API returns by pointer (function and kernel names) live as long as
 * the process: callers keep the pointers. Interned by content; guarded by strings_lock. */
struct interned {
    UT_hash_handle hh;
    char text[];
};
static pthread_mutex_t strings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct interned *strings;

const char *shim_intern(const char *s)
{
    size_t n = strlen(s);
    struct interned *e = NULL;
    pthread_mutex_lock(&strings_lock);
    HASH_FIND(hh, strings, s, n, e);
    if (!e && (e = malloc(sizeof(*e) + n + 1))) {
        memcpy(e->text, s, n + 1);
        HASH_ADD_KEYPTR(hh, strings, e->text, n, e);
    }
    pthread_mutex_unlock(&strings_lock);
    return e ? e->text : NULL;
}
