-- poke.lua: runs the purge and handoff of the prelude on the names of a
-- waiter when a lease in its way has run out with nobody releasing it.
-- Reply fields: OK retry-ms (-1 when nothing of another daemon is in the way).
return reply('OK', retry_after(S))
