/* Incremental Server-Sent Events parser (WHATWG HTML, "Parsing an event stream"). */
#include <string.h>

#include "model/model.h"

static const char sse_bom[] = "\xEF\xBB\xBF";

void sse_init(sse_parser *p, sse_event_fn on_event, void *ctx) {
    memset(p, 0, sizeof *p);
    p->on_event = on_event;
    p->ctx = ctx;
    p->line.limit = SSE_LINE_MAX;
    p->data.limit = SSE_EVENT_MAX;
    p->first_line = true;
}

void sse_free(sse_parser *p) {
    fbuf_free(&p->line);
    fbuf_free(&p->data);
    p->has_data = false;
}

static void sse_reset_event(sse_parser *p) {
    p->data.len = 0;
    if (p->data.data)
        p->data.data[0] = '\0';
    p->event[0] = '\0';
    p->has_data = false;
}

static int sse_dispatch(sse_parser *p) {
    if (!p->has_data) {
        sse_reset_event(p);
        return 0;
    }
    /* Every data line appended a trailing "\n"; the last one is dropped. */
    if (p->data.len > 0)
        p->data.data[--p->data.len] = '\0';
    const char *data = p->data.data ? p->data.data : "";
    int r = p->on_event(p->ctx, p->event[0] ? p->event : "message", data, p->data.len);
    sse_reset_event(p);
    return r;
}

static int sse_field(sse_parser *p, const char *name, size_t name_len, const char *value,
                     size_t value_len) {
    if (name_len == 4 && memcmp(name, "data", 4) == 0) {
        p->has_data = true;
        int r = fbuf_append(&p->data, value, value_len);
        if (r == 0)
            r = fbuf_append(&p->data, "\n", 1);
        if (r == FAWN_E2BIG)
            return fawn_err(FAWN_E2BIG, "event stream: event larger than %zu bytes",
                            (size_t)SSE_EVENT_MAX);
        return r;
    }
    if (name_len == 5 && memcmp(name, "event", 5) == 0) {
        /* Longer names than any real event type are cut; they match nothing. */
        size_t n = value_len < sizeof p->event - 1 ? value_len : sizeof p->event - 1;
        memcpy(p->event, value, n);
        p->event[n] = '\0';
    }
    return 0;
}

static int sse_line(sse_parser *p, const char *line, size_t len) {
    if (p->first_line) {
        p->first_line = false;
        if (len >= 3 && memcmp(line, sse_bom, 3) == 0) {
            line += 3;
            len -= 3;
        }
    }
    if (len == 0)
        return sse_dispatch(p);
    if (line[0] == ':')
        return 0;
    const char *colon = memchr(line, ':', len);
    if (!colon)
        return sse_field(p, line, len, "", 0);
    size_t name_len = (size_t)(colon - line);
    const char *value = colon + 1;
    size_t value_len = len - name_len - 1;
    if (value_len > 0 && value[0] == ' ') {
        value++;
        value_len--;
    }
    return sse_field(p, line, name_len, value, value_len);
}

/* Ends the line whose tail is buf[0..n): completes the buffered part if any. */
static int sse_line_too_long(void) {
    return fawn_err(FAWN_E2BIG, "event stream: line longer than %zu bytes", (size_t)SSE_LINE_MAX);
}

static int sse_end_line(sse_parser *p, const char *buf, size_t n) {
    if (p->line.len == 0) {
        if (n > SSE_LINE_MAX)
            return sse_line_too_long();
        return sse_line(p, buf, n);
    }
    int r = fbuf_append(&p->line, buf, n);
    if (r == FAWN_E2BIG)
        return sse_line_too_long();
    if (r < 0)
        return r;
    r = sse_line(p, p->line.data, p->line.len);
    p->line.len = 0;
    return r;
}

int sse_feed(sse_parser *p, const char *buf, size_t n) {
    size_t i = 0;
    if (n > 0 && p->after_cr && buf[0] == '\n')
        i = 1;
    if (n > 0)
        p->after_cr = false;
    while (i < n) {
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r')
            j++;
        if (j == n) {
            int r = fbuf_append(&p->line, buf + i, n - i);
            return r == FAWN_E2BIG ? sse_line_too_long() : r;
        }
        int r = sse_end_line(p, buf + i, j - i);
        if (r != 0)
            return r;
        if (buf[j] == '\r') {
            if (j + 1 == n) {
                p->after_cr = true;
                return 0;
            }
            if (buf[j + 1] == '\n')
                j++;
        }
        i = j + 1;
    }
    return 0;
}
