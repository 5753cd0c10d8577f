/* The platforms the channel layer knows (ch_layer.h): one line per
 * adapter file. A static library links an adapter only when it is named
 * here. */
#include "channels/ch_layer.h"

const ch_provider *const ch_providers[] = {
    &ch_provider_dingtalk,
    &ch_provider_feishu,
    NULL,
};
