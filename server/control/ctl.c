/* mpsshim-control: starts the server (-d daemon, -f foreground), or sends commands read
 * from stdin to a running one and prints the answers, like nvidia-cuda-mps-control.
 * Exit status: 0; 1 when the server could not be started or reached, or (stdin not a
 * terminal) when a command failed; 2 for a usage error. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "channel/proto.h"
#include "channel/spawn.h"
#include "channel/version.h"
#include "server/control/ctl.h"

/* The name the server runs under: MPS's control daemon's when this program was run as
 * nvidia-cuda-mps-control (make install-mps-compat), so that the scripts that look for it
 * in ps (the MPS guide's epilogue does) find it, and so that the server uses MPS's default
 * directories as this program does (channel/spawn.h). */
static const char *server_name = "mpsshim-server";

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

static void take_back_pipe_dir(void);

/* -d: starts the server detached and returns once it serves, or says why it does not. */
static int daemonize(void)
{
    char path[PATH_MAX];
    server_path(path, sizeof(path));
    int s = mctl_connect();
    if (s >= 0) {
        close(s);
        fprintf(stderr, "An mpsshim server is already running in %s\n", chan_pipe_dir());
        return 1;
    }
    take_back_pipe_dir();
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
        execl(path, server_name, "--require-logs", (char *)NULL);
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
    execl(path, server_name, "--log-stderr", (char *)NULL);
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
        "  get_server_list                        the server's pid, then its GPUs' servers'\n"
        "                                         (those are reached through it too: by pid,\n"
        "                                         in listings, and by the set_default_* ones)\n"
        "  get_server_status [PID]                status, clients, device memory in use\n"
        "  get_client_list PID                    pids of the connected clients\n"
        "  get_device_client_list [PID]           <UUID> <client pid> per device and client\n"
        "  ps [-p PID]                            PID ID SERVER DEVICE NAMESPACE COMMAND\n"
        "  get_client_info [CLIENT_PID]           memory, limits, SMs, streams, launches, copies,\n"
        "                                         requests served, replies from the GPU\n"
        "  terminate_client PID CLIENT_PID        fail the client's calls, free what it holds\n"
        "  quit [-t SECONDS]                      stop the server, and its GPUs' own servers\n"
        "                                         (-t: let clients finish first)\n"
        "  start_server -uid UID                  the server for user UID: this one if it is\n"
        "                                         that user's; root's idle one hands over to it\n"
        "  shutdown_server PID [-f]               refuse new clients until the connected ones\n"
        "                                         leave (-f: end their work now), then serve\n"
        "  set_default_active_thread_percentage PCT | get_default_active_thread_percentage\n"
        "  set_active_thread_percentage PID PCT   | get_active_thread_percentage PID\n"
        "  set_default_device_pinned_mem_limit DEV SIZE | get_default_device_pinned_mem_limit DEV\n"
        "  set_device_pinned_mem_limit PID DEV SIZE | get_device_pinned_mem_limit PID DEV\n"
        "  set_default_client_priority 0|1        | get_default_client_priority\n"
        "Settings apply to clients that connect afterwards. DEV: ordinal or UUID;\n"
        "SIZE: 900M, 10G, bytes, 0 for none. quit returns once the server has exited.\n"
        "Exit status: 0; 1 if the server cannot be started or reached, or, when stdin is\n"
        "not a terminal, if any command failed (every line is still sent); 2 usage.\n"
        "Run as nvidia-cuda-mps-control (make install-mps-compat), or with\n"
        "MPSSHIM_MPS_DEFAULTS=1, the default directories are MPS's: /tmp/nvidia-mps and\n"
        "/var/log/nvidia-mps (docs/mps-compat.md).\n");
}

/* Something the server said before it was asked: it closed this connection (idle too long,
 * or to make room for another), and that was its reason. */
static int closed_meanwhile(int s)
{
    struct pollfd pf = {.fd = s, .events = POLLIN};
    return poll(&pf, 1, 0) > 0;
}

/* ------------------------------------------- start_server -uid for another user (root) */

/* What a stopped server leaves in its pipe directory (its sockets, lock and pid file, the
 * shim's autostart lock), and the default log directory's name there. */
static const char *const leftovers[] = {CHAN_SOCKET_NAME, CHAN_CONTROL_NAME, "server.lock",
                                        "server.pid", "autostart.lock"};

/* A stopped server's file in its pipe directory (or the log directory there). */
static int is_leftover(const char *name)
{
    int known = !strcmp(name, "log");
    for (size_t i = 0; i < sizeof(leftovers) / sizeof(leftovers[0]); i++)
        known |= !strcmp(name, leftovers[i]);
    return known;
}

/* A server's file in its log directory: its two logs, its traces (trace.c). */
static int is_log(const char *name)
{
    return !strcmp(name, "control.log") || !strcmp(name, "server.log") ||
           !strncmp(name, "trace-", 6);
}

/* 1 when every name in the directory open as dfd is one that known() accepts: a
 * directory that mpsshim made and may hand on or take back. */
static int only_names(int dfd, int (*known)(const char *))
{
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return 0;
    }
    int ours = 1;
    struct dirent *e;
    while (ours && (e = readdir(d)))
        ours = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || known(e->d_name);
    closedir(d);
    return ours;
}

/* Gives the pipe directory path (never a link; a stopped server's, holding only what it
 * left, which is removed) to uid:gid, private to it. 0, or -1 with the reason in why. */
static int give_pipe_dir(const char *path, uid_t uid, gid_t gid, char *why, size_t len)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = -1;
    if (fd < 0)
        snprintf(why, len, "%s: %s", path, strerror(errno));
    else if (!only_names(fd, is_leftover))
        snprintf(why, len, "%s holds files that are not mpsshim's: not handing it on", path);
    else {
        for (size_t i = 0; i < sizeof(leftovers) / sizeof(leftovers[0]); i++)
            unlinkat(fd, leftovers[i], 0);
        rc = fchown(fd, uid, gid) == 0 && fchmod(fd, 0700) == 0 ? 0 : -1;
        if (rc) snprintf(why, len, "%s: %s", path, strerror(errno));
    }
    if (fd >= 0) close(fd);
    return rc;
}

/* The log directory of a server about to run as uid:gid: its control.log and server.log
 * become the user's, and so does the directory itself when it is private (made for these
 * logs: mpsshim makes it 0700) and root's or holding only a server's files, rather than
 * shared (/var/log, say: the user's server then cannot write its traces there, and says so
 * when asked for one) or some user's own. 0, or -1 (why). */
static int give_log_dir(const char *path, uid_t uid, gid_t gid, char *why, size_t len)
{
    static const char *const logs[] = {"control.log", "server.log"};
    struct stat st;
    chan_make_dirs(path);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, len, "the log directory %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    int rc = 0;
    /* Private, and root's or holding only what a server wrote (an earlier job's user's). */
    int mine = !(st.st_mode & 077) && (st.st_uid == 0 || only_names(fd, is_log));
    if (mine && fchown(fd, uid, gid) != 0) rc = -1;
    for (size_t i = 0; rc == 0 && i < sizeof(logs) / sizeof(logs[0]); i++) {
        int f = openat(fd, logs[i],
                       O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
        if (f < 0 || fchown(f, uid, gid) != 0) rc = -1;
        if (f >= 0) close(f);
    }
    if (rc) snprintf(why, len, "the log directory %s: %s", path, strerror(errno));
    close(fd);
    return rc;
}

/* -d by root: a pipe directory that an earlier start_server -uid gave to a user, whose
 * server has gone (nothing answered), is taken back when it holds only what that server
 * left; any other directory of another user is refused by the server, as before. */
static void take_back_pipe_dir(void)
{
    struct stat st;
    char why[512];
    const char *dir = chan_pipe_dir();
    if (geteuid() != 0 || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid == 0) return;
    if (give_pipe_dir(dir, 0, 0, why, sizeof(why)) == 0)
        fprintf(stderr, "Took back %s from user %u (its server has gone)\n", dir,
                (unsigned)st.st_uid);
}

/* `start_server -uid UID` for a user other than the server's, sent by root to a server of
 * root's: handled here (hand_over). 1 if line is one (*uid set). */
static int start_for_other(const char *line, uid_t server_uid, uid_t *uid)
{
    char word[32], extra;
    if (geteuid() != 0 || server_uid != 0 ||
        sscanf(line, " start_server -uid %31s %c", word, &extra) != 1 ||
        strspn(word, "0123456789") != strlen(word) || strlen(word) > 9)
        return 0;
    *uid = (uid_t)strtoul(word, NULL, 10);
    return *uid != 0;
}

/* Starts the daemon (the server) as user uid, with that user's groups. 0 or -1 (why). */
static int start_as(uid_t uid, gid_t gid, const char *name, char *why, size_t len)
{
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, len, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        if (initgroups(name, gid) != 0 || setresgid(gid, gid, gid) != 0 ||
            setresuid(uid, uid, uid) != 0) {
            fprintf(stderr, "Cannot become user %u: %s\n", (unsigned)uid, strerror(errno));
            _exit(1);
        }
        _exit(daemonize());
    }
    int st;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    snprintf(why, len, "its server did not start (said above)");
    return -1;
}

/* start_server -uid UID, by root, to a server of root's: MPS's daemon would start a
 * server for that user. mpsshim's server is its own daemon and serves its own user only,
 * so an idle root server quits and the user's takes its place in the same pipe directory
 * (given to the user with its logs): the scripts' next commands, and the user's clients,
 * find it there; root's quit stops it. One with clients is refused, as is a pipe
 * directory that is root's own default (the user's clients would look elsewhere).
 * Prints nothing when done (as MPS); 0, 1 if refused, -1 with no server left to talk to.
 * *s, *server and *server_uid: the connection and server from then on. */
static int hand_over(int *s, pid_t *server, uid_t *server_uid, uid_t uid)
{
    char why[600], ask[64];
    const char *dir = chan_pipe_dir();
    struct passwd *pw = getpwuid(uid);
    if (!getenv("MPSSHIM_PIPE_DIRECTORY") && !getenv("CUDA_MPS_PIPE_DIRECTORY") &&
        !chan_mps_defaults()) {
        printf("Cannot start a server for user %u: %s is root's own pipe directory, where "
               "that user's clients do not look; set CUDA_MPS_PIPE_DIRECTORY for both, or "
               "MPSSHIM_MPS_DEFAULTS=1\n",
               (unsigned)uid, dir);
        return 1;
    }
    if (!pw) {
        printf("Cannot start a server for user %u: no such user\n", (unsigned)uid);
        return 1;
    }
    /* The root server's clients: any, and it stays. */
    char *clients = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&clients, &n);
    snprintf(ask, sizeof(ask), "get_client_list %d", (int)*server);
    int r = mem ? mctl_run(*s, ask, mem) : -1;
    if (mem) fclose(mem);
    int busy = r != 0 || n > 0;
    free(clients);
    if (busy) {
        printf("Cannot start a server for user %u: the server (pid %d, user 0) %s; mpsshim "
               "runs one server per pipe directory, for its own user only\n",
               (unsigned)uid, (int)*server, r != 0 ? "did not answer" : "has clients");
        return 1;
    }
    /* Stop root's server, then start the user's in its place. */
    FILE *null = fopen("/dev/null", "w");
    r = null ? mctl_run(*s, "quit", null) : -1;
    if (null) fclose(null);
    if (r != 0) {
        printf("Cannot start a server for user %u: the server did not quit\n", (unsigned)uid);
        return 1;
    }
    mctl_wait_exit(*s, *server);
    close(*s);
    *s = -1;
    char logbuf[256];
    if (give_pipe_dir(dir, uid, pw->pw_gid, why, sizeof(why)) != 0 ||
        give_log_dir(chan_log_dir(logbuf, sizeof(logbuf)), uid, pw->pw_gid, why, sizeof(why)) !=
            0 ||
        start_as(uid, pw->pw_gid, pw->pw_name, why, sizeof(why)) != 0) {
        printf("Cannot start a server for user %u: %s; root's server has quit\n", (unsigned)uid,
               why);
        fflush(stdout);
        return -1;
    }
    if ((*s = mctl_connect()) < 0) {
        fprintf(stderr, "Cannot connect to the server of user %u in %s: %s\n", (unsigned)uid, dir,
                strerror(errno));
        return -1;
    }
    *server = mctl_peer_pid(*s, server_uid);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mps = getenv("MPSSHIM_MPS_DEFAULTS");
    if (mps && *mps && strcmp(mps, "0") != 0 && strcmp(mps, "1") != 0) {
        fprintf(stderr, "MPSSHIM_MPS_DEFAULTS=%s: 1 (MPS's default directories) or 0\n", mps);
        return 2;
    }
    /* Under NVIDIA's name, the server it starts is named so too, and uses MPS's defaults
     * whatever its name (channel/spawn.h). */
    if (strncmp(program_invocation_short_name, CHAN_MPS_NAME_PREFIX,
                strlen(CHAN_MPS_NAME_PREFIX)) == 0) {
        server_name = "nvidia-cuda-mps-control";
        setenv("MPSSHIM_MPS_DEFAULTS", "1", 0);
    }
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
    int s = mctl_connect();
    if (s < 0) {
        int e = errno;
        if (mctl_gpus_count() > 0) return mctl_gpus_only();
        fprintf(stderr, "Cannot connect to an mpsshim server in %s: %s\n", chan_pipe_dir(),
                strerror(e));
        return 1;
    }
    uid_t server_uid;
    pid_t server = mctl_peer_pid(s, &server_uid);
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
        uid_t uid;
        if (start_for_other(line, server_uid, &uid) &&
            (r = hand_over(&s, &server, &server_uid, uid)) < 0)
            return 1;
        /* A GPU's own server named by its pid takes the command itself (ctlgpus.c). */
        if (r == -2 && mctl_gpus_route(line, &r)) {
            if (r > 0 && !tty) rc = 1;
            continue;
        }
        /* get_client_info CLIENT_PID: held, in case the client is a GPU's server's. */
        char *held = NULL;
        size_t held_len = 0;
        FILE *to = stdout;
        if (r == -2 && mctl_gpus_is_client_info(line) && mctl_gpus_count() > 0 &&
            !(to = open_memstream(&held, &held_len)))
            to = stdout;
        for (int tries = 0; r == -2 && tries < 5; tries++) {
            if (tries || closed_meanwhile(s)) {
                close(s);
                if ((s = mctl_connect()) < 0) {
                    fprintf(stderr, "Cannot connect to an mpsshim server in %s: %s\n",
                            chan_pipe_dir(), strerror(errno));
                    return 1;
                }
                server = mctl_peer_pid(s, &server_uid);
            }
            r = mctl_run(s, line, to);
        }
        if (to != stdout) {
            fclose(to);
            if (r == 1)
                r = mctl_gpus_client_info(line, held, held_len);
            else
                fwrite(held, 1, held_len, stdout);
            free(held);
        }
        if (r < 0) {
            fprintf(stderr, "The server closed the connection\n");
            rc = 1;
            break;
        }
        if (r > 0 && !tty)
            rc = 1; /* a script learns that a command failed; a person reads the answer */
        if (r == 0 && mctl_is_plain_quit(line))
            mctl_wait_exit(s, server); /* quit -t returns once it is answered, as before */
        /* What the GPUs' own servers take too (ctlgpus.c): quit stops them as well. */
        mctl_gpus_after(line, &r);
        if (r > 0 && !tty) rc = 1;
        if (r == 0 && mctl_is_quit(line)) break;
    }
    close(s);
    return rc;
}
