/* A control command's answer (server/control/answer.c): a listing longer than the old fixed
 * 256 KiB, as ps writes for 5000 clients, comes out whole; one past the ceiling is cut and
 * says so; the memory goes back to the first size after it; the ceiling saturates rather
 * than wraps. */
#include "server/control/answer.h"
#include "tests/unit/check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void say(struct srv_answer *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct srv_answer *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    srv_answer_vsay(a, fmt, ap);
    va_end(ap);
}

/* ps's rows for `clients` clients: about 100 bytes each. */
static size_t rows(struct srv_answer *a, unsigned clients)
{
    size_t want = 0;
    char row[160];
    for (unsigned i = 0; i < clients; i++) {
        int n = snprintf(row, sizeof(row), "%u %u 4242 GPU-cb1213a3-d6a4-be7f 4026531836 %s\n",
                         100000 + i, i + 1, "python train.py --epochs 10 --batch 256 --lr 0.1");
        want += (size_t)n;
        say(a, "%s", row);
    }
    return want;
}

int main(void)
{
    struct srv_answer a;
    /* The old buffer's size first, a ceiling as controlsock.c works it out. */
    size_t max = srv_answer_ceiling(256u << 10, 5000, 1024 + 2 * 1024);
    CHECK(srv_answer_init(&a, 256u << 10, max) == 0);
    size_t want = rows(&a, 5000);
    CHECK(want > (256u << 10));
    CHECK(!a.cut && a.n == want && strlen(a.buf) == want);
    CHECK(strncmp(a.buf + want - 4, "0.1\n", 4) == 0);
    CHECK(strstr(a.buf, "\n104999 5000 ") != NULL); /* the last row, whole */

    /* Back to the first size, empty; then past a ceiling: cut there, and said. */
    srv_answer_reset(&a);
    CHECK(a.n == 0 && a.cap == (256u << 10) && a.buf[0] == '\0' && !a.cut);
    srv_answer_free(&a);
    CHECK(srv_answer_init(&a, 64, 4096) == 0);
    rows(&a, 100);
    CHECK(a.cut && a.n == 4095 && strlen(a.buf) == 4095 && a.cap == 4096);
    say(&a, "more\n"); /* nothing more fits */
    CHECK(a.n == 4095 && strlen(a.buf) == 4095);
    CHECK(srv_answer_room(&a, SIZE_MAX) == 1); /* the NUL's byte: no wrap */
    srv_answer_free(&a);

    /* Writing in place (trace): the room asked for, where the ceiling allows. */
    CHECK(srv_answer_init(&a, 16, 1 << 20) == 0);
    CHECK(srv_answer_room(&a, 64u << 10) >= (64u << 10));
    srv_answer_free(&a);

    CHECK(srv_answer_ceiling(256, SIZE_MAX / 2, 3) == SIZE_MAX);
    CHECK(srv_answer_ceiling(SIZE_MAX - 1, 1, 2) == SIZE_MAX);
    CHECK(srv_answer_ceiling(256, 100000, 1024 + 32 * 1024) == 256 + 100000ull * 33 * 1024);
    if (failures) return 1;
    printf("PASS answer_test: %zu bytes of rows whole, cut past the ceiling, ceiling saturated\n",
           want);
    return 0;
}
