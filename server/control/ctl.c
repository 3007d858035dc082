/* mpsshim-control: starts the server (-d daemon, -f foreground), or sends commands read
 * from stdin to a running one and prints the answers, like nvidia-cuda-mps-control.
 * Exit status: 0; 1 when the server could not be started or reached, or (stdin not a
 * terminal) when a command failed; 2 for a usage error. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "channel/proto.h"
#include "channel/spawn.h"
#include "channel/version.h"

/* The server binary lives next to this one. */
static void server_path(char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        snprintf(out, len, "mpsshim-server");
        return;
    }
    self[n] = '\0';
    snprintf(out, len, "%s/mpsshim-server", dirname(self));
}

static int connect_control(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", chan_pipe_dir(), CHAN_CONTROL_NAME);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) return s;
    if (s >= 0) close(s);
    return -1;
}

/* -d: starts the server detached and returns once it serves, or says why it does not. */
static int daemonize(void)
{
    char path[PATH_MAX];
    server_path(path, sizeof(path));
    int s = connect_control();
    if (s >= 0) {
        close(s);
        fprintf(stderr, "An mpsshim server is already running in %s\n", chan_pipe_dir());
        return 1;
    }
    /* The server writes "ready" or its reason for failing to this pipe. */
    int p[2];
    if (pipe(p) != 0) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(p[0]);
        setsid();
        if (fork() != 0) _exit(0);
        if (chan_server_fds(p[1]) != 0) _exit(127);
        char num[16];
        snprintf(num, sizeof(num), "%d", CHAN_READY_FD);
        setenv("MPSSHIM_READY_FD", num, 1);
        /* A daemon's logs are all there is to read later: it refuses to start without. */
        execl(path, "mpsshim-server", "--require-logs", (char *)NULL);
        dprintf(CHAN_READY_FD, "cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    char msg[600];
    if (chan_wait_ready(pid, p[0], msg, sizeof(msg)) == 0) return 0;
    fprintf(stderr, "mpsshim server did not start: %s\n", *msg ? msg : "it exited without a word");
    return 1;
}

/* -f: the server in this process, its log lines on stderr too (systemd, Docker, Kubernetes
 * collect them there). */
static int foreground(void)
{
    char path[PATH_MAX];
    server_path(path, sizeof(path));
    execl(path, "mpsshim-server", "--log-stderr", (char *)NULL);
    fprintf(stderr, "cannot run %s: %s\n", path, strerror(errno));
    return 1;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: mpsshim-control [-d | -f | -h | --help | --version]\n"
        "  -d  start the server in the background (it is the control daemon too); it\n"
        "      refuses to start when its log files cannot be written\n"
        "  -f  run the server in the foreground, its log lines on stderr too\n"
        "  -h, --help  this text; --version  the version\n"
        "Otherwise commands are read from stdin (one per line; a prompt when it is a\n"
        "terminal) and sent to the server of MPSSHIM_PIPE_DIRECTORY (CUDA_MPS_PIPE_DIRECTORY):\n"
        "  get_server_list                        the server's pid\n"
        "  get_server_status [PID]                status, clients, device memory in use\n"
        "  get_client_list PID                    pids of the connected clients\n"
        "  get_device_client_list [PID]           GPU-<n> <client pid> per device and client\n"
        "  ps [-p PID]                            PID ID SERVER DEVICE NAMESPACE COMMAND\n"
        "  get_client_info [CLIENT_PID]           memory, limits, SMs, streams, launches, copies,\n"
        "                                         requests served, replies from the GPU\n"
        "  terminate_client PID CLIENT_PID        fail the client's calls, free what it holds\n"
        "  quit [-t SECONDS]                      stop the server (-t: let clients finish first)\n"
        "  set_default_active_thread_percentage PCT | get_default_active_thread_percentage\n"
        "  set_active_thread_percentage PID PCT   | get_active_thread_percentage PID\n"
        "  set_default_device_pinned_mem_limit DEV SIZE | get_default_device_pinned_mem_limit DEV\n"
        "  set_device_pinned_mem_limit PID DEV SIZE | get_device_pinned_mem_limit PID DEV\n"
        "  set_default_client_priority 0|1        | get_default_client_priority\n"
        "Settings apply to clients that connect afterwards. DEV: ordinal or UUID;\n"
        "SIZE: 900M, 10G, bytes, 0 for none. quit returns once the server has exited.\n"
        "Exit status: 0; 1 if the server cannot be started or reached, or, when stdin is\n"
        "not a terminal, if any command failed (every line is still sent); 2 usage.\n");
}

/* "quit" or "quit -t N": the server goes away after answering. */
static int is_quit(const char *line)
{
    return strncmp(line, "quit", 4) == 0 && (line[4] == '\0' || line[4] == ' ' || line[4] == '\t');
}

/* Sends one command and prints its answer (up to the EOT byte; a NAK just before it marks a
 * failed command and is not printed). 0, 1 if the command failed, -1 if the connection
 * closed first, -2 if the server closed it without taking the command (the answer then
 * starts with a CAN byte: it is not printed, and the command may be sent again). */
static int run(int s, const char *line)
{
    char msg[1100];
    snprintf(msg, sizeof(msg), "%s\n", line);
    /* A failed send is not the end: an answer the server sent before it closed (its reason
     * for turning this connection away) is still there to read. */
    if (send(s, msg, strlen(msg), MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET)
        return -1;
    char buf[4096];
    int held_nak = 0; /* a NAK ended the last read: printed only if more text follows */
    int first = 1;
    for (;;) {
        ssize_t n = read(s, buf, sizeof(buf));
        if (n <= 0) return is_quit(line) ? 0 : -1;
        if (first && buf[0] == '\x18') return -2;
        first = 0;
        char *eot = memchr(buf, '\x04', (size_t)n);
        size_t len = eot ? (size_t)(eot - buf) : (size_t)n;
        if (held_nak && len) fputc('\x15', stdout);
        if (eot && len == 0) break; /* held_nak stays: it was the last byte before EOT */
        held_nak = buf[len - 1] == '\x15';
        fwrite(buf, 1, len - (size_t)held_nak, stdout);
        if (eot) break;
    }
    fflush(stdout);
    return held_nak;
}

/* Something the server said before it was asked: it closed this connection (idle too long,
 * or to make room for another), and that was its reason. */
static int closed_meanwhile(int s)
{
    struct pollfd pf = {.fd = s, .events = POLLIN};
    return poll(&pf, 1, 0) > 0;
}

/* The pid of the server at the other end of s (0 if unknown: another pid namespace). */
static pid_t peer_pid(int s)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    return getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 ? cr.pid : 0;
}

/* pid has exited: gone, or a zombie (every file it held, the GPU's and its locks included,
 * is released by then). */
static int exited(pid_t pid)
{
    char path[64], stat[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t n = read(fd, stat, sizeof(stat) - 1);
    close(fd);
    if (n <= 0) return 1;
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')'); /* the command name may hold anything */
    return !paren || paren[1] != ' ' || paren[2] == 'Z' || paren[2] == 'X';
}

/* After a plain quit: returns once the server process has exited, so that a new server may
 * start at once (the server closes its connections only as it exits; then its pid leaves
 * the running state within moments: that wait is bounded, in case the pid was reused). */
static void wait_exit(int s, pid_t pid)
{
    char b[256];
    for (;;) {
        ssize_t n = read(s, b, sizeof(b));
        if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    for (int i = 0; pid > 0 && i < 1000 && !exited(pid); i++)
        usleep(10 * 1000);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "-d") == 0) return daemonize();
    if (argc > 1 && strcmp(argv[1], "-f") == 0) return foreground();
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        chan_print_version("mpsshim-control");
        return 0;
    }
    if (argc > 1) {
        usage(stderr);
        return 2;
    }
    int s = connect_control();
    if (s < 0) {
        fprintf(stderr, "Cannot connect to an mpsshim server in %s: %s\n", chan_pipe_dir(),
                strerror(errno));
        return 1;
    }
    pid_t server = peer_pid(s);
    char line[1024];
    int rc = 0;
    int tty = isatty(0);
    for (;;) {
        if (tty) {
            printf("> ");
            fflush(stdout);
        }
        if (!fgets(line, sizeof(line), stdin)) break;
        line[strcspn(line, "\r\n")] = '\0';
        if (!*line) continue;
        if (strcmp(line, "help") == 0) {
            usage(stdout);
            continue;
        }
        /* A connection the server closed while this program waited for input (a session
         * idle for MPSSHIM_CONTROL_IDLE seconds, say) is made again, as often as the server
         * says it did not take the command, within reason. */
        int r = -2;
        for (int tries = 0; r == -2 && tries < 5; tries++) {
            if (tries || closed_meanwhile(s)) {
                close(s);
                if ((s = connect_control()) < 0) {
                    fprintf(stderr, "Cannot connect to an mpsshim server in %s: %s\n",
                            chan_pipe_dir(), strerror(errno));
                    return 1;
                }
                server = peer_pid(s);
            }
            r = run(s, line);
        }
        if (r < 0) {
            fprintf(stderr, "The server closed the connection\n");
            rc = 1;
            break;
        }
        if (r > 0 && !tty)
            rc = 1; /* a script learns that a command failed; a person reads the answer */
        if (r == 0 && is_quit(line) && !line[4 + strspn(line + 4, " \t")])
            wait_exit(s, server); /* quit -t returns once it is answered, as before */
        if (r == 0 && is_quit(line)) break;
    }
    close(s);
    return rc;
}
