/* Feishu/Lark settings: channels.feishu in config.yaml, then the runtime
 * config saved through the API, whose values win. */
#include "channels/feishu_internal.h"

#include <string.h>

/* Longest setting value: ids and secrets are tens of characters; a URL a
 * few hundred. */
#define FEISHU_SETTING_MAX 512

static const char *const string_keys[] = {"app_id",      "app_secret", "verification_token",
                                          "encrypt_key", "api_base",   NULL};

static int setting_fail(const char *key, const char *what) {
    return fawn_err(FAWN_ECONFIG, "channels.feishu.%s: %s", key, what);
}

/* The string field of s that key names. */
static char **string_field(feishu_settings *s, const char *key) {
    char **fields[] = {&s->app_id, &s->app_secret, &s->verification_token, &s->encrypt_key,
                       &s->api_base};
    for (size_t i = 0; string_keys[i]; i++)
        if (!strcmp(string_keys[i], key))
            return fields[i];
    return NULL;
}

static int string_set(feishu_settings *s, const char *key, const json_t *v) {
    const char *text = json_string_value(v);
    if (!text)
        return setting_fail(key, "must be a string");
    size_t n = strnlen(text, FEISHU_SETTING_MAX + 1);
    if (n > FEISHU_SETTING_MAX)
        return setting_fail(key, "is too long");
    char **field = string_field(s, key);
    free(*field);
    /* An empty value clears the setting (a runtime config removing a key). */
    *field = n ? strdup(text) : NULL;
    if (n && !*field)
        return fawn_err(FAWN_ENOMEM, "out of memory reading channels.feishu");
    return 0;
}

static bool *flag_field(feishu_settings *s, bool *enabled, const char *key) {
    return !strcmp(key, "enabled")          ? enabled
           : !strcmp(key, "stream_cards")   ? &s->stream_cards
           : !strcmp(key, "allow_insecure") ? &s->allow_insecure
                                            : NULL;
}

/* One source's keys; the true/false ones only from the config file. */
static int source_read(feishu_settings *s, bool *enabled, const json_t *obj, bool file) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int r = 0;
        if (string_field(s, key))
            r = string_set(s, key, v);
        else if (file && flag_field(s, enabled, key)) {
            if (!json_is_boolean(v))
                return setting_fail(key, "must be true or false");
            *flag_field(s, enabled, key) = json_is_true(v);
        } else
            return setting_fail(key, "unknown key");
        if (r < 0)
            return r;
    }
    return 0;
}

static int settings_check(feishu_settings *s) {
    if (!s->app_id || !s->app_secret)
        return fawn_err(FAWN_ENOENT, "channels.feishu: no app_id and app_secret");
    if (!s->verification_token)
        return setting_fail("verification_token", "is required with app credentials");
    if (!feishu_id_valid(s->app_id))
        return setting_fail("app_id", "is not a valid app id");
    if (!s->api_base && !(s->api_base = strdup(FEISHU_DEFAULT_API_BASE)))
        return fawn_err(FAWN_ENOMEM, "out of memory reading channels.feishu");
    /* The app secret and every token travel to api_base: plain http only
     * where the configuration says so (a test's loopback platform). */
    bool https = strncmp(s->api_base, "https://", 8) == 0;
    if (!https && !(s->allow_insecure && strncmp(s->api_base, "http://", 7) == 0))
        return setting_fail("api_base", s->allow_insecure ? "must be an http:// or https:// URL"
                                                          : "must be an https:// URL (http:// "
                                                            "only with allow_insecure: true)");
    return 0;
}

int feishu_settings_read(feishu_settings *out, const json_t *section, const json_t *runtime) {
    memset(out, 0, sizeof *out);
    out->stream_cards = true;
    bool enabled = true;
    if (section && !json_is_object(section))
        return fawn_err(FAWN_ECONFIG, "channels.feishu: must be a mapping");
    if (runtime && !json_is_object(runtime))
        return fawn_err(FAWN_ECONFIG, "channels.feishu: runtime config must be an object");
    int r = section ? source_read(out, &enabled, section, true) : 0;
    if (r == 0 && runtime)
        r = source_read(out, &enabled, runtime, false);
    if (r == 0 && !enabled)
        r = fawn_err(FAWN_ENOENT, "channels.feishu: disabled");
    if (r == 0)
        r = settings_check(out);
    if (r < 0)
        feishu_settings_free(out);
    return r;
}

void feishu_settings_free(feishu_settings *s) {
    free(s->app_id);
    free(s->app_secret);
    free(s->verification_token);
    free(s->encrypt_key);
    free(s->api_base);
    memset(s, 0, sizeof *s);
}
