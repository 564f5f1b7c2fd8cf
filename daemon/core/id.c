/* id.c - random ids, below everything that names things (sessions, the daemon itself). */
#include <sys/random.h>

#include "id.h"
#include "log.h"

void dlockd_random_id(char *buf)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[DLOCKD_ID_LEN / 2];

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        fatal("getrandom");
    for (size_t i = 0; i < sizeof(raw); i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15];
    }
    buf[DLOCKD_ID_LEN] = '\0';
}
