/* mpsshim-control and the GPUs' own servers. With MPSSHIM_SERVER_PER_GPU a pipe directory
 * holds, beside its own server, one per GPU in its folders gpu-<value>, which clients start
 * (interpose/conn.c). A person or a site's script talks to the pipe directory as to one
 * MPS control daemon, so the commands reach those servers too:
 *
 * - a command naming a server by its pid goes to the server of that pid (get_client_list,
 *   terminate_client, set_active_thread_percentage, ps -p, ...), as MPS's daemon passes it
 *   to the server it names;
 * - those that describe every server (ps, get_device_client_list and get_server_status
 *   without a pid, get_client_info) get every server's answer, one after the other, ps
 *   with one header; get_client_info CLIENT_PID the answer of the server that has it;
 * - the defaults (set_default_*) are given to each running server; a GPU's server started
 *   later takes them from the pipe directory's own at its start (server/control/siblings.c).
 *   A device named by ordinal in set_default_device_pinned_mem_limit is the GPU of the
 *   folder gpu-<ordinal> (whose server calls it 0); one named by UUID is given to each
 *   server and taken by the one that holds it;
 * - get_server_list lists them after the pipe directory's own; quit stops them all.
 *
 * The servers are the folders' (directories, not links) whose control sockets answer; every
 * path here follows MPSSHIM_PIPE_DIRECTORY, pointed at each folder in turn. */
#define _GNU_SOURCE
#include "server/control/ctl.h"
#include "channel/spawn.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Calls fn(s, folder's name, arg) on each folder gpu-* of the pipe directory in which a
 * server answers on the control socket, s connected to it and MPSSHIM_PIPE_DIRECTORY pointing
 * there meanwhile, until fn returns nonzero. How many answered. */
static int each(int (*fn)(int s, const char *name, void *arg), void *arg)
{
    char base[PATH_MAX];
    snprintf(base, sizeof(base), "%s", chan_pipe_dir());
    DIR *d = opendir(base);
    if (!d) return 0;
    int n = 0, stop = 0;
    struct dirent *e;
    while (!stop && (e = readdir(d))) {
        char sub[PATH_MAX];
        struct stat st;
        if (strncmp(e->d_name, "gpu-", 4) != 0 ||
            (size_t)snprintf(sub, sizeof(sub), "%s/%s", base, e->d_name) >= sizeof(sub) ||
            lstat(sub, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        setenv("MPSSHIM_PIPE_DIRECTORY", sub, 1);
        int s = mctl_connect();
        if (s >= 0) {
            n++;
            if (fn) stop = fn(s, e->d_name, arg);
            close(s);
        }
        setenv("MPSSHIM_PIPE_DIRECTORY", base, 1);
    }
    closedir(d);
    return n;
}

int mctl_gpus_count(void)
{
    return each(NULL, NULL);
}

/* The line's words (at most max, each cut to 63 bytes). How many. */
static int words(const char *line, char w[][64], int max)
{
    int n = 0;
    for (const char *p = line; n < max;) {
        p += strspn(p, " \t");
        size_t k = strcspn(p, " \t");
        if (!k) break;
        snprintf(w[n++], 64, "%.*s", (int)(k < 63 ? k : 63), p);
        p += k;
    }
    return n;
}

/* The server pid a command names (the word after its name; ps: after -p), else 0. */
static long named_pid(const char *line)
{
    static const char *const takes[] = {"get_client_list",
                                        "get_device_client_list",
                                        "get_server_status",
                                        "shutdown_server",
                                        "terminate_client",
                                        "set_active_thread_percentage",
                                        "get_active_thread_percentage",
                                        "set_device_pinned_mem_limit",
                                        "get_device_pinned_mem_limit"};
    char w[3][64];
    int n = words(line, w, 3), at = 0;
    for (size_t i = 0; i < sizeof(takes) / sizeof(takes[0]); i++)
        if (n >= 2 && strcmp(w[0], takes[i]) == 0) at = 1;
    if (n >= 3 && strcmp(w[0], "ps") == 0 && strcmp(w[1], "-p") == 0) at = 2;
    char *end;
    long pid = at ? strtol(w[at], &end, 10) : 0;
    return at && end != w[at] && !*end && pid > 0 ? pid : 0;
}

/* Runs line on s with its answer held in memory: the result, the text in *text (malloc'd,
 * the caller's to free; NULL when none could be held). */
static int held_run(int s, const char *line, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    FILE *f = open_memstream(text, len);
    if (!f) return -1;
    int r = mctl_run(s, line, f);
    fclose(f);
    return r;
}

struct route {
    const char *line;
    long pid;
    int r, done;
};

static int route_one(int s, const char *name, void *arg)
{
    struct route *t = arg;
    (void)name;
    if (mctl_peer_pid(s, NULL) != t->pid) return 0;
    t->r = mctl_run(s, t->line, stdout);
    if (t->r == 0 && mctl_is_plain_quit(t->line)) mctl_wait_exit(s, (pid_t)t->pid);
    t->done = 1;
    return 1;
}

int mctl_gpus_route(const char *line, int *r)
{
    struct route t = {.line = line, .pid = named_pid(line)};
    if (!t.pid) return 0;
    each(route_one, &t);
    if (!t.done) return 0;
    *r = t.r < 0 ? 1 : t.r;
    return 1;
}

int mctl_gpus_is_client_info(const char *line)
{
    char w[3][64];
    return words(line, w, 3) == 2 && strcmp(w[0], "get_client_info") == 0;
}

struct found {
    const char *line;
    int done;
};

static int info_one(int s, const char *name, void *arg)
{
    struct found *t = arg;
    char *text;
    size_t len;
    (void)name;
    if (held_run(s, t->line, &text, &len) == 0) {
        fwrite(text, 1, len, stdout);
        t->done = 1;
    }
    free(text);
    return t->done;
}

int mctl_gpus_client_info(const char *line, const char *held, size_t len)
{
    struct found t = {.line = line};
    each(info_one, &t);
    if (t.done) return 0;
    fwrite(held, 1, len, stdout);
    return 1;
}

/* What after() does on each GPU's server. */
enum share { EACH, PS, DEFAULTS, DEV_ORDINAL, DEV_UUID, LIST, QUIT };

struct after {
    const char *line;
    enum share how;
    char dev_line[1100]; /* DEV_ORDINAL: the line as that GPU's server numbers it */
    char folder[80];     /* DEV_ORDINAL: gpu-<ordinal> */
    int header_shown, failed, took;
};

static int after_one(int s, const char *name, void *arg)
{
    struct after *t = arg;
    char *text;
    size_t len;
    int r;
    switch (t->how) {
    case LIST:
    case EACH:
        mctl_run(s, t->line, stdout);
        break;
    case QUIT:
        r = mctl_run(s, t->line, stdout);
        if (r == 0 && mctl_is_plain_quit(t->line)) mctl_wait_exit(s, mctl_peer_pid(s, NULL));
        break;
    case PS:
        if (held_run(s, t->line, &text, &len) == 0 && text) {
            const char *body = text, *nl = memchr(text, '\n', len);
            if (t->header_shown) body = nl ? nl + 1 : text + len; /* one header in all */
            fwrite(body, 1, len - (size_t)(body - text), stdout);
            t->header_shown = 1;
        }
        free(text);
        break;
    case DEFAULTS:
    case DEV_ORDINAL:
    case DEV_UUID:
        if (t->how == DEV_ORDINAL && strcmp(name, t->folder) != 0) break;
        r = held_run(s, t->how == DEV_ORDINAL ? t->dev_line : t->line, &text, &len);
        /* A UUID is one GPU's: the other servers refuse it, as they should. */
        if (r != 0 && t->how != DEV_UUID) {
            printf("%s: ", name);
            if (text) fwrite(text, 1, len, stdout);
            t->failed = 1;
        }
        t->took += r == 0;
        free(text);
        break;
    }
    return 0;
}

/* What the GPUs' servers do with line (into t); 0 when nothing. */
static int share_of(const char *line, struct after *t)
{
    char w[4][64];
    int n = words(line, w, 4);
    if (!n) return 0;
    t->line = line;
    if (mctl_is_quit(line))
        t->how = QUIT;
    else if (n == 1 && strcmp(w[0], "get_server_list") == 0)
        t->how = LIST;
    else if (n == 1 && strcmp(w[0], "ps") == 0)
        t->how = PS;
    else if (n == 1 &&
             (strcmp(w[0], "get_device_client_list") == 0 ||
              strcmp(w[0], "get_server_status") == 0 || strcmp(w[0], "get_client_info") == 0))
        t->how = EACH;
    else if (n == 2 && (strcmp(w[0], "set_default_active_thread_percentage") == 0 ||
                        strcmp(w[0], "set_default_client_priority") == 0))
        t->how = DEFAULTS;
    else if (n == 3 && strcmp(w[0], "set_default_device_pinned_mem_limit") == 0) {
        char *end;
        long d = strtol(w[1], &end, 10);
        t->how = end != w[1] && !*end && d >= 0 ? DEV_ORDINAL : DEV_UUID;
        snprintf(t->folder, sizeof(t->folder), "gpu-%ld", d);
        snprintf(t->dev_line, sizeof(t->dev_line), "%s 0 %s", w[0], w[2]);
    } else
        return 0;
    return 1;
}

void mctl_gpus_after(const char *line, int *r)
{
    struct after t = {.header_shown = 1};
    if (*r != 0 || !share_of(line, &t)) return;
    each(after_one, &t);
    if (t.failed) *r = 1;
}

int mctl_gpus_only(void)
{
    char line[1024];
    int rc = 0;
    while (fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!*line) continue;
        int r = 0;
        struct after t = {0};
        long pid = named_pid(line);
        if (pid) {
            if (!mctl_gpus_route(line, &r)) {
                printf("Server %ld not found\n", pid);
                r = 1;
            }
        } else if (mctl_gpus_is_client_info(line)) {
            char w[2][64], none[100];
            words(line, w, 2);
            int k = snprintf(none, sizeof(none), "Client %s not found\n", w[1]);
            r = mctl_gpus_client_info(line, none, (size_t)k);
        } else if (share_of(line, &t)) {
            each(after_one, &t);
            r = t.failed || ((t.how == DEV_UUID || t.how == DEV_ORDINAL) && !t.took);
            if (r && !t.failed) printf("No GPU's server here holds that device\n");
        } else {
            fprintf(stderr,
                    "No server in %s itself, only in its GPUs' folders (%s/gpu-*: "
                    "MPSSHIM_PIPE_DIRECTORY names one); here only the commands that name a "
                    "server by its pid, those that list every server's, the set_default_* "
                    "ones, and quit, which stops them all\n",
                    chan_pipe_dir(), chan_pipe_dir());
            r = 1;
        }
        rc |= r;
        if (mctl_is_quit(line)) break;
    }
    return rc;
}
