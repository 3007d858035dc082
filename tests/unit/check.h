/* The unit tests' check: a condition that does not hold is printed with its place and
 * counted in `failures`, which the test's main reports. One translation unit per test. */
#ifndef MPSSHIM_TESTS_UNIT_CHECK_H
#define MPSSHIM_TESTS_UNIT_CHECK_H

#include <stdio.h>

static int failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif
