/* info.h - the INFO and /metrics documents. */
#ifndef DLOCKD_INFO_H
#define DLOCKD_INFO_H

struct dlockd;
struct evbuffer;

/* The INFO document as a JSON string (malloc'ed), one line. */
char *info_json(struct dlockd *d);
/* The admin /status document (malloc'ed): INFO's keys and "config", the
 * effective config with secrets masked (config_each). */
char *info_status(struct dlockd *d);
/* Appends the Prometheus text exposition of every metric. */
void info_metrics(struct dlockd *d, struct evbuffer *out);

#endif
