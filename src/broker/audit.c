/* One audit line per brokered call. */
#include <stdio.h>
#include <string.h>

#include "broker/broker_internal.h"

/* An audit line: ids, names and numbers only, well under this. */
#define BROKER_AUDIT_LINE_MAX 1024

void broker_audit(int audit_fd, const audit_record *r) {
    char line[BROKER_AUDIT_LINE_MAX];
    const sbx_holding *w = r->who;
    int n = snprintf(
        line, sizeof line,
        "broker call user=%s thread=%s run=%s sandbox=%s cli=%s subcommand=\"%s\" args=%zu "
        "exit=%d ms=%lld stdin=%zu stdout=%zu stderr=%zu truncated=%s%s%s%s\n",
        w && w->user[0] ? w->user : "-", w && w->thread[0] ? w->thread : "-",
        w && w->scope[0] ? w->scope : "-", r->sandbox_id[0] ? r->sandbox_id : "-",
        r->cli ? r->cli : "-", r->rule ? r->rule->text : "-", r->argc, r->exit_code,
        (long long)r->ms, r->in_bytes, r->out_bytes, r->err_bytes,
        (r->flags & BROKER_STDOUT_TRUNCATED) && (r->flags & BROKER_STDERR_TRUNCATED)
            ? "stdout,stderr"
        : (r->flags & BROKER_STDOUT_TRUNCATED) ? "stdout"
        : (r->flags & BROKER_STDERR_TRUNCATED) ? "stderr"
                                               : "no",
        r->refusal ? " refused=\"" : "", r->refusal ? r->refusal : "", r->refusal ? "\"" : "");
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    line[len - 1] = '\n';
    log_info("broker", "%.*s", (int)len - 1, line + 7);
    if (audit_fd >= 0 && fawn_write_all(audit_fd, line, len) < 0)
        log_warn("broker", "the audit file could not be written: %s", fawn_errmsg());
}
