/* broker.* read and checked, and the allow-list every call passes. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"

/* Longest allow rule and environment value the section may hold. */
#define BROKER_RULE_TEXT_MAX 512
#define BROKER_ENV_VALUE_MAX 4096

static bool cli_name_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64 || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-' || s[i] == '.'))
            return false;
    return true;
}

static bool env_name_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return false;
    return true;
}

/* A credential file's name: one path component, no dot file. */
static bool file_name_valid(const char *s) { return cli_name_valid(s); }

static bool printable(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

/* A number given as a YAML scalar (a string of digits) or a JSON integer. */
static int get_number(uint32_t *out, const json_t *o, const char *key, const char *where,
                      uint32_t dflt, uint32_t min, uint32_t max) {
    const json_t *v = json_object_get(o, key);
    *out = dflt;
    if (!v)
        return 0;
    long long n = -1;
    if (json_is_integer(v))
        n = json_integer_value(v);
    else if (json_is_string(v) && strlen(json_string_value(v)) <= 9 &&
             strspn(json_string_value(v), "0123456789") == strlen(json_string_value(v)) &&
             json_string_length(v) > 0)
        n = strtoll(json_string_value(v), NULL, 10);
    if (n < min || n > max)
        return fawn_err(FAWN_ECONFIG, "%s.%s must be a number from %u to %u", where, key, min, max);
    *out = (uint32_t)n;
    return 0;
}

static int strdup_to(char **out, const char *s) {
    *out = strdup(s);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int parse_rule(broker_rule *rule, const json_t *v, const char *where) {
    const char *text = json_string_value(v);
    if (!text || !*text || strlen(text) > BROKER_RULE_TEXT_MAX || !printable(text))
        return fawn_err(FAWN_ECONFIG, "%s.allow entries must be non-empty words", where);
    _cleanup_free_ char *copy = strdup(text);
    if (!copy)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    char *save = NULL;
    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        if (rule->n_words == BROKER_RULE_WORDS_MAX)
            return fawn_err(FAWN_ECONFIG, "%s.allow: at most %d words per entry", where,
                            BROKER_RULE_WORDS_MAX);
        int r = strdup_to(&rule->words[rule->n_words], w);
        if (r < 0)
            return r;
        rule->n_words++;
    }
    if (rule->n_words == 0)
        return fawn_err(FAWN_ECONFIG, "%s.allow entries must be non-empty words", where);
    fbuf joined = {0};
    for (size_t i = 0; i < rule->n_words; i++)
        if (fbuf_printf(&joined, "%s%s", i ? " " : "", rule->words[i]) < 0) {
            fbuf_free(&joined);
            return fawn_err(FAWN_ENOMEM, "out of memory");
        }
    rule->text = fbuf_steal(&joined);
    return 0;
}

static int parse_env_entry(broker_env *e, const char *name, const json_t *v, const char *where) {
    const char *text = json_string_value(v);
    if (!env_name_valid(name) || !text || strlen(text) > BROKER_ENV_VALUE_MAX || !printable(text))
        return fawn_err(FAWN_ECONFIG, "%s.env.%s: a variable name and a string value", where, name);
    int r = strdup_to(&e->name, name);
    if (r < 0)
        return r;
    if (strcmp(text, "dir") == 0) {
        e->kind = BROKER_ENV_DIR;
        return 0;
    }
    if (strncmp(text, "value:", 6) == 0) {
        e->kind = BROKER_ENV_VALUE;
        return strdup_to(&e->value, text + 6);
    }
    if (strncmp(text, "file:", 5) == 0 && file_name_valid(text + 5)) {
        e->kind = BROKER_ENV_FILE;
        return strdup_to(&e->value, text + 5);
    }
    return fawn_err(FAWN_ECONFIG,
                    "%s.env.%s must be \"dir\", \"value:<text>\" or \"file:<name>\" (a file of "
                    "the user's credential directory)",
                    where, name);
}

static int parse_env(broker_cli *cli, const json_t *env, const char *where) {
    if (!env)
        return 0;
    if (!json_is_object(env) || json_object_size(env) > BROKER_ENV_MAX)
        return fawn_err(FAWN_ECONFIG, "%s.env must be a map of at most %d entries", where,
                        BROKER_ENV_MAX);
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)env, name, v) {
        int r = parse_env_entry(&cli->env[cli->n_env], name, v, where);
        cli->n_env++; /* freed with the rest, also half made */
        if (r < 0)
            return r;
    }
    return 0;
}

static int parse_allow(broker_cli *cli, const json_t *allow, const char *where) {
    if (!json_is_array(allow) || json_array_size(allow) == 0 ||
        json_array_size(allow) > BROKER_RULES_MAX)
        return fawn_err(FAWN_ECONFIG,
                        "%s.allow must list 1 to %d allowed subcommands (argument prefixes)", where,
                        BROKER_RULES_MAX);
    size_t i;
    const json_t *v;
    json_array_foreach(allow, i, v) {
        int r = parse_rule(&cli->rules[i], v, where);
        cli->n_rules = i + 1;
        if (r < 0)
            return r;
    }
    return 0;
}

static int parse_cli(broker_config *c, broker_cli *cli, const json_t *o, size_t index) {
    char where[48];
    snprintf(where, sizeof where, "broker.clis[%zu]", index);
    const char *name = json_string_value(json_object_get(o, "name"));
    const char *binary = json_string_value(json_object_get(o, "binary"));
    if (!json_is_object(o) || !name || !cli_name_valid(name))
        return fawn_err(FAWN_ECONFIG, "%s.name must be a command name ([A-Za-z0-9._-], 1-64)",
                        where);
    if (broker_config_find(c, name))
        return fawn_err(FAWN_ECONFIG, "%s.name: %s is listed twice", where, name);
    if (!binary || binary[0] != '/' || strlen(binary) >= PATH_MAX || !printable(binary) ||
        strstr(binary, "/../") || strstr(binary, "/./"))
        return fawn_err(FAWN_ECONFIG, "%s.binary must be an absolute host path", where);
    int r = strdup_to(&cli->name, name);
    if (r == 0)
        r = strdup_to(&cli->binary, binary);
    if (r == 0)
        r = parse_allow(cli, json_object_get(o, "allow"), where);
    if (r == 0)
        r = parse_env(cli, json_object_get(o, "env"), where);
    if (r == 0)
        r = get_number(&cli->timeout_s, o, "timeout_s", where, BROKER_TIMEOUT_S_DEFAULT, 1,
                       BROKER_TIMEOUT_S_MAX);
    return r;
}

static int parse_section(broker_config *out, const json_t *section) {
    if (!json_is_object(section))
        return fawn_err(FAWN_ECONFIG, "broker must be a map");
    int r = get_number(&out->max_concurrent, section, "max_concurrent", "broker",
                       BROKER_CONCURRENT_DEFAULT, 1, BROKER_CONCURRENT_MAX);
    if (r == 0)
        r = get_number(&out->max_concurrent_per_sandbox, section, "max_concurrent_per_sandbox",
                       "broker", BROKER_CONCURRENT_PER_SANDBOX_DEFAULT, 1, BROKER_CONCURRENT_MAX);
    const json_t *listen = json_object_get(section, "listen");
    if (r == 0 && listen && !json_is_string(listen))
        r = fawn_err(FAWN_ECONFIG, "broker.listen must be IP:PORT");
    if (r == 0 && listen && !(out->listen = strdup(json_string_value(listen))))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    const json_t *clis = json_object_get(section, "clis");
    if (r == 0 && clis && (!json_is_array(clis) || json_array_size(clis) > BROKER_CLIS_MAX))
        r = fawn_err(FAWN_ECONFIG, "broker.clis must be a list of at most %d CLIs",
                     BROKER_CLIS_MAX);
    size_t i;
    const json_t *v;
    json_array_foreach(clis, i, v) {
        if (r < 0)
            break;
        r = parse_cli(out, &out->clis[i], v, i);
        out->n_clis = i + 1;
    }
    return r;
}

int broker_config_parse(broker_config *out, const json_t *section) {
    memset(out, 0, sizeof *out);
    out->max_concurrent = BROKER_CONCURRENT_DEFAULT;
    out->max_concurrent_per_sandbox = BROKER_CONCURRENT_PER_SANDBOX_DEFAULT;
    if (!section || json_is_null(section))
        return 0;
    int r = parse_section(out, section);
    if (r < 0)
        broker_config_free(out);
    return r;
}

static void cli_free(broker_cli *cli) {
    for (size_t i = 0; i < cli->n_rules; i++) {
        for (size_t w = 0; w < cli->rules[i].n_words; w++)
            free(cli->rules[i].words[w]);
        free(cli->rules[i].text);
    }
    for (size_t i = 0; i < cli->n_env; i++) {
        free(cli->env[i].name);
        free(cli->env[i].value);
    }
    free(cli->name);
    free(cli->binary);
}

void broker_config_free(broker_config *c) {
    for (size_t i = 0; i < c->n_clis; i++)
        cli_free(&c->clis[i]);
    free(c->listen);
    memset(c, 0, sizeof *c);
}

const broker_cli *broker_config_find(const broker_config *c, const char *name) {
    for (size_t i = 0; i < c->n_clis; i++)
        if (c->clis[i].name && strcmp(c->clis[i].name, name) == 0)
            return &c->clis[i];
    return NULL;
}

const broker_rule *broker_policy_check(const broker_cli *cli, char *const *argv, size_t argc) {
    for (size_t i = 0; i < cli->n_rules; i++) {
        const broker_rule *rule = &cli->rules[i];
        bool match = argc >= rule->n_words;
        for (size_t w = 0; match && w < rule->n_words; w++)
            match = strcmp(argv[w], rule->words[w]) == 0;
        if (match)
            return rule;
    }
    return NULL;
}
