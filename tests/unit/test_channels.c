/* The channel layer's pure parts and its store: attachment names (directories
 * stripped, traversal and control characters refused, fallback from the ref),
 * failure markers, command and connect-code parsing, the stored form of a
 * message, DingTalk payload parsing, and in the store: connect codes (single
 * use, expiry, bound per user), owner-scoped bindings, persistent dedup and
 * the bounded, restart-safe queue. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channels/channels_internal.h"
#include "channels/dingtalk_internal.h"
#include "store/store.h"
#include "unit/test_store_open.h"

static void name_of(char out[CH_FILE_NAME_MAX + 1], enum ch_attach_kind kind, const char *name,
                    const char *ref) {
    ch_attachment a = {kind, (char *)name, (char *)ref};
    ch_attachment_name(out, "dingtalk", &a);
}

static void attachment_names(void **state) {
    (void)state;
    char out[CH_FILE_NAME_MAX + 1];
    name_of(out, CH_ATTACH_FILE, "report.pdf", "code1");
    assert_string_equal(out, "report.pdf");
    name_of(out, CH_ATTACH_FILE, "../../x", "code1");
    assert_string_equal(out, "x");
    name_of(out, CH_ATTACH_FILE, "a/b/../..", "abc");
    assert_string_equal(out, "dingtalk_abc.bin");
    name_of(out, CH_ATTACH_FILE, "..\\..\\win.txt", "abc");
    assert_string_equal(out, "win.txt");
    name_of(out, CH_ATTACH_FILE, "evil\nname.txt", "xx/../$$ABCDEFGHIJKLMNOP");
    assert_string_equal(out, "dingtalk_EFGHIJKLMNOP.bin");
    name_of(out, CH_ATTACH_IMAGE, NULL, "../..");
    assert_string_equal(out, "dingtalk_attachment.png");
    name_of(out, CH_ATTACH_FILE, ".hidden", "z_9");
    assert_string_equal(out, "dingtalk_z_9.bin");
    name_of(out, CH_ATTACH_FILE, "..", "q");
    assert_string_equal(out, "dingtalk_q.bin");
    name_of(out, CH_ATTACH_FILE, ".upload-abc.part", "q");
    assert_string_equal(out, "dingtalk_q.bin");
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    name_of(out, CH_ATTACH_FILE, longname, "q");
    assert_string_equal(out, "dingtalk_q.bin");
}

static void marker_names(void **state) {
    (void)state;
    char out[CH_MARKER_NAME_MAX + 1];
    ch_marker_name(out, "a]b\n[c");
    assert_string_equal(out, "a_b__c");
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ch_marker_name(out, longname);
    assert_int_equal(strlen(out), CH_MARKER_NAME_MAX);
    ch_marker_name(out, "\xff\xfe ok");
    assert_string_equal(out, "__ ok");
    /* a multi-byte character is never cut in half */
    char wide[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(wide, "\xc3\xa9"); /* 80 bytes */
    strcat(wide, "\xe2\x82\xac");
    ch_marker_name(out, wide);
    assert_int_equal(strlen(out), 80);
}

static void commands(void **state) {
    (void)state;
    const char *arg;
    assert_int_equal(ch_command_parse(&arg, "hello"), CH_CMD_NONE);
    assert_int_equal(ch_command_parse(&arg, "  /new"), CH_CMD_NEW);
    assert_int_equal(ch_command_parse(&arg, "/status please"), CH_CMD_STATUS);
    assert_string_equal(arg, "please");
    assert_int_equal(ch_command_parse(&arg, "/connect   ab12cd34"), CH_CMD_CONNECT);
    assert_string_equal(arg, "ab12cd34");
    assert_int_equal(ch_command_parse(&arg, "/models"), CH_CMD_MODELS);
    assert_int_equal(ch_command_parse(&arg, "/help"), CH_CMD_HELP);
    assert_int_equal(ch_command_parse(&arg, "/newer"), CH_CMD_UNKNOWN);
    assert_int_equal(ch_command_parse(&arg, "/"), CH_CMD_UNKNOWN);
    char code[CH_CODE_LEN + 1];
    assert_int_equal(ch_connect_code_parse(code, "abcdefgh"), 0);
    assert_string_equal(code, "ABCDEFGH");
    assert_int_equal(ch_connect_code_parse(code, "ABCDEFG"), FAWN_EINVAL);
    assert_int_equal(ch_connect_code_parse(code, "ABCDEFGHJ"), FAWN_EINVAL);
    assert_int_equal(ch_connect_code_parse(code, "ABCDEFG1"), FAWN_EINVAL); /* 1 is not in it */
    assert_int_equal(ch_connect_code_parse(code, "ABC'; --"), FAWN_EINVAL);
    assert_int_equal(ch_connect_code_parse(code, ""), FAWN_EINVAL);
}

static void stored_form(void **state) {
    (void)state;
    ch_inbound *m;
    assert_int_equal(ch_inbound_new(&m), 0);
    m->event_id = strdup("e1");
    m->chat_id = strdup("c1");
    m->sender_id = strdup("s1");
    m->text = strdup("hi");
    m->is_group = true;
    m->reply_ctx = strdup("{\"k\":1}");
    assert_int_equal(ch_inbound_add_attachment(m, CH_ATTACH_IMAGE, NULL, "r1"), 0);
    assert_int_equal(ch_inbound_add_attachment(m, CH_ATTACH_FILE, "a.txt", "r2"), 0);
    assert_int_equal(ch_inbound_add_attachment(m, CH_ATTACH_FILE, "a.txt", ""), FAWN_EINVAL);
    for (int i = 2; i < CH_ATTACHMENTS_MAX; i++)
        assert_int_equal(ch_inbound_add_attachment(m, CH_ATTACH_FILE, NULL, "r"), 0);
    assert_int_equal(ch_inbound_add_attachment(m, CH_ATTACH_FILE, NULL, "r"), FAWN_E2BIG);
    char *text;
    assert_int_equal(ch_inbound_to_json(&text, m), 0);
    ch_inbound *back;
    assert_int_equal(ch_inbound_from_json(&back, text, strlen(text)), 0);
    assert_string_equal(back->event_id, "e1");
    assert_true(back->is_group);
    assert_int_equal(back->n_attachments, CH_ATTACHMENTS_MAX);
    assert_null(back->attachments[0].name);
    assert_string_equal(back->attachments[1].name, "a.txt");
    assert_string_equal(back->reply_ctx, "{\"k\":1}");
    char key[CH_CHAT_KEY_MAX + 1];
    ch_chat_key(key, back);
    assert_string_equal(key, "g:c1:s1");
    free(text);
    ch_inbound_free(back);
    ch_inbound_free(m);
    const char *bad[] = {"{}", "{\"event_id\":\"e\",\"chat_id\":\"c\"}",
                         "{\"event_id\":\"e\",\"chat_id\":\"c\",\"sender_id\":7}",
                         "{\"event_id\":\"e\",\"chat_id\":\"c\",\"sender_id\":\"s\","
                         "\"attachments\":[{\"kind\":\"exe\",\"ref\":\"r\"}]}",
                         "[1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ch_inbound_from_json(&back, bad[i], strlen(bad[i])), FAWN_EINVAL);
}

static void dingtalk_payloads(void **state) {
    (void)state;
    const char *rich =
        "{\"msgId\":\"m1\",\"conversationId\":\"cid\",\"conversationType\":\"2\","
        "\"senderStaffId\":\"staff\",\"senderId\":\"x\",\"robotCode\":\"rc\",\"msgtype\":"
        "\"richText\",\"content\":{\"richText\":[{\"text\":\"see \"},{\"type\":\"picture\","
        "\"downloadCode\":\"d1\"},{\"text\":\"this\"},{\"pictureDownloadCode\":\"d2\"},7]}}";
    ch_inbound *m;
    assert_int_equal(dt_message_parse(&m, rich, strlen(rich)), 0);
    assert_string_equal(m->text, "see this");
    assert_true(m->is_group);
    assert_string_equal(m->sender_id, "staff");
    assert_int_equal(m->n_attachments, 2);
    assert_string_equal(m->attachments[1].name, "image_2.png");
    assert_string_equal(m->attachments[1].ref, "d2");
    ch_inbound_free(m);
    const char *file = "{\"msgId\":\"m2\",\"conversationId\":\"c\",\"senderId\":\"s\",\"msgtype\":"
                       "\"file\",\"content\":{\"downloadCode\":\"d\",\"fileName\":\"../a\"}}";
    assert_int_equal(dt_message_parse(&m, file, strlen(file)), 0);
    assert_string_equal(m->text, "");
    assert_false(m->is_group);
    assert_string_equal(m->attachments[0].name, "../a");
    ch_inbound_free(m);
    const char *bad[] = {"{\"msgtype\":\"text\"}",
                         "{\"msgId\":\"m\",\"conversationId\":\"c\",\"senderId\":\"s\","
                         "\"msgtype\":\"picture\",\"content\":{}}",
                         "{\"msgId\":\"m\",\"conversationId\":\"c\",\"senderId\":\"s\","
                         "\"msgtype\":\"richText\",\"content\":{\"richText\":\"x\"}}",
                         "nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(dt_message_parse(&m, bad[i], strlen(bad[i])), FAWN_EINVAL);
    /* a text past CH_TEXT_MAX is cut, not refused */
    static char longmsg[CH_TEXT_MAX + 400];
    static const char head[] = "{\"msgId\":\"m\",\"conversationId\":\"c\",\"senderId\":"
                               "\"s\",\"msgtype\":\"text\",\"text\":{\"content\":\"";
    memcpy(longmsg, head, sizeof head - 1);
    memset(longmsg + sizeof head - 1, 'a', CH_TEXT_MAX + 100);
    strcpy(longmsg + sizeof head - 1 + CH_TEXT_MAX + 100, "\"}}");
    assert_int_equal(dt_message_parse(&m, longmsg, strlen(longmsg)), 0);
    assert_int_equal(strlen(m->text), CH_TEXT_MAX);
    ch_inbound_free(m);
    dt_frame f;
    const char *ping = "{\"specVersion\":\"1.0\",\"type\":\"SYSTEM\",\"headers\":{\"topic\":"
                       "\"ping\",\"messageId\":\"id1\"},\"data\":\"{\\\"opaque\\\":1}\"}";
    assert_int_equal(dt_frame_parse(&f, ping, strlen(ping)), 0);
    assert_string_equal(f.type, "SYSTEM");
    assert_string_equal(f.topic, "ping");
    assert_string_equal(f.data, "{\"opaque\":1}");
    dt_frame_clear(&f);
    const char *nohead = "{\"type\":\"SYSTEM\",\"data\":\"\"}";
    assert_int_equal(dt_frame_parse(&f, nohead, strlen(nohead)), FAWN_EINVAL);
    const char *numdata = "{\"type\":\"EVENT\",\"headers\":{},\"data\":5}";
    assert_int_equal(dt_frame_parse(&f, numdata, strlen(numdata)), FAWN_EINVAL);
}

/* ---- store ---- */

typedef struct fx {
    char dir[64];
    store *s;
    int64_t alice, bob;
} fx;

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->dir, sizeof x->dir, "/tmp/fawn-ch-XXXXXX");
    if (!mkdtemp(x->dir))
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/fawn.db", x->dir);
    store_user u;
    if (test_store_open(&x->s, path) < 0 || store_user_create(x->s, &u, "alice", "h", "admin") < 0)
        return -1;
    x->alice = u.id;
    if (store_user_create(x->s, &u, "bob", "h", "user") < 0)
        return -1;
    x->bob = u.id;
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fx *x = *state;
    store_close(x->s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->dir);
    int r = system(cmd);
    free(x);
    return r;
}

static void codes_and_bindings(void **state) {
    fx *x = *state;
    int64_t now = 1000000, uid = 0;
    assert_int_equal(store_ch_code_add(x->s, "h1", "dingtalk", x->bob, now + 10, 2, now), 0);
    assert_int_equal(store_ch_code_add(x->s, "h2", "dingtalk", x->bob, now + 10, 2, now), 0);
    assert_int_equal(store_ch_code_add(x->s, "h3", "dingtalk", x->bob, now + 10, 2, now),
                     FAWN_E2BIG);
    assert_int_equal(store_ch_code_redeem(x->s, &uid, "h1", "feishu", now), FAWN_ENOENT);
    assert_int_equal(store_ch_code_redeem(x->s, &uid, "h1", "dingtalk", now), 0);
    assert_int_equal(uid, x->bob);
    assert_int_equal(store_ch_code_redeem(x->s, &uid, "h1", "dingtalk", now), FAWN_ENOENT);
    assert_int_equal(store_ch_code_redeem(x->s, &uid, "h2", "dingtalk", now + 10), FAWN_ENOENT);
    store_ch_binding b, found;
    assert_int_equal(store_ch_binding_put(x->s, &b, "dingtalk", "staff-1", x->bob), 0);
    assert_int_equal(b.user_id, x->bob);
    assert_int_equal(store_ch_binding_find(x->s, &found, "dingtalk", "staff-1"), 0);
    assert_string_equal(found.id, b.id);
    store_ch_binding *list;
    size_t n;
    assert_int_equal(store_ch_binding_list(x->s, &list, &n, x->bob), 0);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].platform_user_id, "staff-1");
    free(list);
    assert_int_equal(store_ch_binding_list(x->s, &list, &n, x->alice), 0);
    assert_int_equal(n, 0);
    free(list);
    assert_int_equal(store_ch_binding_delete(x->s, x->alice, b.id), FAWN_ENOENT);
    assert_int_equal(store_ch_binding_delete(x->s, x->bob, b.id), 0);
    assert_int_equal(store_ch_binding_find(x->s, &found, "dingtalk", "staff-1"), FAWN_ENOENT);
}

static void inbox_dedup_and_queue(void **state) {
    fx *x = *state;
    enum store_ch_inbox_add how;
    store_ch_inbox_req q = {.provider = "dingtalk",
                            .event_id = "e1",
                            .chat_key = "d:c",
                            .message = "{}",
                            .queue = true,
                            .max_queued = 2,
                            .now_ms = 5};
    assert_int_equal(store_ch_inbox_add(x->s, &how, &q), 0);
    assert_int_equal(how, STORE_CH_ADDED);
    assert_int_equal(store_ch_inbox_add(x->s, &how, &q), 0);
    assert_int_equal(how, STORE_CH_DUPLICATE);
    q.event_id = "e2";
    assert_int_equal(store_ch_inbox_add(x->s, &how, &q), 0);
    assert_int_equal(how, STORE_CH_ADDED);
    q.event_id = "e3";
    assert_int_equal(store_ch_inbox_add(x->s, &how, &q), 0);
    assert_int_equal(how, STORE_CH_FULL);
    q.event_id = "e3"; /* recorded: a redelivery of a refused one is not answered again */
    assert_int_equal(store_ch_inbox_add(x->s, &how, &q), 0);
    assert_int_equal(how, STORE_CH_DUPLICATE);
    store_ch_item *items;
    size_t n;
    assert_int_equal(store_ch_inbox_list(x->s, &items, &n, "queued", 10), 0);
    assert_int_equal(n, 2);
    int64_t first = items[0].seq;
    assert_string_equal(items[0].event_id, "e1");
    for (size_t i = 0; i < n; i++)
        store_ch_item_clear(&items[i]);
    free(items);
    bool claimed;
    assert_int_equal(store_ch_inbox_claim(x->s, &claimed, first), 0);
    assert_true(claimed);
    assert_int_equal(store_ch_inbox_claim(x->s, &claimed, first), 0);
    assert_false(claimed); /* once */
    assert_int_equal(store_ch_inbox_list(x->s, &items, &n, "claimed", 10), 0);
    assert_int_equal(n, 1);
    store_ch_item_clear(&items[0]);
    free(items);
    assert_int_equal(store_ch_inbox_finish(x->s, first, true), 0); /* back in the queue */
    assert_int_equal(store_ch_inbox_claim(x->s, &claimed, first), 0);
    assert_true(claimed);
    assert_int_equal(store_ch_inbox_finish(x->s, first, false), 0);
    char run_id[37];
    assert_int_equal(store_ch_inbox_find_run(x->s, run_id, first), 0);
    assert_string_equal(run_id, "");
    assert_int_equal(store_ch_inbox_prune(x->s, 6), 0);
    q.event_id = "e1"; /* pruned past the window: new again */
    assert_int_equal(store_ch_inbox_add(x->s, &how, &q), 0);
    assert_int_equal(how, STORE_CH_ADDED);
    assert_int_equal(store_ch_settings_set(x->s, "dingtalk", "{\"a\":\"b\"}"), 0);
    char *saved;
    assert_int_equal(store_ch_settings_get(x->s, &saved, "dingtalk"), 0);
    assert_string_equal(saved, "{\"a\":\"b\"}");
    free(saved);
    assert_int_equal(store_ch_settings_set(x->s, "dingtalk", NULL), 0);
    assert_int_equal(store_ch_settings_set(x->s, "dingtalk", NULL), FAWN_ENOENT);
    assert_int_equal(store_ch_settings_set(x->s, "DING", "{}"), FAWN_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attachment_names),
        cmocka_unit_test(marker_names),
        cmocka_unit_test(commands),
        cmocka_unit_test(stored_form),
        cmocka_unit_test(dingtalk_payloads),
        cmocka_unit_test_setup_teardown(codes_and_bindings, setup, teardown),
        cmocka_unit_test_setup_teardown(inbox_dedup_and_queue, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
