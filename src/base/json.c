#include "json.h"

#include <string.h>

int fjson_parse_object(json_t **out, const char *data, size_t len) {
    *out = NULL;
    json_error_t jerr;
    json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        return fawn_err(FAWN_EINVAL, "invalid JSON at line %d column %d: %s", jerr.line,
                        jerr.column, jerr.text);
    if (!json_is_object(v)) {
        json_decref(v);
        return fawn_err(FAWN_EINVAL, "request body must be a JSON object");
    }
    *out = v;
    return 0;
}

static int missing(const char *key) { return fawn_err(FAWN_EINVAL, "'%s' is required", key); }

int fjson_get_string(const char **out, const json_t *obj, const char *key, bool required) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return required ? missing(key) : 0;
    if (!json_is_string(v))
        return fawn_err(FAWN_EINVAL, "'%s' must be a string", key);
    const char *s = json_string_value(v);
    if (strlen(s) != json_string_length(v))
        return fawn_err(FAWN_EINVAL, "'%s' must not contain NUL bytes", key);
    *out = s;
    return 0;
}

int fjson_get_int(int64_t *out, const json_t *obj, const char *key, bool required, int64_t min,
                  int64_t max) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return required ? missing(key) : 0;
    if (!json_is_integer(v))
        return fawn_err(FAWN_EINVAL, "'%s' must be an integer", key);
    int64_t n = json_integer_value(v);
    if (n < min || n > max)
        return fawn_err(FAWN_EINVAL, "'%s' must be between %lld and %lld", key, (long long)min,
                        (long long)max);
    *out = n;
    return 0;
}

int fjson_get_bool(bool *out, const json_t *obj, const char *key, bool required) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return required ? missing(key) : 0;
    if (!json_is_boolean(v))
        return fawn_err(FAWN_EINVAL, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

int fjson_check_keys(const json_t *obj, const char *const *allowed) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        (void)v;
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++)
            known = strcmp(*a, key) == 0;
        if (!known)
            return fawn_err(FAWN_EINVAL, "unknown field '%.64s'", key);
    }
    return 0;
}

char *fjson_dump(const json_t *v) { return json_dumps(v, JSON_COMPACT); }

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t extra;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0)
        extra = 1, min = 0x80, c &= 0x1F;
    else if ((c & 0xF0) == 0xE0)
        extra = 2, min = 0x800, c &= 0x0F;
    else if ((c & 0xF8) == 0xF0)
        extra = 3, min = 0x10000, c &= 0x07;
    else
        return 0;
    if (n <= extra)
        return 0;
    for (size_t k = 1; k <= extra; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[k] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    return extra + 1;
}

bool fawn_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len(s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

int fawn_utf8_sanitize(fbuf *out, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t run = 0; /* start of the pending valid run */
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len(s + i, n - i);
        if (k > 0 && s[i] != 0) {
            i += k;
            continue;
        }
        int r = fbuf_append(out, str + run, i - run);
        if (r == 0)
            r = fbuf_append(out, "\xEF\xBF\xBD", 3);
        if (r < 0)
            return r;
        run = ++i;
    }
    return fbuf_append(out, str + run, n - run);
}

size_t fawn_utf8_char_start(const char *s, size_t i) {
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}
