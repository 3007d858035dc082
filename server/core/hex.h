/* hex.c: bytes as lowercase hex digits and back, for the control socket's words (IPC
 * handles' secrets between sibling servers, the driver's own event handles). */
#ifndef MPSSHIM_SERVER_HEX_H
#define MPSSHIM_SERVER_HEX_H

#include <stddef.h>
#include <stdint.h>

/* n bytes as 2n lowercase hex digits and a NUL: out has room for 2n + 1. */
void srv_hex_put(char *out, const uint8_t *bytes, size_t n);
/* Exactly 2n lowercase hex digits at the start of s into n bytes: 0, else -1 (out then
 * partly written). What follows them is the caller's to check: *end points there. */
int srv_hex_get(const char *s, uint8_t *out, size_t n, const char **end);

#endif
