/* payload.c: the checks of a protocol operation's payload that its %payload line says. */
#ifndef MPSSHIM_SERVER_PAYLOAD_H
#define MPSSHIM_SERVER_PAYLOAD_H

#include <stdint.h>

/* 1 when the payload p[0, len) of operation op (at least its fixed part, which the dispatch
 * checked) passes what its %payload line says: its members in range, its trailing parts
 * within the record and ending it (unless more follows), its strings NUL-terminated; else 0.
 * p is the server's copy of the record, which the client can no longer write. */
int srv_payload_ok(uint32_t op, const uint8_t *p, uint32_t len);

#endif
