/* answer.c: a control command's answer, text that grows as it is written, up to a ceiling. */
#ifndef MPSSHIM_SERVER_ANSWER_H
#define MPSSHIM_SERVER_ANSWER_H

#include <stdarg.h>
#include <stddef.h>

struct srv_answer {
    char *buf;    /* NUL-terminated */
    size_t n;     /* bytes written (the NUL not counted) */
    size_t cap;   /* bytes allocated */
    size_t first; /* what is allocated between commands */
    size_t max;   /* the most ever allocated: buf holds max - 1 bytes of text at most */
    int cut;      /* something did not fit under max (or memory ran out) */
    int fd;       /* a descriptor sent with the answer's end (ipc_peer_export), else -1 */
    int server;   /* the peer runs this server's program (a sibling server, not a client) */
};

/* An empty answer of `first` bytes, growing to `max` at most (first <= max). 0, or -1. */
int srv_answer_init(struct srv_answer *a, size_t first, size_t max);
/* Appends the text, growing buf as needed; what does not fit under max (or in the memory
 * there is) is cut, and a->cut says so. */
void srv_answer_vsay(struct srv_answer *a, const char *fmt, va_list ap);
/* Room to write into in place at buf + n: at least want bytes where max (and memory)
 * allows. How many bytes there are. */
size_t srv_answer_room(struct srv_answer *a, size_t want);
/* Empty again, back to `first` bytes if it grew (a long answer holds no memory after it);
 * a descriptor not sent is closed. */
void srv_answer_reset(struct srv_answer *a);
void srv_answer_free(struct srv_answer *a);
/* The ceiling for answers that list clients: base, and per_client for each of `clients`
 * (saturated, never wrapped). */
size_t srv_answer_ceiling(size_t base, size_t clients, size_t per_client);

#endif
