/* The control socket: one text command per line, as nvidia-cuda-mps-control takes them;
 * each answer ends with an EOT byte on a line of its own (mpsshim-control strips it). */
#define _GNU_SOURCE
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int srv_control_listen(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", srv.pipe_dir,
                         CHAN_CONTROL_NAME) >= sizeof(sa.sun_path))
        return -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -1;
    unlink(sa.sun_path);
    mode_t old = umask(0077);
    int ok = bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(s, 16) == 0;
    umask(old);
    if (!ok) {
        close(s);
        return -1;
    }
    return s;
}

/* Runs one command; appends its answer to `out`. */
static void command(char *line, char *out, size_t cap)
{
    char *save = NULL;
    char *cmd = strtok_r(line, " \t", &save);
    char *arg = strtok_r(NULL, " \t", &save);
    size_t n = 0;
#define OUT(...) (n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, __VA_ARGS__))
    if (!cmd) {
        return;
    } else if (strcmp(cmd, "get_server_list") == 0) {
        OUT("%d\n", (int)getpid());
    } else if (strcmp(cmd, "get_client_list") == 0 || strcmp(cmd, "get_device_client_list") == 0) {
        int all = strcmp(cmd, "get_device_client_list") == 0;
        if (!all && (!arg || atoi(arg) != (int)getpid())) {
            OUT("Server %s not found\n", arg ? arg : "(none)");
        } else {
            pthread_mutex_lock(&srv.clients_lock);
            for (struct srv_client *c = srv.clients; c; c = c->next)
                if (!atomic_load(&c->finished) && c->shm) {
                    if (all)
                        for (int d = 0; d < srv.ndev; d++)
                            OUT("GPU-%d %d\n", d, (int)c->pid);
                    else
                        OUT("%d\n", (int)c->pid);
                }
            pthread_mutex_unlock(&srv.clients_lock);
        }
    } else if (strcmp(cmd, "get_server_status") == 0) {
        unsigned live = 0;
        pthread_mutex_lock(&srv.clients_lock);
        for (struct srv_client *c = srv.clients; c; c = c->next)
            live += !atomic_load(&c->finished);
        pthread_mutex_unlock(&srv.clients_lock);
        OUT("Server %d\nClients %u\n", (int)getpid(), live);
        /* What the driver itself reports: memory returns to its idle level only when every
         * client's allocations were freed. */
        for (int d = 0; d < srv.ndev; d++) {
            size_t f = 0, t = 0;
            if (srv_use_device(d) == CUDA_SUCCESS && DRV(cuMemGetInfo_v2)(&f, &t) == CUDA_SUCCESS)
                OUT("Device %d memory used %zu bytes\n", d, t - f);
        }
    } else if (strcmp(cmd, "quit") == 0) {
        atomic_store(&srv.quitting, 1);
    } else {
        OUT("Unknown command \"%s\"\n", cmd);
    }
#undef OUT
    srv_log("Command: %s%s%s", cmd, arg ? " " : "", arg ? arg : "");
}

static void *control_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char in[1024];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(fd, in + have, sizeof(in) - 1 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
        in[have] = '\0';
        char *nl;
        while ((nl = memchr(in, '\n', have))) {
            *nl = '\0';
            char out[16384] = "";
            command(in, out, sizeof(out) - 3);
            strcat(out, "\x04\n");
            if (write(fd, out, strlen(out)) < 0)
                goto done;
            have -= (size_t)(nl + 1 - in);
            memmove(in, nl + 1, have);
        }
        if (have == sizeof(in) - 1)
            have = 0; /* an absurdly long line: dropped */
    }
done:
    close(fd);
    return NULL;
}

void srv_control_serve(int fd)
{
    pthread_t t;
    if (pthread_create(&t, NULL, control_main, (void *)(intptr_t)fd) == 0)
        pthread_detach(t);
    else
        close(fd);
}
