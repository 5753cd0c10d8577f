/* The web tools, run by the gateway (never with a sandbox's network)
 * through the research service: its address rules, its limits and the
 * caller's rate limit, which both tools share. web_search asks the
 * configured backend and answers its hits as JSON; web_fetch reads a page:
 * HTML becomes readable text, other text types are given as they are,
 * anything else is answered with what it is. Each result carries the
 * evidence its receipt keeps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tools/tools_internal.h"

/* The media types given to the model as text (besides text/... ). */
static const char *const text_types[] = {
    "application/json",     "application/xml",     "application/javascript",
    "application/x-yaml",   "application/yaml",    "application/rss+xml",
    "application/atom+xml", "application/ld+json", "application/x-ndjson",
};

static bool is_html(const char *type) {
    return strcmp(type, "text/html") == 0 || strcmp(type, "application/xhtml+xml") == 0;
}

static bool is_text(const char *type) {
    if (strncmp(type, "text/", 5) == 0)
        return true;
    for (size_t i = 0; i < ARRAY_LEN(text_types); i++)
        if (strcmp(type, text_types[i]) == 0)
            return true;
    return false;
}

/* r for a call the rate limit refused. */
static int tool_web_rate_limited(tool_result *r, int64_t retry_after_ms) {
    int f = tool_fail(r, TOOL_ERROR, "rate_limited", false, "Error: %s; try again in %lld s",
                      fawn_errmsg(), (long long)((retry_after_ms + 999) / 1000));
    r->status.retry_after_ms = retry_after_ms;
    return f;
}

/* r for a fetch that did not get an answer. */
static int fetch_failure(tool_result *r, int code) {
    switch (code) {
    case FAWN_EINVAL:
        return tool_fail(r, TOOL_ERROR, "invalid_arguments", true, "Error: %s", fawn_errmsg());
    case FAWN_EPERM:
        return tool_fail(r, TOOL_ERROR, "blocked", true,
                         "Error: %s (private, loopback, link-local and metadata addresses are "
                         "never fetched)",
                         fawn_errmsg());
    case FAWN_ETIMEDOUT:
        return tool_fail(r, TOOL_TIMEOUT, "timeout", true, "Error: %s", fawn_errmsg());
    case FAWN_ECANCELED:
        return tool_fail(r, TOOL_CANCELLED, "cancelled", false, "Error: cancelled");
    case FAWN_ENOMEM: return code;
    default: return tool_fail(r, TOOL_ERROR, "network", true, "Error: %s", fawn_errmsg());
    }
}

/* The page's readable text (malloc'd) by its type: 0, FAWN_EUNSUP for a
 * type that is not read, or the converter's code. */
static int page_text(char **out, const web_page *page) {
    *out = NULL;
    const char *type = page->content_type;
    if (is_html(type) || (!type[0] && page->len))
        return web_html_text(out, page->body, page->len, page->charset);
    if (!is_text(type))
        return fawn_err(FAWN_EUNSUP, "%s", type[0] ? type : "an empty page");
    size_t n;
    return web_text_utf8(out, &n, page->body, page->len, page->charset);
}

/* What the receipt keeps of a fetch. */
static json_t *fetch_evidence(const char *url, const web_page *page) {
    char sha[65];
    fawn_sha256_hex(sha, page->body ? page->body : "", page->len);
    return json_pack("{s:{s:s, s:s, s:I, s:s, s:s, s:I, s:b, s:i}}", "evidence", "url", url,
                     "final_url", page->final_url ? page->final_url : url, "http_status",
                     (json_int_t)page->status, "content_type", page->content_type, "content_sha256",
                     sha, "bytes", (json_int_t)page->len, "truncated", page->truncated, "redirects",
                     page->redirects);
}

/* The answer from a page that came: its text, or why there is none. */
static int fetch_answer(tool_result *r, const web_page *page) {
    const char *where = page->final_url;
    if (page->status >= 400)
        return tool_fail(r, TOOL_ERROR, "http_status", true, "Error: %s answered HTTP %ld", where,
                         page->status);
    _cleanup_free_ char *text = NULL;
    int c = page_text(&text, page);
    if (c == FAWN_EUNSUP)
        return tool_fail(r, TOOL_ERROR, "unsupported_type", true,
                         "Error: %s is %s (%zu bytes), not a page web_fetch reads: it reads "
                         "HTML and text",
                         where, fawn_errmsg(), page->len);
    if (c < 0)
        return c == FAWN_ENOMEM
                   ? c
                   : tool_fail(r, TOOL_ERROR, "unreadable", true, "Error: %s", fawn_errmsg());
    char *out;
    if (asprintf(&out, "URL: %s\n%s\n%s", where,
                 page->truncated ? "[The page was cut at the size limit.]\n" : "",
                 text[0] ? text : "(the page has no readable text)") < 0)
        out = NULL;
    r->status.truncated = page->truncated;
    return tool_succeed(r, out);
}

static int web_fetch_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *url;
    int r = tool_arg_string(&url, res, args, "url", true);
    if (r != 0)
        return r < 0 ? r : 0;
    int64_t wait_ms;
    if (web_service_admit(&wait_ms, env->web, env->req.who.user) < 0)
        return tool_web_rate_limited(res, wait_ms);
    web_page page;
    web_fetch_limits lim = web_service_fetch_limits(env->web);
    r = web_fetch(&page, url, web_service_allow(env->web), &lim, env->cancel);
    if (r == 0) {
        res->facts = fetch_evidence(url, &page);
        r = res->facts ? fetch_answer(res, &page) : fawn_err(FAWN_ENOMEM, "out of memory");
    } else {
        r = fetch_failure(res, r);
    }
    web_page_clear(&page);
    return r;
}

static bool web_fetch_offered(const web_service *web) { return web_service_fetch_enabled(web); }

/* ---- web_search ---- */

/* The tool's error words by search failure: whether calling again (or
 * differently) can help is the backend's to say. */
static int search_failure(tool_result *r, const web_search_result *res) {
    static const struct {
        const char *word;
        bool recoverable;
    } words[] = {
        [WEB_SEARCH_AUTH] = {"auth", false},
        [WEB_SEARCH_QUOTA] = {"quota", false},
        [WEB_SEARCH_RATE_LIMITED] = {"rate_limited", false},
        [WEB_SEARCH_TRANSIENT] = {"transient", true},
        [WEB_SEARCH_INVALID] = {"invalid_arguments", true},
        [WEB_SEARCH_REFUSED] = {"blocked", false},
        [WEB_SEARCH_BACKEND] = {"backend", false},
    };
    unsigned f = res->failure;
    bool known = f < ARRAY_LEN(words) && words[f].word;
    int c = tool_fail(r, TOOL_ERROR, known ? words[f].word : "backend",
                      known && words[f].recoverable, "Error: the search failed: %s", res->message);
    if (res->failure == WEB_SEARCH_RATE_LIMITED && res->retry_after_ms > 0)
        r->status.retry_after_ms = res->retry_after_ms;
    return c;
}

/* The hits as the model reads them, [{"title","url","snippet"}], and the
 * evidence {"backend", "query", "urls"}. */
static int search_answer(tool_result *r, const web_search_config *cfg, const char *query,
                         const web_search_result *res) {
    json_t *hits = json_array(), *urls = json_array();
    for (size_t i = 0; hits && urls && i < res->n; i++) {
        const web_search_hit *h = &res->hits[i];
        json_array_append_new(hits, json_pack("{s:s, s:s, s:s}", "title", h->title, "url", h->url,
                                              "snippet", h->snippet));
        json_array_append_new(urls, json_string(h->url));
    }
    char *text = hits ? json_dumps(hits, JSON_INDENT(1)) : NULL;
    json_decref(hits);
    r->facts = urls ? json_pack("{s:{s:s, s:s, s:o}}", "evidence", "backend",
                                web_search_backend_name(cfg->backend), "query", query, "urls", urls)
                    : NULL;
    if (!r->facts) {
        free(text);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return tool_succeed(r, text);
}

static int web_search_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *query;
    int64_t max;
    int r;
    if ((r = tool_arg_string(&query, res, args, "query", true)) != 0 ||
        (r = tool_arg_int(&max, res, args, "max_results", 0, 1, WEB_SEARCH_MAX_RESULTS)) != 0)
        return r < 0 ? r : 0;
    int64_t wait_ms;
    if (web_service_admit(&wait_ms, env->web, env->req.who.user) < 0)
        return tool_web_rate_limited(res, wait_ms);
    const web_search_config *cfg = web_service_search(env->web);
    web_search_result found;
    r = web_search(&found, cfg, query, (unsigned)max, web_service_allow(env->web), env->cancel);
    if (r == FAWN_ECANCELED)
        r = tool_fail(res, TOOL_CANCELLED, "cancelled", false, "Error: cancelled");
    else if (r == 0 && found.failure != WEB_SEARCH_OK)
        r = search_failure(res, &found);
    else if (r == 0)
        r = search_answer(res, cfg, query, &found);
    web_search_result_clear(&found);
    return r;
}

static bool web_search_offered(const web_service *web) { return web_service_search(web) != NULL; }

const tool_def tool_web_search = {
    .name = "web_search",
    .remote_content = true,
    .offered = web_search_offered,
    .description = "Search the web. Answers a JSON list of results, each with title, url and "
                   "snippet; read a result's page with web_fetch.",
    .parameters = "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\","
                  "\"description\":\"What to search for.\"},\"max_results\":{\"type\":"
                  "\"integer\",\"minimum\":1,\"maximum\":20,\"description\":\"How many "
                  "results (the configured number when absent).\"}},\"required\":[\"query\"]}",
    .run = web_search_run,
};

/* ---- web_fetch ---- */

const tool_def tool_web_fetch = {
    .name = "web_fetch",
    .remote_content = true,
    .offered = web_fetch_offered,
    .description =
        "Fetch a web page (http or https) and read its main content as Markdown-like text. "
        "Use it on URLs the user gave or a search returned; it does not run scripts. "
        "Private and internal addresses are not reachable.",
    .parameters = "{\"type\":\"object\",\"properties\":{\"url\":{\"type\":\"string\","
                  "\"description\":\"The URL to fetch, with http:// or https://.\"}},"
                  "\"required\":[\"url\"]}",
    .run = web_fetch_run,
};
