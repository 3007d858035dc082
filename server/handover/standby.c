/* The standby's side of a hand-over (handover.c is the faulted server's): a server process
 * started in advance, which waits until its server hands over, then takes the sockets, the
 * lock and the life pipe and serves new clients on fresh contexts. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/handover/handover.h"
#include "server/limits/policy.h"

#include "channel/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static int sb_fd = -1;       /* its end of the socket pair */
static uint64_t sb_ready_ns; /* when it was ready to take over */
/* The server it replaced: its pid, and the fault it handed over for. */
static pid_t pred_pid;
static int fault_dev;
static CUresult fault_err;
static uint64_t fault_seen_ns;

/* ---------------------------------------------------------------- the standby */

int srv_standby_adopt(char *why, size_t len)
{
    const char *s = getenv(SRV_STANDBY_ENV);
    if (!s) return 0;
    unsigned long long v[2];
    if (srv_parse_nums(&s, v, 2) != 0 || *s || v[0] != 1 || !v[1] || v[1] > INT_MAX) {
        snprintf(why, len, "malformed %s", SRV_STANDBY_ENV);
        return -1;
    }
    unsetenv(SRV_STANDBY_ENV);
    /* Dies with the thread that started it; if that is already gone, nothing to wait for. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != (pid_t)v[1]) return 2;
    int type = 0;
    socklen_t sl = sizeof(type);
    if (getsockopt(CHAN_READY_FD, SOL_SOCKET, SO_TYPE, &type, &sl) != 0 || type != SOCK_SEQPACKET) {
        snprintf(why, len, "descriptor %d is not the standby's socket", CHAN_READY_FD);
        return -1;
    }
    sb_fd = CHAN_READY_FD;
    fcntl(sb_fd, F_SETFD, FD_CLOEXEC);
    prctl(PR_SET_NAME, "mpsshim-standby");
    return 1;
}

int srv_standby_wait(unsigned ready_ms, int *listen_fd, int *control_fd, int *lock_fd, char *why,
                     size_t len)
{
    char word[32];
    snprintf(word, sizeof(word), "standby %u\n", ready_ms);
    if (write(sb_fd, word, strlen(word)) < 0) return 2; /* its server is gone */
    sb_ready_ns = chan_now_ns();
    char msg[1024];
    int fds[SRV_HO_NFDS];
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } u;
    struct iovec io = {.iov_base = msg, .iov_len = sizeof(msg) - 1};
    struct msghdr mh = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t r;
    while ((r = recvmsg(sb_fd, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (r <= 0) return 2; /* its server quit, started afresh or replaced it: not needed */
    /* Told: from now on it lives on after the server that started it. */
    prctl(PR_SET_PDEATHSIG, 0);
    prctl(PR_SET_NAME, "mpsshim-server");
    msg[r] = '\0';
    int nfd = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        nfd = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        memcpy(fds, CMSG_DATA(cm), (size_t)(nfd < SRV_HO_NFDS ? nfd : SRV_HO_NFDS) * sizeof(int));
    }
    if (nfd != SRV_HO_NFDS || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
        snprintf(why, len, "the hand-over came without its %d descriptors", SRV_HO_NFDS);
        return -1;
    }
    const char *s = msg;
    unsigned long long v[5];
    if (srv_parse_nums(&s, v, 5) != 0 || v[0] != 1 || !v[1] || v[1] > INT_MAX ||
        v[2] >= CHAN_MAX_DEVICES || srv_handover_decode_list(&s) != 0) {
        snprintf(why, len, "malformed hand-over");
        return -1;
    }
    pred_pid = (pid_t)v[1];
    fault_dev = (int)v[2];
    fault_err = (CUresult)v[3];
    fault_seen_ns = v[4];
    /* srv_policy_init ran before: what the predecessor's users set wins. */
    if (srv_policy_decode(s) != 0) {
        snprintf(why, len, "malformed hand-over settings");
        return -1;
    }
    if (srv_handover_check_fds(fds[SRV_HO_LISTEN], fds[SRV_HO_CONTROL], fds[SRV_HO_LOCK], why,
                               len) != 0 ||
        srv_handover_check_life(fds[SRV_HO_LIFE_R], fds[SRV_HO_LIFE_W], why, len) != 0)
        return -1;
    srv_ho.life_r = fds[SRV_HO_LIFE_R];
    srv_ho.life_w = fds[SRV_HO_LIFE_W];
    *listen_fd = fds[SRV_HO_LISTEN];
    *control_fd = fds[SRV_HO_CONTROL];
    *lock_fd = fds[SRV_HO_LOCK];
    /* "ready", or why it failed, goes back on the same socket (tell_starter in main). */
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", sb_fd);
    setenv("MPSSHIM_READY_FD", fd, 1);
    return 1;
}

/* What a server hands on to the one that carries on from it and nothing else: two listening
 * sockets and the locked file. Each is made close-on-exec again. */
int srv_handover_check_fds(int listen_fd, int control_fd, int lock_fd, char *why, size_t len)
{
    int fds[3] = {listen_fd, control_fd, lock_fd};
    for (int i = 0; i < 3; i++)
        if (fds[i] < 3 || fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0) {
            snprintf(why, len, "descriptor %d not inherited: %s", fds[i],
                     fds[i] < 3 ? "a standard stream" : strerror(errno));
            return -1;
        }
    for (int i = 0; i < 2; i++) {
        int on = 0;
        socklen_t sl = sizeof(on);
        if (getsockopt(fds[i], SOL_SOCKET, SO_ACCEPTCONN, &on, &sl) != 0 || !on) {
            snprintf(why, len, "descriptor %d is not a listening socket", fds[i]);
            return -1;
        }
    }
    struct stat st, named;
    char path[600];
    snprintf(path, sizeof(path), "%s/server.lock", srv.pipe_dir);
    if (fstat(lock_fd, &st) != 0 || !S_ISREG(st.st_mode) || lstat(path, &named) != 0 ||
        st.st_dev != named.st_dev || st.st_ino != named.st_ino) {
        snprintf(why, len, "descriptor %d is not %s", lock_fd, path);
        return -1;
    }
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(why, len, "the server lock was not inherited: %s", strerror(errno));
        return -1;
    }
    return 0;
}

void srv_handover_adopted(int contexts_made)
{
    uint64_t now = chan_now_ns();
    char how[200];
    if (sb_ready_ns && sb_ready_ns < fault_seen_ns)
        snprintf(how, sizeof(how), "a standby since %.1f s before the fault (MPSSHIM_STANDBY=%s)",
                 (double)(fault_seen_ns - sb_ready_ns) / 1e9, srv_standby_mode_name());
    else
        snprintf(how, sizeof(how), "started at the fault or just before, not waiting yet");
    /* Where contexts are made at first use (devctx.c) none was made yet: the time said is
     * the time it serves again, never as a context's. */
    srv_log("Device %d: %s %.0f ms after the fault was seen (%s in server %d), in this new "
            "server, %s; serving. Server %d keeps its clients for now",
            fault_dev,
            contexts_made ? "shared context made again"
                          : "serving again, its shared context to be made at first use,",
            (double)(now - fault_seen_ns) / 1e6, srv_errname(fault_err), (int)pred_pid, how,
            (int)pred_pid);
    /* More faulted servers alive than a service keeps: the oldest end their clients now. */
    pthread_mutex_lock(&srv_ho.lock);
    srv_handover_prune();
    for (int i = 0; i + SRV_FAULTED_MAX < srv_ho.nfaulted; i++) {
        srv_log("Faulted server %d ends its clients now: %d faulted servers are alive, at "
                "most %d are kept",
                (int)srv_ho.faulted[i], srv_ho.nfaulted, SRV_FAULTED_MAX);
        kill(srv_ho.faulted[i], SIGUSR1);
    }
    pthread_mutex_unlock(&srv_ho.lock);
}
