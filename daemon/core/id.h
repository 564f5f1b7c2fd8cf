/* id.h - random ids: of a daemon, a session, a session's secret. */
#ifndef DLOCKD_ID_H
#define DLOCKD_ID_H

#include "dlockd.h"

/* Fills buf (DLOCKD_ID_LEN + 1 bytes) with a random hex id, from getrandom(2); fatal when it fails. */
void dlockd_random_id(char *buf);

#endif
