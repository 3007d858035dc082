/* Bytes as lowercase hex digits and back (hex.h). */
#include "server/core/hex.h"

static int digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

void srv_hex_put(char *out, const uint8_t *bytes, size_t n)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[bytes[i] >> 4];
        out[2 * i + 1] = d[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

int srv_hex_get(const char *s, uint8_t *out, size_t n, const char **end)
{
    for (size_t i = 0; i < n; i++) {
        int hi = digit(s[2 * i]), lo = hi < 0 ? -1 : digit(s[2 * i + 1]);
        if (lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    *end = s + 2 * n;
    return 0;
}
