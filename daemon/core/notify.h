/* notify.h - the systemd notify protocol (sd_notify), written out: one datagram per message. */
#ifndef DLOCKD_NOTIFY_H
#define DLOCKD_NOTIFY_H

#include <stdint.h>

/* Sends "KEY=value\n..." to $NOTIFY_SOCKET; does nothing without it. */
void notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The watchdog interval systemd asked for in ms (half of WATCHDOG_USEC), or 0. */
uint64_t notify_watchdog_ms(void);

#endif
