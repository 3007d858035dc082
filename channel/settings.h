/* settings.c: every MPSSHIM_* / CUDA_MPS_* setting of both ends, described once
 * (settings.def) and read strictly: a bad value is said, naming the variable as the user set
 * it, and the default used (or, for a client's limits, the client refused). */
#ifndef MPSSHIM_CHANNEL_SETTINGS_H
#define MPSSHIM_CHANNEL_SETTINGS_H

#include <stddef.h>

enum chan_setting_kind {
    CHAN_SET_BOOL,
    CHAN_SET_COUNT,
    CHAN_SET_SECONDS,
    CHAN_SET_US,
    CHAN_SET_MB,
    CHAN_SET_SIZE,
    CHAN_SET_CHOICE,
    CHAN_SET_PATH,
    CHAN_SET_DEVICE_SIZES,
};

enum chan_setting_bad { CHAN_BAD_DEFAULT, CHAN_BAD_REFUSE };

enum chan_setting_id {
#define SETTING(id, ...) CHAN_SET_##id,
#include "channel/settings.def"
#undef SETTING
    CHAN_SET_N
};

struct chan_setting {
    const char *name, *mps; /* mps: NULL where MPS has none */
    const char *side;       /* "server", "client" or "both" */
    enum chan_setting_kind kind;
    unsigned long long lo, hi;
    const char *dflt; /* "(...)": worked out as the program starts */
    const char *choices;
    enum chan_setting_bad on_bad;
    const char *doc;
};

extern const struct chan_setting chan_settings[CHAN_SET_N];

/* Where a bad value is said: the server's log, the shim's log. Until set: stderr. Called
 * with one line, no newline; once per setting and process. */
void chan_settings_reporter(void (*say)(const char *line));

/* A numeric or boolean setting: 1 with *v (sizes in bytes, MiB as given) when set to a good
 * value; 0 when unset or empty, or bad (said). */
int chan_setting_get(enum chan_setting_id id, unsigned long long *v);
/* The setting's value, or its default (which must be a number: not one in parentheses). */
unsigned long long chan_setting_num(enum chan_setting_id id);
/* What chan_setting_num gives for "auto", the value of a boolean whose default is "auto". */
#define CHAN_SETTING_AUTO 2ull
/* A CHAN_SET_CHOICE setting: the index of its value in the choices, else of the default. */
int chan_setting_choice(enum chan_setting_id id);
/* A path or device sizes: the value, NULL when unset or empty. CHAN_BAD_REFUSE settings of
 * any kind: the value as set, *bad 1 when it is bad (said). */
const char *chan_setting_text(enum chan_setting_id id, int *bad);

/* What id is in force and where it came from: "default", "VAR" (the variable as set),
 * "VAR=VALUE refused", or what chan_setting_override named. */
void chan_setting_origin(enum chan_setting_id id, char *value, size_t vlen, char *from,
                         size_t flen);
/* The value in force came from elsewhere (a command-line option, a control command). */
void chan_setting_override(enum chan_setting_id id, const char *value, const char *from);
/* Whether id's default is a value it accepts (or one worked out at start, in parentheses). */
int chan_setting_default_ok(enum chan_setting_id id);
/* Reads every setting of side ("server" or "client"; "both" are read by either) once, so
 * that each bad value is said as the program starts, not when the setting is first used. */
void chan_settings_check(const char *side);
/* What a setting accepts, in words ("a whole number from 1 to 100"). */
void chan_setting_accepts(enum chan_setting_id id, char *out, size_t len);
/* A whole number from lo to hi, digits only: 0 or -1. */
int chan_parse_count(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out);
/* "NN", "NNK", "NNM"... bytes, as strictly as a setting: 0 or -1. */
int chan_parse_size(const char *s, unsigned long long *out);

#endif
