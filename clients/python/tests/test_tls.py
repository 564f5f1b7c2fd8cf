"""tls:// addresses, through a TLS-terminating relay (Python's ssl module) in front of a real
dlockd, with a CA and certificates made by the openssl command."""

import asyncio
import os
import shutil
import ssl
import subprocess
import threading
import unittest
from unittest import mock

import dlock
import dlock.aio
from rig import RigTest

TLS_ENV = ("DLOCK_TLS_CA", "DLOCK_TLS_CERT", "DLOCK_TLS_KEY")


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in directory d."""
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=dlock test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                     ("client", "extendedKeyUsage=clientAuth")):
        with open(os.path.join(d, who + ".ext"), "w") as f:
            f.write(ext + "\nkeyUsage=critical,digitalSignature\nbasicConstraints=CA:FALSE\n"
                    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
        openssl("req", *key, "-keyout", who + ".key", "-out", who + ".csr", "-subj", "/CN=dlock test " + who)
        openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", who + ".crt", "-days", "2", "-extfile", who + ".ext")
    return {k: os.path.join(d, v) for k, v in (("DLOCK_TLS_CA", "ca.crt"), ("DLOCK_TLS_CERT", "client.crt"),
                                               ("DLOCK_TLS_KEY", "client.key"))}


class Relay:
    """Terminates TLS (client certificate required) and relays to a dlockd, on an event loop
    of its own thread. `clients` lists the common names of the certificates it was shown."""

    def __init__(self, target_port, d):
        self.target = target_port
        self.paused = False  # new connections are closed at once
        self.clients = []
        self.conns = set()
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(os.path.join(d, "server.crt"), os.path.join(d, "server.key"))
        self.ctx.load_verify_locations(os.path.join(d, "ca.crt"))
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(lambda loop, ctx: None)  # refused handshakes are expected
        self.server = self.loop.run_until_complete(asyncio.start_server(self.relay, "127.0.0.1", 0, ssl=self.ctx))
        self.port = self.server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def relay(self, reader, writer):
        if self.paused:
            writer.transport.abort()
            return
        cert = writer.get_extra_info("peercert") or {}
        self.clients.append(dict(x[0] for x in cert.get("subject", ())).get("commonName"))
        r2, w2 = await asyncio.open_connection("127.0.0.1", self.target)
        self.conns.update((writer, w2))

        async def pump(r, w):
            try:
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                w.close()

        await asyncio.gather(pump(reader, w2), pump(r2, writer))
        self.conns.difference_update((writer, w2))

    def drop_all(self):
        """Cuts every relayed connection, and returns once it did."""
        async def cut():
            for w in list(self.conns):
                w.transport.abort()
        asyncio.run_coroutine_threadsafe(cut(), self.loop).result(10)

    def stop(self):
        if self.loop.is_running():
            self.drop_all()
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@unittest.skipIf(shutil.which("openssl") is None, "no openssl command to make certificates")
class Tls(RigTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.certs = make_certs(cls.rig.tmp)
        cls.relay = Relay(cls.a.port, cls.rig.tmp)
        cls.tls_addr = "tls://127.0.0.1:%d" % cls.relay.port

    @classmethod
    def tearDownClass(cls):
        cls.relay.stop()
        super().tearDownClass()

    def setUp(self):
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        for k in TLS_ENV:
            os.environ.pop(k, None)

    def tls_client(self, addrs=None, **kw):
        c = dlock.Client(addrs or self.tls_addr, ttl=3.0, **kw)
        self.addCleanup(c.close)
        return c

    def test_environment(self):
        os.environ.update(self.certs)
        c = self.tls_client(name="tls-env")
        with c.lock(self.n("x")) as h:
            (holder,) = self.holders(self.n("x"))
            self.assertEqual((holder["client"], holder["token"]), ("tls-env", h.token))
        self.assertIn("dlock test client", self.relay.clients)

    def test_arguments_and_reconnect(self):
        c = self.tls_client(["tls://127.0.0.1:1", self.tls_addr], tls_ca=self.certs["DLOCK_TLS_CA"],
                            tls_cert=self.certs["DLOCK_TLS_CERT"], tls_key=self.certs["DLOCK_TLS_KEY"])
        h = c.lock(self.n("x"))
        sid = c.session
        self.relay.drop_all()  # the session is resumed through a new TLS connection
        c.ping()
        self.assertEqual(c.session, sid)
        self.assertEqual([x["token"] for x in self.holders(self.n("x"))], [h.token])
        self.assertFalse(h.lost.is_set())
        h.unlock()

    def test_session_killed_while_away(self):
        """The client comes back to find its session ended: its resume gets ERR NOSESSION, the
        hold is reported lost, and it goes on in a new session."""
        d = self.rig.start_dlockd("--lock-lease", "60s")  # trusted for 34 s: only the resume can lose it
        relay = Relay(d.port, self.rig.tmp)
        self.addCleanup(relay.stop)
        os.environ.update(self.certs)
        c = dlock.Client("tls://127.0.0.1:%d" % relay.port, ttl=30.0)
        self.addCleanup(c.close)
        h = c.lock(self.n("x"))
        sid = c.session
        relay.paused = True
        relay.drop_all()
        self.assertEqual(self.rig.admin(d, "KILL " + sid), "OK")
        relay.paused = False
        self.assertTrue(h.lost.wait(15))
        self.assertEqual(h.lost_reason, "expired")
        c.ping()
        self.assertNotEqual(c.session, sid)

    def test_untrusted_server(self):
        os.environ["DLOCK_TLS_CERT"], os.environ["DLOCK_TLS_KEY"] = self.certs["DLOCK_TLS_CERT"], \
            self.certs["DLOCK_TLS_KEY"]
        with self.assertRaises(dlock.Error) as cm:  # the system's CAs do not know ours
            dlock.Client(self.tls_addr, connect_timeout=5)
        self.assertEqual(cm.exception.code, "CONN")
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(cm.exception))

    def test_no_client_certificate(self):
        with self.assertRaises(dlock.Error) as cm:
            dlock.Client(self.tls_addr, tls_ca=self.certs["DLOCK_TLS_CA"], connect_timeout=5)
        self.assertEqual(cm.exception.code, "CONN")

    def test_aio(self):
        os.environ.update(self.certs)

        async def main():
            async with dlock.aio.Client(self.tls_addr, name="tls-aio") as c:
                async with c.lock(self.n("x")) as h:
                    (holder,) = (await c.status(self.n("x")))["holders"]
                    self.assertEqual((holder["client"], holder["token"]), ("tls-aio", h.token))
        asyncio.run(asyncio.wait_for(main(), 60))


if __name__ == "__main__":
    unittest.main()
