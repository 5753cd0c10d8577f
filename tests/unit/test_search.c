/* research: web search through each backend, against fake backends on
 * loopback written from the services' documented request and reply shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <string.h>

#include "research/research.h"
#include "unit/fake_http.h"

/* An allow-list naming the fake server's port on 127.0.0.1 only. */
static net_allowlist allow_port(uint16_t port) {
    char entry[64];
    snprintf(entry, sizeof entry, "[\"127.0.0.1:%u\"]", port);
    json_t *list = json_loads(entry, 0, NULL);
    net_allowlist al;
    assert_int_equal(net_allowlist_parse(&al, list, "web.allow"), 0);
    json_decref(list);
    return al;
}

static web_search_config config_of(const char *text) {
    json_error_t jerr;
    json_t *obj = json_loads(text, 0, &jerr);
    if (!obj)
        fail_msg("%s: %s", text, jerr.text);
    web_search_config cfg;
    int r = web_search_config_parse(&cfg, obj, "web.search");
    if (r < 0)
        fail_msg("%s: %s", text, fawn_errmsg());
    json_decref(obj);
    return cfg;
}

/* A backend's config pointing at the fake server s (url gets path). */
static web_search_config config_at(const char *backend, const fake_server *s, const char *path,
                                   const char *more) {
    char *text = strf("{\"backend\": \"%s\", \"url\": \"http://127.0.0.1:%u%s\"%s}", backend,
                      s->port, path, more);
    web_search_config cfg = config_of(text);
    free(text);
    return cfg;
}

/* The request the fake server read last. */
static char *last_request(fake_server *s) {
    pthread_mutex_lock(&s->lock);
    char *copy = strdup(s->request);
    pthread_mutex_unlock(&s->lock);
    assert_non_null(copy);
    return copy;
}

/* The request's JSON body. */
static json_t *request_json(const char *request) {
    const char *body = strstr(request, "\r\n\r\n");
    assert_non_null(body);
    json_error_t jerr;
    json_t *doc = json_loads(body + 4, 0, &jerr);
    if (!doc)
        fail_msg("request body: %s (%s)", body + 4, jerr.text);
    return doc;
}

/* Searches query through cfg at the fake server (its port allowed). */
static web_search_result search(const web_search_config *cfg, const fake_server *s,
                                const char *query, unsigned n) {
    net_allowlist al = allow_port(s->port);
    web_search_result r;
    int rc = web_search(&r, cfg, query, n, &al, NULL);
    if (rc != 0)
        fail_msg("web_search: %d (%s)", rc, fawn_errmsg());
    net_allowlist_free(&al);
    return r;
}

static void check_hit(const web_search_result *r, size_t i, const char *title, const char *url,
                      const char *snippet) {
    assert_true(i < r->n);
    assert_string_equal(r->hits[i].title, title);
    assert_string_equal(r->hits[i].url, url);
    assert_string_equal(r->hits[i].snippet, snippet);
}

#define JSON_OK "HTTP/1.1 200 OK\r\nContent-Type: application/json"

/* ---- each backend's request and hits ---- */

static void searxng_gets_its_json_api_and_its_hits_are_plain(void **state) {
    (void)state;
    const response reply[] = {
        {.head = JSON_OK,
         .body = "{\"query\": \"x\", \"number_of_results\": 4, \"results\": ["
                 "{\"title\": \"  Caf\\u00e9\\n guide \", \"url\": \"https://example.com/cafe\","
                 " \"content\": \"Line one\\n\\tline two\", \"engine\": \"ddg\"},"
                 "{\"title\": \"evil\", \"url\": \"javascript:alert(1)\", \"content\": \"x\"},"
                 "{\"title\": \"files\", \"url\": \"ftp://example.com/f\", \"content\": \"x\"},"
                 "{\"title\": \"no url\", \"content\": \"x\"},"
                 "{\"title\": \"spaced\", \"url\": \"http://exa mple.com/\", \"content\": \"x\"},"
                 "42,"
                 "{\"url\": \"http://example.org/\"}"
                 "], \"answers\": [], \"suggestions\": []}"}};
    fake_server *s = server_start(reply, ARRAY_LEN(reply));
    web_search_config cfg = config_at("searxng", s, "/searx/", "");
    web_search_result r = search(&cfg, s, "café & crème/?#", 0);
    char *req = last_request(s);
    check_contains("request line", req,
                   "GET /searx/search?q=caf%C3%A9%20%26%20cr%C3%A8me%2F%3F%23&format=json"
                   "&pageno=1 HTTP/1.1\r\n");
    check_contains("accept", req, "\r\nAccept: application/json\r\n");
    check_lacks("no key", req, "Authorization");
    assert_int_equal(r.failure, WEB_SEARCH_OK);
    assert_int_equal(r.n, 2);
    check_hit(&r, 0, "Caf\xc3\xa9 guide", "https://example.com/cafe", "Line one line two");
    check_hit(&r, 1, "", "http://example.org/", "");
    web_search_result_clear(&r);
    free(req);
    web_search_config_free(&cfg);

    /* A key, in the header the operator names. */
    cfg = config_at("searxng", s, "", ", \"api_key\": \"sx-key\", \"key_header\": \"X-Searx-Key\"");
    r = search(&cfg, s, "q", 1);
    req = last_request(s);
    check_contains("key header", req, "\r\nX-Searx-Key: sx-key\r\n");
    check_contains("path", req, "GET /search?q=q&format=json&pageno=1 ");
    assert_int_equal(r.n, 1); /* cut at the count asked for */
    web_search_result_clear(&r);
    free(req);
    web_search_config_free(&cfg);
    server_stop(s);
}

static void tavily_posts_the_query_with_a_bearer_key(void **state) {
    (void)state;
    const response reply[] = {
        {.head = JSON_OK,
         .body = "{\"query\": \"rust async\", \"answer\": null, \"images\": [], \"results\": ["
                 "{\"title\": \"Async in Rust\", \"url\": \"https://rust-lang.org/async\","
                 " \"content\": \"Futures and executors.\", \"score\": 0.98,"
                 " \"raw_content\": null},"
                 "{\"title\": \"Tokio\", \"url\": \"https://tokio.rs/\", \"content\": \"Runtime\","
                 " \"score\": 0.9}], \"response_time\": 1.2}"}};
    fake_server *s = server_start(reply, ARRAY_LEN(reply));
    web_search_config cfg = config_at("tavily", s, "", ", \"api_key\": \"tvly-test-123\"");
    web_search_result r = search(&cfg, s, "rust \"async\"", 3);
    char *req = last_request(s);
    check_contains("request line", req, "POST /search HTTP/1.1\r\n");
    check_contains("key", req, "\r\nAuthorization: Bearer tvly-test-123\r\n");
    check_contains("type", req, "\r\nContent-Type: application/json\r\n");
    check_lacks("no expect", req, "Expect:");
    json_t *body = request_json(req);
    assert_string_equal(json_string_value(json_object_get(body, "query")), "rust \"async\"");
    assert_int_equal(json_integer_value(json_object_get(body, "max_results")), 3);
    assert_string_equal(json_string_value(json_object_get(body, "search_depth")), "basic");
    assert_true(json_is_false(json_object_get(body, "include_raw_content")));
    assert_null(json_object_get(body, "api_key")); /* the key goes in the header only */
    json_decref(body);
    assert_int_equal(r.failure, WEB_SEARCH_OK);
    assert_int_equal(r.n, 2);
    check_hit(&r, 0, "Async in Rust", "https://rust-lang.org/async", "Futures and executors.");
    check_hit(&r, 1, "Tokio", "https://tokio.rs/", "Runtime");
    web_search_result_clear(&r);
    free(req);
    web_search_config_free(&cfg);
    server_stop(s);
}

static void brave_gets_with_its_token_and_loses_its_markup(void **state) {
    (void)state;
    const response reply[] = {
        {.head = JSON_OK,
         .body =
             "{\"type\": \"search\", \"query\": {\"original\": \"c pointers\"},"
             " \"web\": {\"type\": \"search\", \"results\": ["
             "{\"title\": \"<strong>C</strong> Pointers &amp; Arrays\","
             " \"url\": \"https://example.com/c\", \"description\": \"Learn <strong>C</strong>"
             " pointers: a&lt;b, it&#x27;s &#8220;easy&#8221; &nbsp;<em>really</em>.&#10;1 < 2\","
             " \"page_age\": \"2024-01-01\", \"extra_snippets\": []}]},"
             " \"mixed\": {\"type\": \"mixed\"}}"},
        {.head = JSON_OK, .body = "{\"type\": \"search\", \"query\": {\"original\": \"zzz\"}}"}};
    fake_server *s = server_start(reply, ARRAY_LEN(reply));
    web_search_config cfg = config_at("brave", s, "", ", \"api_key\": \"BSA-token\"");
    web_search_result r = search(&cfg, s, "c pointers", 4);
    char *req = last_request(s);
    check_contains("request line", req, "GET /res/v1/web/search?q=c%20pointers&count=4 HTTP/1.1");
    check_contains("token", req, "\r\nX-Subscription-Token: BSA-token\r\n");
    check_contains("accept", req, "\r\nAccept: application/json\r\n");
    assert_int_equal(r.failure, WEB_SEARCH_OK);
    assert_int_equal(r.n, 1);
    check_hit(&r, 0, "C Pointers & Arrays", "https://example.com/c",
              "Learn C pointers: a<b, it's \xe2\x80\x9c"
              "easy\xe2\x80\x9d really. 1 < 2");
    web_search_result_clear(&r);
    free(req);
    /* No web section: no hits, not an error. */
    r = search(&cfg, s, "zzz", 0);
    assert_int_equal(r.failure, WEB_SEARCH_OK);
    assert_int_equal(r.n, 0);
    req = last_request(s);
    check_contains("default count", req, "&count=5 ");
    web_search_result_clear(&r);
    free(req);
    web_search_config_free(&cfg);
    server_stop(s);
}

static void serper_posts_q_and_num_with_its_api_key(void **state) {
    (void)state;
    const response reply[] = {
        {.head = JSON_OK,
         .body = "{\"searchParameters\": {\"q\": \"apple inc\", \"type\": \"search\"},"
                 " \"knowledgeGraph\": {\"title\": \"Apple\"}, \"organic\": ["
                 "{\"title\": \"Apple\", \"link\": \"https://www.apple.com/\","
                 " \"snippet\": \"Discover the innovative world of Apple.\", \"position\": 1},"
                 "{\"title\": \"Apple Inc. - Wikipedia\","
                 " \"link\": \"https://en.wikipedia.org/wiki/Apple_Inc.\","
                 " \"snippet\": \"Apple Inc. is an American company.\", \"position\": 2,"
                 " \"sitelinks\": []}], \"peopleAlsoAsk\": [], \"credits\": 1}"}};
    fake_server *s = server_start(reply, ARRAY_LEN(reply));
    web_search_config cfg = config_at("serper", s, "", ", \"api_key\": \"serper-key\"");
    web_search_result r = search(&cfg, s, "apple inc", 7);
    char *req = last_request(s);
    check_contains("request line", req, "POST /search HTTP/1.1\r\n");
    check_contains("key", req, "\r\nX-API-KEY: serper-key\r\n");
    check_contains("type", req, "\r\nContent-Type: application/json\r\n");
    json_t *body = request_json(req);
    assert_string_equal(json_string_value(json_object_get(body, "q")), "apple inc");
    assert_int_equal(json_integer_value(json_object_get(body, "num")), 7);
    assert_int_equal(json_object_size(body), 2);
    json_decref(body);
    assert_int_equal(r.n, 2);
    check_hit(&r, 1, "Apple Inc. - Wikipedia", "https://en.wikipedia.org/wiki/Apple_Inc.",
              "Apple Inc. is an American company.");
    web_search_result_clear(&r);
    free(req);
    web_search_config_free(&cfg);
    server_stop(s);
}

/* ---- failures ---- */

typedef struct failure_case {
    const char *backend;
    const char *head;
    const char *body;
    enum web_search_failure failure;
    int64_t retry_after_ms;
    const char *words; /* in the message */
} failure_case;

static void each_error_answer_has_its_category(void **state) {
    (void)state;
    static const failure_case cases[] = {
        {"tavily", "HTTP/1.1 401 Unauthorized",
         "{\"detail\": {\"error\": \"Unauthorized: missing or invalid API key.\"}}",
         WEB_SEARCH_AUTH, -1, "tavily: the API key was refused (HTTP 401): Unauthorized: missing"},
        {"tavily", "HTTP/1.1 432 Unknown",
         "{\"detail\": {\"error\": \"This request exceeds your plan's set usage limit.\"}}",
         WEB_SEARCH_QUOTA, -1, "(HTTP 432): This request exceeds your plan"},
        {"tavily", "HTTP/1.1 433 Unknown",
         "{\"detail\": {\"error\": \"This request exceeds the pay-as-you-go limit.\"}}",
         WEB_SEARCH_QUOTA, -1, "pay-as-you-go"},
        {"tavily", "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7",
         "{\"detail\": {\"error\": \"Your request has been blocked due to excessive requests.\"}}",
         WEB_SEARCH_RATE_LIMITED, 7000, "too many requests (HTTP 429)"},
        {"tavily", "HTTP/1.1 400 Bad Request", "{\"detail\": {\"error\": \"Invalid topic.\"}}",
         WEB_SEARCH_INVALID, -1, "the query was refused (HTTP 400): Invalid topic."},
        {"tavily", "HTTP/1.1 500 Internal Server Error", "oops", WEB_SEARCH_TRANSIENT, -1,
         "the service failed (HTTP 500)"},
        {"tavily", "HTTP/1.1 503 Service Unavailable\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT",
         "", WEB_SEARCH_TRANSIENT, 0, "(HTTP 503)"},
        {"brave", "HTTP/1.1 422 Unprocessable Entity",
         "{\"type\": \"ErrorResponse\", \"error\": {\"id\": \"x\", \"status\": 422, \"code\":"
         " \"SUBSCRIPTION_TOKEN_INVALID\", \"detail\": \"The provided subscription token is "
         "invalid.\"}, \"time\": 1}",
         WEB_SEARCH_AUTH, -1, "brave: the API key was refused (HTTP 422): The provided"},
        {"brave", "HTTP/1.1 422 Unprocessable Entity",
         "{\"type\": \"ErrorResponse\", \"error\": {\"status\": 422, \"code\": \"VALIDATION\","
         " \"detail\": \"Unable to validate request parameter(s)\"}}",
         WEB_SEARCH_INVALID, -1, "Unable to validate"},
        {"brave", "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 99999999999999999999",
         "{\"type\": \"ErrorResponse\", \"error\": {\"status\": 429, \"code\": \"RATE_LIMITED\","
         " \"detail\": \"Request rate limit exceeded for plan\", \"meta\": {\"plan\": \"Free\","
         " \"rate_limit\": 1, \"rate_current\": 1, \"quota_limit\": 2000, \"quota_current\": 15,"
         " \"component\": \"rate_limiter\"}}}",
         WEB_SEARCH_RATE_LIMITED, 3600 * 1000, "Request rate limit exceeded"},
        {"brave", "HTTP/1.1 429 Too Many Requests",
         "{\"type\": \"ErrorResponse\", \"error\": {\"status\": 429, \"code\": \"RATE_LIMITED\","
         " \"detail\": \"Request rate limit exceeded for plan\", \"meta\": {\"plan\": \"Free\","
         " \"quota_limit\": 2000, \"quota_current\": 2000}}}",
         WEB_SEARCH_QUOTA, -1, "quota or credit is used up"},
        {"serper", "HTTP/1.1 403 Forbidden",
         "{\"message\": \"Unauthorized.\", \"statusCode\": 403}", WEB_SEARCH_AUTH, -1,
         "serper: the API key was refused (HTTP 403): Unauthorized."},
        {"serper", "HTTP/1.1 400 Bad Request",
         "{\"message\": \"Not enough credits\", \"statusCode\": 400}", WEB_SEARCH_QUOTA, -1,
         "Not enough credits"},
        {"serper", "HTTP/1.1 402 Payment Required", "", WEB_SEARCH_QUOTA, -1, "(HTTP 402)"},
        {"searxng", "HTTP/1.1 403 Forbidden", "<html>Forbidden</html>", WEB_SEARCH_AUTH, -1,
         "search.formats"},
        {"searxng", "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30", "",
         WEB_SEARCH_RATE_LIMITED, 30000, "too many requests"},
        {"searxng", "HTTP/1.1 404 Not Found", "", WEB_SEARCH_BACKEND, -1, "unexpected status"},
        {"searxng", "HTTP/1.1 301 Moved Permanently\r\nLocation: https://elsewhere.example/search",
         "", WEB_SEARCH_BACKEND, -1, "redirect"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const failure_case *c = &cases[i];
        const response reply[] = {{.head = c->head, .body = c->body}};
        fake_server *s = server_start(reply, 1);
        bool searxng = strcmp(c->backend, "searxng") == 0;
        web_search_config cfg = config_at(c->backend, s, "",
                                          searxng ? "" : ", \"api_key\": \"k1\"");
        web_search_result r = search(&cfg, s, "query", 0);
        if (r.failure != c->failure || r.retry_after_ms != c->retry_after_ms ||
            !strstr(r.message, c->words))
            fail_msg("case %zu (%s %s): %s, %lld ms, \"%s\"", i, c->backend, c->head,
                     web_search_failure_name(r.failure), (long long)r.retry_after_ms, r.message);
        assert_int_equal(r.n, 0);
        assert_null(r.hits);
        assert_int_equal(atomic_load(&s->served), 1); /* a redirect is not followed */
        web_search_result_clear(&r);
        web_search_config_free(&cfg);
        server_stop(s);
    }
}

static void the_key_never_reaches_a_message(void **state) {
    (void)state;
    const response reply[] = {
        {.head = "HTTP/1.1 401 Unauthorized",
         .body = "{\"detail\": {\"error\": \"Invalid API key tvly-SECRET-42 (tvly-SECRET-42)\"}}"}};
    fake_server *s = server_start(reply, 1);
    web_search_config cfg = config_at("tavily", s, "", ", \"api_key\": \"tvly-SECRET-42\"");
    web_search_result r = search(&cfg, s, "q", 0);
    assert_int_equal(r.failure, WEB_SEARCH_AUTH);
    check_lacks("message", r.message, "SECRET");
    check_contains("message", r.message, "Invalid API key [key] ([key])");
    web_search_result_clear(&r);
    web_search_config_free(&cfg);
    server_stop(s);

    /* A secret cut by the message's bound leaves no part of itself either. */
    char body[600], secret[64];
    snprintf(secret, sizeof secret, "k-%s", "0123456789abcdef0123456789abcdef");
    snprintf(body, sizeof body, "{\"detail\": \"%0150d%s\"}", 0, secret);
    assert_int_equal(
        web_search_parse(&r, WEB_SEARCH_TAVILY, 401, -1, body, strlen(body), 5, secret), 0);
    check_lacks("cut", r.message, "k-0123");
    web_search_result_clear(&r);
}

static void a_backend_the_allow_list_does_not_open_is_refused(void **state) {
    (void)state;
    const response reply[] = {{.head = JSON_OK, .body = "{\"results\": []}"}};
    fake_server *s = server_start(reply, 1);
    web_search_config cfg = config_at("searxng", s, "", "");
    web_search_result r;
    /* No entry for loopback: refused before any connection. */
    assert_int_equal(web_search(&r, &cfg, "q", 0, NULL, NULL), 0);
    assert_int_equal(r.failure, WEB_SEARCH_REFUSED);
    check_contains("message", r.message, "127.0.0.1");
    web_search_result_clear(&r);
    web_search_config_free(&cfg);
    /* Nor the metadata address, by a hosted backend's url. */
    cfg = config_of("{\"backend\": \"brave\", \"url\": \"http://169.254.169.254\","
                    " \"api_key\": \"k\"}");
    assert_int_equal(web_search(&r, &cfg, "q", 0, NULL, NULL), 0);
    assert_int_equal(r.failure, WEB_SEARCH_REFUSED);
    web_search_result_clear(&r);
    web_search_config_free(&cfg);
    assert_int_equal(atomic_load(&s->served), 0);
    server_stop(s);
}

static void bad_replies_are_transient_and_bounded(void **state) {
    (void)state;
    static char huge[(3 << 20) + 1];
    memset(huge, ' ', sizeof huge - 1);
    memcpy(huge, "{\"results\": [", 13);
    const response replies[] = {
        {.head = JSON_OK, .body = "\xff\xfe{\"results\": []}"},
        {.head = JSON_OK, .body = "{\"results\": [{\"title\": \"caf\xe9\"}]}"},
        {.head = JSON_OK, .body = "{\"results\": 5}"},
        {.head = JSON_OK, .body = "[1, 2]"},
        {.head = JSON_OK, .body = ""},
        {.head = JSON_OK, .body = huge, .chunk = 65536},
    };
    static const char *const words[] = {
        "not JSON in UTF-8",   "not JSON in UTF-8", "no \"results\" list",
        "no \"results\" list", "is empty",          "larger than 2 MiB"};
    fake_server *s = server_start(replies, ARRAY_LEN(replies));
    web_search_config cfg = config_at("searxng", s, "", "");
    for (size_t i = 0; i < ARRAY_LEN(replies); i++) {
        web_search_result r = search(&cfg, s, "q", 0);
        if (r.failure != WEB_SEARCH_TRANSIENT || !strstr(r.message, words[i]))
            fail_msg("reply %zu: %s \"%s\"", i, web_search_failure_name(r.failure), r.message);
        json_t *valid = json_string(r.message); /* messages are UTF-8 */
        assert_non_null(valid);
        json_decref(valid);
        web_search_result_clear(&r);
    }
    web_search_config_free(&cfg);
    server_stop(s);
}

static void slow_backends_time_out_and_cancel_stops_them(void **state) {
    (void)state;
    const response slow[] = {{JSON_OK, "{\"results\": []}", 1, 0, END_HANG}};
    /* The head arrives, the body never ends: only the timeout ends it. */
    const response hang[] = {{JSON_OK "\r\nContent-Length: 100", "{", 0, 0, END_HANG}};
    fake_server *s = server_start(hang, 1);
    web_search_config cfg = config_at("searxng", s, "", ", \"timeout_s\": 1");
    web_search_result r = search(&cfg, s, "q", 0);
    assert_int_equal(r.failure, WEB_SEARCH_TRANSIENT);
    check_contains("timeout", r.message, "no answer within 1 s");
    web_search_result_clear(&r);
    web_search_config_free(&cfg);
    server_stop(s);

    s = server_start(slow, 1);
    cfg = config_at("searxng", s, "", "");
    net_allowlist al = allow_port(s->port);
    atomic_bool cancel = true;
    assert_int_equal(web_search(&r, &cfg, "q", 0, &al, &cancel), FAWN_ECANCELED);
    assert_int_equal(r.n, 0);
    net_allowlist_free(&al);
    web_search_config_free(&cfg);
    server_stop(s);

    /* Nothing listens: transient. */
    uint16_t port = loopback_free_port();
    char *text = strf("{\"backend\": \"searxng\", \"url\": \"http://127.0.0.1:%u\"}", port);
    cfg = config_of(text);
    free(text);
    al = allow_port(port);
    assert_int_equal(web_search(&r, &cfg, "q", 0, &al, NULL), 0);
    assert_int_equal(r.failure, WEB_SEARCH_TRANSIENT);
    web_search_result_clear(&r);
    net_allowlist_free(&al);
    web_search_config_free(&cfg);
}

static void queries_fawn_does_not_send_are_invalid(void **state) {
    (void)state;
    const response reply[] = {{.head = JSON_OK, .body = "{\"results\": []}"}};
    fake_server *s = server_start(reply, 1);
    web_search_config cfg = config_at("searxng", s, "", "");
    char longest[WEB_SEARCH_QUERY_MAX + 2];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    const char *bad[] = {"", "   ", "a\nb", "tab\there", "del\x7f", "caf\xe9", longest};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        web_search_result r = search(&cfg, s, bad[i], 0);
        if (r.failure != WEB_SEARCH_INVALID)
            fail_msg("query %zu: %s", i, web_search_failure_name(r.failure));
        web_search_result_clear(&r);
    }
    assert_int_equal(atomic_load(&s->served), 0);
    longest[WEB_SEARCH_QUERY_MAX] = '\0'; /* exactly the bound is sent */
    web_search_result r = search(&cfg, s, longest, 0);
    assert_int_equal(r.failure, WEB_SEARCH_OK);
    web_search_result_clear(&r);
    web_search_config_free(&cfg);
    server_stop(s);
}

/* ---- the reply read apart from the network ---- */

static void hits_are_bounded_in_number_and_size(void **state) {
    (void)state;
    fbuf b = {0};
    assert_int_equal(fbuf_printf(&b, "{\"organic\": ["), 0);
    for (int i = 0; i < 30; i++)
        assert_int_equal(fbuf_printf(&b,
                                     "%s{\"title\": \"t%d\", \"link\": \"https://e.com/%d\","
                                     " \"snippet\": \"s\"}",
                                     i ? "," : "", i, i),
                         0);
    assert_int_equal(fbuf_printf(&b, "]}"), 0);
    web_search_result r;
    assert_int_equal(web_search_parse(&r, WEB_SEARCH_SERPER, 200, -1, b.data, b.len, 100, NULL), 0);
    assert_int_equal(r.n, WEB_SEARCH_MAX_RESULTS);
    assert_string_equal(r.hits[19].title, "t19");
    web_search_result_clear(&r);
    fbuf_free(&b);

    /* A title of "a" and 300 two-byte characters and a 10001-byte snippet are cut
     * at a character; a URL past WEB_URL_MAX is dropped. */
    assert_int_equal(fbuf_printf(&b, "{\"results\": [{\"title\": \"a"), 0);
    for (int i = 0; i < 300; i++)
        assert_int_equal(fbuf_printf(&b, "\xc3\xa9"), 0);
    assert_int_equal(fbuf_printf(&b, "\", \"url\": \"https://e.com/\", \"content\": \"x"), 0);
    for (int i = 0; i < 5000; i++)
        assert_int_equal(fbuf_printf(&b, " y"), 0);
    assert_int_equal(fbuf_printf(&b, "\"}, {\"title\": \"long\", \"url\": \"https://e.com/"), 0);
    for (int i = 0; i < WEB_URL_MAX; i++)
        assert_int_equal(fbuf_printf(&b, "a"), 0);
    assert_int_equal(fbuf_printf(&b, "\"}]}"), 0);
    assert_int_equal(web_search_parse(&r, WEB_SEARCH_TAVILY, 200, -1, b.data, b.len, 5, NULL), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(strlen(r.hits[0].title), WEB_SEARCH_TITLE_MAX - 1);     /* "aéé...é" */
    assert_int_equal(strlen(r.hits[0].snippet), WEB_SEARCH_SNIPPET_MAX - 1); /* "x y ... y" */
    assert_int_equal(r.hits[0].snippet[WEB_SEARCH_SNIPPET_MAX - 2], 'y');
    json_t *valid = json_string(r.hits[0].title);
    assert_non_null(valid);
    json_decref(valid);
    web_search_result_clear(&r);
    fbuf_free(&b);
}

/* ---- configuration ---- */

static void configs_are_read_strictly(void **state) {
    (void)state;
    web_search_config cfg = config_of("{\"backend\": \"tavily\", \"api_key\": \"tvly-1\"}");
    assert_int_equal(cfg.backend, WEB_SEARCH_TAVILY);
    assert_string_equal(cfg.url, "https://api.tavily.com");
    assert_int_equal(cfg.timeout_s, WEB_SEARCH_TIMEOUT_DEFAULT_S);
    assert_int_equal(cfg.max_results, WEB_SEARCH_RESULTS_DEFAULT);
    web_search_config_free(&cfg);
    cfg = config_of("{\"backend\": \"brave\", \"api_key\": \"b\", \"timeout_s\": 120,"
                    " \"max_results\": 20}");
    assert_string_equal(cfg.url, "https://api.search.brave.com");
    assert_int_equal(cfg.timeout_s, 120);
    assert_int_equal(cfg.max_results, 20);
    web_search_config_free(&cfg);
    cfg = config_of("{\"backend\": \"serper\", \"api_key\": \"s\"}");
    assert_string_equal(cfg.url, "https://google.serper.dev");
    web_search_config_free(&cfg);
    cfg = config_of("{\"backend\": \"searxng\", \"url\": \"https://search.internal/sx//\"}");
    assert_string_equal(cfg.url, "https://search.internal/sx");
    assert_null(cfg.api_key);
    web_search_config_free(&cfg);

    static const struct {
        const char *json, *names;
    } bad[] = {
        {"[]", "web.search: must be an object"},
        {"{\"api_key\": \"k\"}", "web.search.backend"},
        {"{\"backend\": \"google\", \"api_key\": \"k\"}", "web.search.backend"},
        {"{\"backend\": 3}", "web.search.backend"},
        {"{\"backend\": \"tavily\"}", "web.search.api_key: required for tavily"},
        {"{\"backend\": \"searxng\"}", "web.search.url: required for searxng"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\", \"colour\": 1}", "web.search.colour"},
        {"{\"backend\": \"brave\", \"api_key\": \"\"}", "web.search.api_key"},
        {"{\"backend\": \"brave\", \"api_key\": \"two words\"}", "web.search.api_key"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\\r\\nX-Evil: 1\"}", "web.search.api_key"},
        {"{\"backend\": \"brave\", \"api_key\": 42}", "web.search.api_key"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\", \"timeout_s\": 0}", "web.search.timeout_s"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\", \"timeout_s\": 121}",
         "web.search.timeout_s"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\", \"timeout_s\": \"5\"}",
         "web.search.timeout_s"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\", \"max_results\": 21}",
         "web.search.max_results"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\", \"max_results\": 2.5}",
         "web.search.max_results"},
        {"{\"backend\": \"searxng\", \"url\": \"ftp://x.example\"}", "web.search.url"},
        {"{\"backend\": \"searxng\", \"url\": \"http://u:p@x.example\"}", "web.search.url"},
        {"{\"backend\": \"searxng\", \"url\": \"http://x.example/?q=1\"}", "web.search.url"},
        {"{\"backend\": \"searxng\", \"url\": \"http://x.example/#f\"}", "web.search.url"},
        {"{\"backend\": \"searxng\", \"url\": \"x.example\"}", "web.search.url"},
        {"{\"backend\": \"searxng\", \"url\": \"http://x.example\", \"key_header\": \"X-K\"}",
         "web.search.key_header"},
        {"{\"backend\": \"searxng\", \"url\": \"http://x.example\", \"api_key\": \"k\","
         " \"key_header\": \"X K:\"}",
         "web.search.key_header"},
        {"{\"backend\": \"brave\", \"api_key\": \"k\", \"key_header\": \"X-K\"}",
         "web.search.key_header"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        json_t *obj = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
        assert_non_null(obj);
        memset(&cfg, 0xa5, sizeof cfg);
        int r = web_search_config_parse(&cfg, obj, "web.search");
        if (r != FAWN_ECONFIG || !strstr(fawn_errmsg(), bad[i].names))
            fail_msg("config %zu: %d \"%s\"", i, r, fawn_errmsg());
        check_lacks("no key in the message", fawn_errmsg(), "two words");
        check_lacks("no key in the message", fawn_errmsg(), "X-Evil");
        assert_null(cfg.url);
        assert_null(cfg.api_key);
        json_decref(obj);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(searxng_gets_its_json_api_and_its_hits_are_plain),
        cmocka_unit_test(tavily_posts_the_query_with_a_bearer_key),
        cmocka_unit_test(brave_gets_with_its_token_and_loses_its_markup),
        cmocka_unit_test(serper_posts_q_and_num_with_its_api_key),
        cmocka_unit_test(each_error_answer_has_its_category),
        cmocka_unit_test(the_key_never_reaches_a_message),
        cmocka_unit_test(a_backend_the_allow_list_does_not_open_is_refused),
        cmocka_unit_test(bad_replies_are_transient_and_bounded),
        cmocka_unit_test(slow_backends_time_out_and_cancel_stops_them),
        cmocka_unit_test(queries_fawn_does_not_send_are_invalid),
        cmocka_unit_test(hits_are_bounded_in_number_and_size),
        cmocka_unit_test(configs_are_read_strictly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
