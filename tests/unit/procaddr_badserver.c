/* The client's checks of the cuGetProcAddress table a server sends (interpose/procaddr.c):
 * a fake server hands the shim a table, whole or damaged, and the shim must answer from a
 * good one, leave out what it does not know (one log line), and answer from its compiled-in
 * table when the server's is malformed. Each case runs in a process of its own (the shim
 * decides where answers come from once per process).
 * usage: procaddr_badserver LIBMPSSHIM DIR */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel/chan.h"
#include "channel/fdpass.h"

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);

enum damage {
    D_NONE,        /* a good table: the shim follows it */
    D_UNKNOWN,     /* a symbol the shim lacks and a name it does not know: left out */
    D_NAME_OFFSET, /* a name offset past the strings */
    D_NOT_IDENT,   /* a name that is no C identifier */
    D_DUPLICATE,   /* one request answered twice */
    D_FLAGS,       /* flags 7 */
    D_HEADER,      /* a header that counts one row too many */
    D_TOO_BIG,     /* a total past CHAN_PROCADDR_MAX */
    D_PAGES,       /* pages that disagree on the total */
    D_REFUSED,     /* the server answers with an error */
};
static const char *const case_names[] = {"good",      "unknown", "name-offset", "not-identifier",
                                         "duplicate", "flags",   "header",      "too-big",
                                         "pages",     "refused"};

static uint8_t table[4096];
static uint32_t table_len;
static enum damage dmg;

struct trow {
    const char *name;
    int flags, version;
    const char *symbol;
    int result, status;
};

/* The table: cuMemAlloc gives cuMemAlloc until 5000 (not 3020 as the 580 driver), then
 * cuMemAlloc_v2; nothing else is in it. */
static void make_table(void)
{
    struct trow rows[16];
    int n = 0;
    for (int f = 0; f <= 2; f++) {
        rows[n++] = (struct trow){"cuMemAlloc", f, 2000, "cuMemAlloc", 0, 0};
        rows[n++] = (struct trow){"cuMemAlloc", f, 5000, "cuMemAlloc_v2", 0, 0};
        rows[n++] = (struct trow){"cuMemAlloc", f, 13010, NULL, 1, -1};
    }
    if (dmg == D_UNKNOWN) {
        rows[n++] = (struct trow){"cuMemAlloc", 0, 6000, "cuMemAlloc_v9", 0, 0};
        rows[n++] = (struct trow){"cuNoSuchCall", 0, 2000, "cuMemAlloc_v2", 0, 0};
    }
    if (dmg == D_NOT_IDENT) rows[n++] = (struct trow){"cu;Mem", 0, 2000, "cuMemAlloc_v2", 0, 0};
    if (dmg == D_DUPLICATE) rows[n++] = rows[0];
    if (dmg == D_FLAGS) rows[n++] = (struct trow){"cuMemAlloc", 7, 2000, "cuMemAlloc", 0, 0};
    char strings[1024];
    uint32_t ns = 0;
    struct chan_procaddr_row wire[16];
    for (int i = 0; i < n; i++) {
        wire[i] = (struct chan_procaddr_row){.version = rows[i].version,
                                             .flags = rows[i].flags,
                                             .result = rows[i].result,
                                             .status = rows[i].status,
                                             .symbol = CHAN_PROCADDR_NONE};
        wire[i].name = ns;
        ns += (uint32_t)sprintf(strings + ns, "%s", rows[i].name) + 1;
        if (rows[i].symbol) {
            wire[i].symbol = ns;
            ns += (uint32_t)sprintf(strings + ns, "%s", rows[i].symbol) + 1;
        }
    }
    if (dmg == D_NAME_OFFSET) wire[1].name = ns + 10;
    struct chan_procaddr_head h = {CHAN_PROCADDR_MAGIC, 13000, (uint32_t)n + (dmg == D_HEADER), ns};
    memcpy(table, &h, sizeof(h));
    memcpy(table + sizeof(h), wire, n * sizeof(wire[0]));
    memcpy(table + sizeof(h) + n * sizeof(wire[0]), strings, ns);
    table_len = (uint32_t)(sizeof(h) + n * sizeof(wire[0]) + ns);
}

/* Serves one client: the handshake, then CHAN_OP_PROCADDR in pages of 100 bytes (anything
 * else is refused). */
static void *serve(void *arg)
{
    int ls = *(int *)arg, s = accept(ls, NULL, NULL);
    struct chan_hello h;
    if (s < 0 || recv(s, &h, sizeof(h), MSG_WAITALL) != (ssize_t)sizeof(h)) return NULL;
    size_t size = chan_segment_size();
    int fd = memfd_create("fake-server", MFD_CLOEXEC);
    void *base = fd >= 0 && ftruncate(fd, (off_t)size) == 0
                     ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                     : MAP_FAILED;
    if (base == MAP_FAILED) return NULL;
    struct chan c;
    chan_attach(&c, base);
    chan_init_header(&c);
    struct chan_welcome w = {.magic = CHAN_MAGIC,
                             .major = CHAN_PROTO_MAJOR,
                             .minor = CHAN_PROTO_MINOR,
                             .status = CHAN_WELCOME_OK,
                             .server_pid = getpid(),
                             .shm_size = size,
                             .client_id = 1};
    if (chan_send_fd(s, &w, sizeof(w), fd) != 0) return NULL;
    static uint8_t rec[CHAN_REC_MAX];
    for (unsigned pages = 0;;) {
        enum chan_next nx = chan_ring_next(&c, rec);
        if (nx == CHAN_NEXT_BAD) return NULL;
        if (nx == CHAN_NEXT_NONE) {
            chan_ring_sleep(&c, 10 * 1000 * 1000);
            continue;
        }
        const struct chan_rec *r = (const struct chan_rec *)rec;
        if (!(r->flags & CHAN_RF_REPLY) || r->lane >= CHAN_NLANES || r->op == CHAN_OP_PAD) continue;
        uint32_t off;
        if (r->op != CHAN_OP_PROCADDR || r->size != sizeof(*r) + sizeof(off) || dmg == D_REFUSED) {
            chan_lane_post(&c, r->lane, CUDA_ERROR_NOT_SUPPORTED, 0);
            continue;
        }
        memcpy(&off, r + 1, sizeof(off));
        struct chan_procaddr_page pg = {.total = table_len};
        if (dmg == D_TOO_BIG) pg.total = CHAN_PROCADDR_MAX + 1;
        if (dmg == D_PAGES && pages++ > 0) pg.total = table_len + 100;
        uint32_t n = off < table_len ? table_len - off : 0;
        n = n > 100 ? 100 : n;
        memcpy(c.lanes[r->lane].data, &pg, sizeof(pg));
        memcpy(c.lanes[r->lane].data + sizeof(pg), table + off, n);
        chan_lane_post(&c, r->lane, CUDA_SUCCESS, (uint32_t)sizeof(pg) + n);
    }
}

/* One case in this process: 0 when the shim answered as it must. */
static int run_case(const char *shim, const char *dir)
{
    setenv("MPSSHIM_PIPE_DIRECTORY", dir, 1);
    setenv("MPSSHIM_AUTOSTART", "0", 1);
    setenv("MPSSHIM_DRIVER", "/nonexistent", 1);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(dir) + sizeof(CHAN_SOCKET_NAME) + 1 > sizeof(sa.sun_path)) return 1;
    memcpy(sa.sun_path, dir, strlen(dir));
    memcpy(sa.sun_path + strlen(dir), "/" CHAN_SOCKET_NAME, sizeof(CHAN_SOCKET_NAME) + 1);
    unlink(sa.sun_path);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    pthread_t t;
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(ls, 1) != 0 ||
        pthread_create(&t, NULL, serve, &ls) != 0) {
        perror("fake server");
        return 1;
    }
    make_table();
    void *h = dlopen(shim, RTLD_NOW | RTLD_LOCAL);
    getproc_t get = h ? (getproc_t)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!get) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    void *v1 = dlsym(h, "cuMemAlloc"), *v2 = dlsym(h, "cuMemAlloc_v2"), *fn = NULL;
    int bad = 0;
    CUdriverProcAddressQueryResult st;
    CUresult r = get("cuMemAlloc", &fn, 4000, 0, &st);
    /* Followed: the server's v1 at 4000; malformed: the compiled-in 580 answer, _v2. */
    void *want4000 = dmg == D_NONE || dmg == D_UNKNOWN ? v1 : v2;
    bad += r != CUDA_SUCCESS || fn != want4000;
    r = get("cuMemAlloc", &fn, 5000, 2, &st);
    bad += r != CUDA_SUCCESS || fn != v2;
    /* cuInit: not in the server's table (it answers for nothing else), in the compiled-in. */
    r = get("cuInit", &fn, 13000, 0, &st);
    bad += (dmg == D_NONE || dmg == D_UNKNOWN) ? r != CUDA_ERROR_NOT_FOUND : r != CUDA_SUCCESS;
    if (dmg == D_UNKNOWN) {
        r = get("cuMemAlloc", &fn, 6000, 0, &st);
        bad += r != CUDA_ERROR_NOT_FOUND || st != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        r = get("cuNoSuchCall", &fn, 6000, 0, &st);
        bad += r != CUDA_ERROR_NOT_FOUND;
    }
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: procaddr_badserver LIBMPSSHIM DIR\n");
        return 2;
    }
    int failed = 0;
    mkdir(argv[2], 0700);
    for (int d = D_NONE; d <= D_REFUSED; d++) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) {
            dmg = (enum damage)d;
            char dir[512];
            snprintf(dir, sizeof(dir), "%s/%s", argv[2], case_names[d]);
            mkdir(dir, 0700);
            _exit(run_case(argv[1], dir));
        }
        int status = 1;
        waitpid(p, &status, 0);
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        printf("%-16s %s\n", case_names[d], ok ? "ok" : "FAILED");
        failed += !ok;
    }
    return failed != 0;
}
