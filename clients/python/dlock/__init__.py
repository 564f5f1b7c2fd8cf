"""dlock - the Python client of dlockd: fenced locks, semaphores and latches.

    import dlock

    with dlock.Client(name="billing") as c:          # $DLOCK_ADDR, else 127.0.0.1:7411
        with c.lock("invoices", wait=5) as h:
            write_invoices(fencing_token=h.token)

dlock.Client is the blocking client (any number of threads share one); dlock.aio.Client has
the same API for asyncio. The protocol is described in dlockd's proto/PROTOCOL.md.
"""

from ._proto import Busy, Error, Lost, Timeout, parse_addrs
from .client import Client, Hold, tls_context

__all__ = ["Client", "Hold", "Error", "Busy", "Timeout", "Lost", "parse_addrs", "tls_context"]
__version__ = "0.1.0"
