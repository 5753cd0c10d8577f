/* A web page as readable text (research.h): HTML5 parsed by gumbo (the
 * parser browsers' specification describes), the main content kept and
 * written as Markdown-like text.
 *
 * Nesting is bounded before gumbo sees the page: HTML5 tree construction
 * looks through the open elements for each tag, so a page of nested tags
 * costs time quadratic in its depth (a 2 MiB page of <div>s, minutes), and
 * gumbo builds and frees its tree recursively. Start tags past
 * HTML_DEPTH_MAX open ones are dropped (their text stays), which also
 * bounds the writer's own recursion. */
#include <ctype.h>
#include <errno.h>
#include <gumbo.h>
#include <iconv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/json.h"
#include "research/research.h"

/* Start tags open at once that are kept: far deeper than any real page's
 * structure. Counted naively (every start tag but void and self-closing
 * ones opens, every end tag closes), so a page that leaves many elements
 * open (<p>, <li>) loses tags past it, never text. */
#define HTML_DEPTH_MAX 256

typedef struct writer {
    fbuf out;
    int r;
    bool space;   /* a space is owed before the next word */
    int newlines; /* newlines at the end of out (0..2) */
    int pre;      /* inside <pre>: text as it is */
    int list;     /* list depth */
} writer;

static void put(writer *w, const char *s, size_t n) {
    if (w->r == 0 && n)
        w->r = fbuf_append(&w->out, s, n);
}

/* Ends the current block with up to n newlines (never more than two in a row). */
static void block_break(writer *w, int n) {
    if (w->out.len == 0 || n == 0)
        return;
    while (w->newlines < n) {
        put(w, "\n", 1);
        w->newlines++;
    }
    w->space = false;
}

/* Text with runs of white space as one space (as it is inside <pre>). */
static void text(writer *w, const char *s) {
    if (w->pre) {
        put(w, s, strlen(s));
        w->newlines = s[0] && s[strlen(s) - 1] == '\n';
        return;
    }
    for (const char *p = s; *p;) {
        if (isspace((unsigned char)*p)) {
            w->space = w->newlines == 0 && w->out.len > 0;
            while (isspace((unsigned char)*p))
                p++;
            continue;
        }
        size_t n = 0;
        while (p[n] && !isspace((unsigned char)p[n]))
            n++;
        if (w->space)
            put(w, " ", 1);
        put(w, p, n);
        w->space = false;
        w->newlines = 0;
        p += n;
    }
}

/* Elements whose content is never text of the page. */
static bool dropped(GumboTag t) {
    switch (t) {
    case GUMBO_TAG_SCRIPT:
    case GUMBO_TAG_STYLE:
    case GUMBO_TAG_NOSCRIPT:
    case GUMBO_TAG_TEMPLATE:
    case GUMBO_TAG_SVG:
    case GUMBO_TAG_MATH:
    case GUMBO_TAG_IFRAME:
    case GUMBO_TAG_OBJECT:
    case GUMBO_TAG_EMBED:
    case GUMBO_TAG_HEAD:
    case GUMBO_TAG_FORM:
    case GUMBO_TAG_BUTTON:
    case GUMBO_TAG_SELECT:
    case GUMBO_TAG_TEXTAREA:
    case GUMBO_TAG_CANVAS:
    case GUMBO_TAG_NAV:
    case GUMBO_TAG_ASIDE:
    case GUMBO_TAG_FOOTER: return true;
    default: return false;
    }
}

static bool is_block(GumboTag t) {
    switch (t) {
    case GUMBO_TAG_P:
    case GUMBO_TAG_DIV:
    case GUMBO_TAG_SECTION:
    case GUMBO_TAG_ARTICLE:
    case GUMBO_TAG_MAIN:
    case GUMBO_TAG_HEADER:
    case GUMBO_TAG_BLOCKQUOTE:
    case GUMBO_TAG_UL:
    case GUMBO_TAG_OL:
    case GUMBO_TAG_TABLE:
    case GUMBO_TAG_TR:
    case GUMBO_TAG_DL:
    case GUMBO_TAG_DT:
    case GUMBO_TAG_DD:
    case GUMBO_TAG_FIGURE:
    case GUMBO_TAG_FIGCAPTION:
    case GUMBO_TAG_HR:
    case GUMBO_TAG_ADDRESS:
    case GUMBO_TAG_DETAILS:
    case GUMBO_TAG_SUMMARY: return true;
    default: return false;
    }
}

static int heading_level(GumboTag t) {
    switch (t) {
    case GUMBO_TAG_H1: return 1;
    case GUMBO_TAG_H2: return 2;
    case GUMBO_TAG_H3: return 3;
    case GUMBO_TAG_H4: return 4;
    case GUMBO_TAG_H5: return 5;
    case GUMBO_TAG_H6: return 6;
    default: return 0;
    }
}

static void node_write(writer *w, const GumboNode *n);

static void children_write(writer *w, const GumboNode *n) {
    const GumboVector *kids = &n->v.element.children;
    for (unsigned i = 0; i < kids->length && w->r == 0; i++)
        node_write(w, kids->data[i]);
}

/* A link's target when it is one a reader can follow (http, https, or relative). */
static const char *link_target(const GumboNode *n) {
    const GumboAttribute *href = gumbo_get_attribute(&n->v.element.attributes, "href");
    if (!href || !href->value[0] || strpbrk(href->value, " \t\r\n()<>"))
        return NULL;
    const char *colon = strchr(href->value, ':'), *slash = strchr(href->value, '/');
    if (colon && (!slash || colon < slash) && strncasecmp(href->value, "http:", 5) != 0 &&
        strncasecmp(href->value, "https:", 6) != 0)
        return NULL; /* javascript:, data:, mailto: ... */
    return href->value;
}

static void element_write(writer *w, const GumboNode *n) {
    GumboTag t = n->v.element.tag;
    int level = heading_level(t);
    if (dropped(t))
        return;
    if (level) {
        block_break(w, 2);
        put(w, "######", (size_t)level);
        put(w, " ", 1);
        children_write(w, n);
        block_break(w, 2);
    } else if (t == GUMBO_TAG_BR) {
        put(w, "\n", 1);
        w->newlines = 1;
        w->space = false;
    } else if (t == GUMBO_TAG_LI) {
        block_break(w, 1);
        for (int i = 1; i < w->list; i++)
            put(w, "  ", 2);
        put(w, "- ", 2);
        children_write(w, n);
        block_break(w, 1);
    } else if (t == GUMBO_TAG_PRE) {
        block_break(w, 2);
        put(w, "```\n", 4);
        w->pre++;
        children_write(w, n);
        w->pre--;
        if (w->newlines == 0)
            put(w, "\n", 1);
        put(w, "```", 3);
        w->newlines = 0;
        block_break(w, 2);
    } else if (t == GUMBO_TAG_A && link_target(n) && !w->pre) {
        const char *target = link_target(n);
        size_t before = w->out.len;
        if (w->space)
            put(w, " ", 1);
        w->space = false;
        put(w, "[", 1);
        size_t inside = w->out.len;
        children_write(w, n);
        if (w->out.len == inside) { /* no text: no link */
            w->out.len = before;
            if (w->out.data)
                w->out.data[before] = '\0';
            return;
        }
        put(w, "](", 2);
        put(w, target, strlen(target));
        put(w, ")", 1);
        w->newlines = 0;
    } else if (t == GUMBO_TAG_TD || t == GUMBO_TAG_TH) {
        children_write(w, n);
        if (w->space || w->newlines == 0)
            put(w, " |", 2);
        w->space = true;
        w->newlines = 0;
    } else {
        bool list = t == GUMBO_TAG_UL || t == GUMBO_TAG_OL;
        /* rows, and lists inside a list item, are lines; other blocks paragraphs */
        int gap = t == GUMBO_TAG_TR || (list && w->list > 0) ? 1 : is_block(t) ? 2 : 0;
        block_break(w, gap);
        w->list += list;
        children_write(w, n);
        w->list -= list;
        block_break(w, gap);
    }
}

static void node_write(writer *w, const GumboNode *n) {
    if (n->type == GUMBO_NODE_ELEMENT || n->type == GUMBO_NODE_TEMPLATE)
        element_write(w, n);
    else if (n->type == GUMBO_NODE_TEXT || n->type == GUMBO_NODE_CDATA ||
             (n->type == GUMBO_NODE_WHITESPACE && w->pre))
        text(w, n->v.text.text);
    else if (n->type == GUMBO_NODE_WHITESPACE)
        w->space = w->newlines == 0 && w->out.len > 0;
}

/* The first element with tag t under n, breadth first would cost a queue;
 * depth first finds the outermost on each path, which is what is wanted. */
static const GumboNode *find_tag(const GumboNode *n, GumboTag t) {
    if (n->type != GUMBO_NODE_ELEMENT)
        return NULL;
    if (n->v.element.tag == t)
        return n;
    const GumboVector *kids = &n->v.element.children;
    for (unsigned i = 0; i < kids->length; i++) {
        const GumboNode *found = find_tag(kids->data[i], t);
        if (found)
            return found;
    }
    return NULL;
}

static void title_write(writer *w, const GumboNode *root) {
    const GumboNode *title = find_tag(root, GUMBO_TAG_TITLE);
    if (!title || title->v.element.children.length == 0)
        return;
    const GumboNode *t = title->v.element.children.data[0];
    if (t->type != GUMBO_NODE_TEXT)
        return;
    put(w, "Title:", 6);
    w->space = true;
    text(w, t->v.text.text);
    block_break(w, 2);
}

/* The part of the page that holds its content: <main>, else the first
 * <article>, else <body>. */
static const GumboNode *content_of(const GumboNode *root) {
    const GumboNode *n = find_tag(root, GUMBO_TAG_MAIN);
    if (!n)
        n = find_tag(root, GUMBO_TAG_ARTICLE);
    return n ? n : find_tag(root, GUMBO_TAG_BODY);
}

typedef struct job {
    const char *html;
    size_t len;
    writer w;
} job;

static void convert(job *j) {
    GumboOutput *doc = gumbo_parse_with_options(&kGumboDefaultOptions, j->html, j->len);
    if (!doc) {
        j->w.r = fawn_err(FAWN_ENOMEM, "out of memory parsing the page");
        return;
    }
    title_write(&j->w, doc->root);
    const GumboNode *content = content_of(doc->root);
    if (content)
        node_write(&j->w, content);
    gumbo_destroy_output(&kGumboDefaultOptions, doc);
}

/* ---- bounding the nesting ---- */

static const char *const void_tags[] = {"area",  "base", "br",   "col",   "embed",  "hr",    "img",
                                        "input", "link", "meta", "param", "source", "track", "wbr"};

static bool void_tag(const char *name, size_t n) {
    for (size_t i = 0; i < ARRAY_LEN(void_tags); i++)
        if (strlen(void_tags[i]) == n && strncasecmp(void_tags[i], name, n) == 0)
            return true;
    return false;
}

/* Where the tag that starts at p (after '<') ends: past its '>', quotes
 * respected; end when there is none. */
static const char *tag_end(const char *p, const char *end) {
    char quote = 0;
    for (; p < end; p++) {
        if (quote)
            quote = *p == quote ? 0 : quote;
        else if (*p == '"' || *p == '\'')
            quote = *p;
        else if (*p == '>')
            return p + 1;
    }
    return end;
}

/* A copy of html whose start tags past HTML_DEPTH_MAX open ones are blanked
 * out (one linear pass). */
static int nesting_bound(fbuf *out, const char *html, size_t len) {
    const char *p = html, *end = html + len;
    size_t depth = 0;
    int r = 0;
    while (p < end && r == 0) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt)
            return fbuf_append(out, p, (size_t)(end - p));
        r = fbuf_append(out, p, (size_t)(lt - p));
        bool closing = lt + 1 < end && lt[1] == '/';
        const char *name = lt + 1 + closing;
        if (name >= end || !isalpha((unsigned char)*name)) { /* text, a comment, a doctype */
            const char *stop = lt + 1 < end && lt[1] == '!' ? tag_end(lt + 1, end) : lt + 1;
            if (r == 0)
                r = fbuf_append(out, lt, (size_t)(stop - lt));
            p = stop;
            continue;
        }
        size_t n = 0;
        while (name + n < end && isalnum((unsigned char)name[n]))
            n++;
        const char *stop = tag_end(name, end);
        bool self_closing = stop - 2 >= name && stop[-1] == '>' && stop[-2] == '/';
        bool kept = true;
        if (closing)
            depth -= depth > 0;
        else if (!void_tag(name, n) && !self_closing)
            kept = ++depth <= HTML_DEPTH_MAX;
        if (r == 0)
            r = kept ? fbuf_append(out, lt, (size_t)(stop - lt)) : fbuf_append(out, " ", 1);
        p = stop;
    }
    return r;
}

/* ---- charsets ---- */

int web_text_utf8(char **out, size_t *out_len, const char *html, size_t len, const char *charset) {
    *out = NULL;
    *out_len = 0;
    bool utf8 = !charset || !*charset || strcasecmp(charset, "utf-8") == 0 ||
                strcasecmp(charset, "utf8") == 0 || strcasecmp(charset, "us-ascii") == 0;
    iconv_t cd = iconv_open("UTF-8//TRANSLIT", utf8 ? "UTF-8" : charset);
    if (cd == (iconv_t)-1)
        return fawn_err(FAWN_EUNSUP, "the page's charset %.40s is not one fawn reads", charset);
    fbuf b = {0};
    char chunk[4096];
    char *in = (char *)html;
    size_t left = len;
    int r = 0;
    while (left > 0 && r == 0) {
        char *o = chunk;
        size_t room = sizeof chunk;
        size_t k = iconv(cd, &in, &left, &o, &room);
        r = fbuf_append(&b, chunk, sizeof chunk - room);
        if (k == (size_t)-1 && errno != E2BIG && r == 0) {
            /* an invalid or cut sequence: U+FFFD for one byte, then on */
            r = fbuf_append(&b, "\xef\xbf\xbd", 3);
            in++;
            left--;
        }
    }
    iconv_close(cd);
    if (r < 0) {
        fbuf_free(&b);
        return r;
    }
    *out_len = b.len;
    *out = b.data ? fbuf_steal(&b) : strdup("");
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Where a page that was served without a charset declares one: a
 * `charset=NAME` in its first bytes (<meta charset> or http-equiv). */
#define META_SNIFF_BYTES 1024

static void meta_charset(char out[64], const char *html, size_t len) {
    out[0] = '\0';
    size_t n = len < META_SNIFF_BYTES ? len : META_SNIFF_BYTES;
    for (size_t i = 0; i + 8 < n; i++) {
        if (strncasecmp(html + i, "charset=", 8) != 0)
            continue;
        const char *v = html + i + 8;
        size_t left = n - i - 8, k = 0;
        if (left && (*v == '"' || *v == '\''))
            v++, left--;
        while (k < left && k < 63 && (isalnum((unsigned char)v[k]) || v[k] == '-' || v[k] == '_'))
            k++;
        memcpy(out, v, k);
        out[k] = '\0';
        return;
    }
}

int web_html_text(char **out, const char *html, size_t len, const char *charset) {
    *out = NULL;
    if (len > WEB_HTML_MAX)
        return fawn_err(FAWN_E2BIG, "the page is larger than %d bytes", WEB_HTML_MAX);
    char declared[64];
    if (!charset || !*charset) {
        meta_charset(declared, html, len);
        charset = declared;
    }
    job j = {0};
    char *utf8 = NULL;
    size_t utf8_len = 0;
    fbuf bounded = {0};
    int r = web_text_utf8(&utf8, &utf8_len, html, len, charset);
    if (r == 0)
        r = nesting_bound(&bounded, utf8, utf8_len);
    j.html = bounded.data ? bounded.data : "";
    j.len = bounded.len;
    if (r == 0)
        convert(&j);
    r = r < 0 ? r : j.w.r;
    free(utf8);
    fbuf_free(&bounded);
    if (r < 0) {
        fbuf_free(&j.w.out);
        return r;
    }
    while (j.w.out.len && j.w.out.data[j.w.out.len - 1] == '\n')
        j.w.out.data[--j.w.out.len] = '\0';
    *out = j.w.out.data ? fbuf_steal(&j.w.out) : strdup("");
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}
