/* info.h - the INFO and /metrics documents. */
#ifndef DLOCKD_INFO_H
#define DLOCKD_INFO_H

struct dlockd;
struct evbuffer;

/* The INFO document as a JSON string (malloc'ed), one line. */
char *info_json(struct dlockd *d);
/* Appends the Prometheus text exposition of every metric. */
void info_metrics(struct dlockd *d, struct evbuffer *out);

#endif
