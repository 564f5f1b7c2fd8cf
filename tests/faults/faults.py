#!/usr/bin/env python3
"""faults.py - fault injection for dlockd: runs clients doing lock + fenced read-modify-write
(and semaphore holds) against two dlockd daemons sharing one redis-server, while a seeded
nemesis pauses, kills, partitions and delays things; then checks the recorded history
(checker.py) and prints one line of figures per scenario.

    faults.py [--tier short|long] [--scenario NAME ...] [--duration S] [--seed N]
              [--out DIR] [--json FILE] [--markdown FILE] [--no-netns] [--list]

Environment: DLOCKD (path of dlockd), REDIS_SERVER (path of redis-server), PYTHON (for the
clients; default: this interpreter).

Network faults: as root, the whole run moves into a fresh network namespace (unshare --net,
gone when the run ends) and drops or rejects traffic with nftables rules on its loopback;
elsewhere (not root, no unshare or nft) the same faults go through the userspace proxy
(stall for drop, reset for reject). Latency and stalls always use the userspace proxy
(tc netem is not available everywhere).

Every process stamps CLOCK_MONOTONIC; the seed fixes the fault schedule (kinds, durations,
which daemon, which of the current holders); process timing still varies between runs.
Exit status: 0 when every scenario passed, 1 otherwise.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checker  # noqa: E402
from common import LineConn, Recorder, dlockd_ping, free_port, now_ns, redis_ping, wait_for  # noqa: E402
from sentinels import Sentinels  # noqa: E402

TTL_MS = 2000
HB_MS = TTL_MS // 3
LEASE_MS = 3000
NCLIENTS = 6
NDAEMONS = 2
LOCKS = "k0,k1"
SEM = "s0"
SEM_LIMIT = 2

# name: (nemeses, options, what it shows)
SCENARIOS = {
    "pause": (["pause"], {"expect_overlaps": True},
              "SIGSTOP of a lock holder for 1-3 x ttl, then SIGCONT (the GC pause)"),
    "kill-client": (["kill-client"], {"lock_delay_ms": 500},
                    "SIGKILL of a holder, restarted 0.3 s later (lock-delay 500ms)"),
    "kill-dlockd": (["kill-dlockd"], {"gap_s": (3.5, 5.0)},
                    "SIGKILL of one of the two dlockd, restarted 0.2-1 s later, every 3.5-5 s (a lock-lease and more)"),
    "kill-dlockd-resume": (["kill-dlockd"], {"gap_s": (1.5, 3.0), "resume_any": True},
                           "as kill-dlockd, but clients know both daemons and resume their sessions on "
                           "the other one (their holds kept)"),
    "kill-redis": (["kill-redis"], {}, "SIGKILL of redis-server without persistence, restarted empty"),
    "failover": (["failover"], {"sentinel": True, "gap_s": (5.0, 8.0)},
                 "Redis under Sentinel (1 master, 2 replicas, 3 sentinels): SIGKILL of the master, a replica "
                 "is promoted, the daemons follow and write their holds back"),
    "kill-redis-aof": (["kill-redis"], {"aof": True},
                       "SIGKILL of redis-server with appendonly yes (fsync everysec), restarted"),
    "pause-redis": (["pause-redis"], {}, "SIGSTOP of redis-server for 2 x ttl"),
    "partition-client": (["partition-client"], {},
                         "traffic between a holder and its dlockd dropped or rejected for 1-3 x ttl"),
    "partition-redis": (["partition-redis"], {},
                        "traffic between one dlockd and Redis dropped or rejected for 1-3 x ttl"),
    "latency": (["latency-redis", "latency-client", "stall-client", "stall-redis"], {"proxy": True},
                "userspace proxy: 20-400 ms latency on either path, stalls of a client or a dlockd's Redis"),
    "control": (["pause"], {"fencing": "off"},
                "as pause, with the store's fencing checks off: must show lost updates"),
    "control-writes-only": (["pause-until-taken"], {"fencing": "writes", "expect_lost": True},
                            "the store checks writes but not reads (the weaker rule); a holder is paused "
                            "until its lock is granted to another, then resumed: must show lost updates"),
    "pause-until-taken": (["pause-until-taken"], {},
                          "as control-writes-only, with the store fencing reads and writes: nothing lost"),
    "mixed": (["pause", "kill-client", "kill-dlockd", "kill-redis", "pause-redis", "partition-client",
               "partition-redis"], {}, "every nemesis above, one at a time, in seeded random order"),
}
TIERS = {
    # scenario list, seconds each
    "short": (["pause", "pause-until-taken", "kill-client", "kill-dlockd", "kill-dlockd-resume", "kill-redis",
               "kill-redis-aof", "failover", "pause-redis", "partition-client", "partition-redis", "latency", "control",
               "control-writes-only"], 16),
    "long": (["pause", "pause-until-taken", "kill-client", "kill-dlockd", "kill-dlockd-resume", "kill-redis",
              "kill-redis-aof", "failover", "pause-redis", "partition-client", "partition-redis", "latency", "control",
              "control-writes-only", "mixed"], 150),
}
# A reset made by a reject rule goes out through the same OUTPUT chain: without the flag test,
# the rule for the other direction would drop it, and "reject" would act as "drop".
REJECT = "tcp flags & rst == 0 reject with tcp reset"
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def log(msg):
    print("faults: " + msg, file=sys.stderr, flush=True)


def pdeathsig():
    """Child setup: die with the harness (no stray processes if it is killed)."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Net:
    """Drop/reject between two endpoints, with nftables (inside our namespace) or proxies."""

    def __init__(self, use_nft):
        self.use_nft = use_nft
        if use_nft:
            self.nft("add table inet dlkf")
            self.nft("add chain inet dlkf out { type filter hook output priority 0 ; policy accept ; }")

    @staticmethod
    def nft(cmd):
        subprocess.run(["nft"] + cmd.split(), check=True)

    def cut(self, rules):
        """rules: list of (match, action) with action 'drop' or 'reject with tcp reset'."""
        for match, action in rules:
            self.nft("add rule inet dlkf out %s %s" % (match, action))

    def heal(self):
        if self.use_nft:
            self.nft("flush chain inet dlkf out")


def netns_usable():
    """Run inside a new network namespace; True when lo is up and nft works there."""
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)
        subprocess.run(["nft", "add", "table", "inet", "dlkfprobe"], check=True, capture_output=True)
        subprocess.run(["nft", "delete", "table", "inet", "dlkfprobe"], check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


class Proc:
    def __init__(self, argv, out, env=None, cwd=None):
        self.argv, self.out, self.env, self.cwd = argv, out, env, cwd
        self.p = None
        self.paused = False

    def start(self):
        f = open(self.out, "ab")
        self.p = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=self.env, cwd=self.cwd, preexec_fn=pdeathsig)
        f.close()
        self.paused = False
        return self

    @property
    def pid(self):
        return self.p.pid if self.p else None

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.p.pid, sig)

    def pause(self):
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.signal(signal.SIGCONT)
        self.paused = False

    def kill(self):
        if self.p is None:
            return None
        if self.alive():
            self.resume()
            os.kill(self.p.pid, signal.SIGKILL)
        return self.p.wait()

    def stop(self, timeout=10.0, term=True):
        """SIGTERM (after SIGCONT) unless term is False (already sent); SIGKILL after timeout.
        Returns (status, killed)."""
        if self.p is None:
            return None, False
        if self.alive() and term:
            self.resume()
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout), False
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait(), True


class Scenario:
    def __init__(self, name, seed, duration, top, args, use_nft):
        self.name = name
        kinds, opts, self.desc = SCENARIOS[name]
        self.kinds, self.opts = kinds, opts
        self.seed, self.duration = seed, duration
        self.rng = random.Random("%s/%s" % (seed, name))
        self.dir = os.path.join(top, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(os.path.join(self.dir, "hist"))
        self.args = args
        self.use_nft = use_nft
        self.net = Net(use_nft) if use_nft else None
        self.proxy_mode = opts.get("proxy", False) or not use_nft
        self.fencing = opts.get("fencing", "fenced")
        self.lock_delay = opts.get("lock_delay_ms", 0)
        self.gap_s = opts.get("gap_s", (1.0, 2.5))  # between two faults
        self.nem = Recorder(os.path.join(self.dir, "nemesis.jsonl"))
        self.problems = []
        self.clients = {}   # id -> [Proc, gen, daemon, src]
        self.dlockd = []
        self.cpx = []       # client-path proxies (per daemon) and their control ports
        self.rpx = []       # redis-path proxies (per daemon)

    # --- processes
    def start(self):
        d = self.dir
        self.rport = free_port()
        self.sport = free_port()
        aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.opts.get("aof") else ["--appendonly", "no"]
        binds = ["127.0.0.1"] + ["127.0.0.%d" % (10 + i) for i in range(NDAEMONS)]
        self.topo = None
        if self.opts.get("sentinel"):
            self.redis = self.topo = Sentinels(d, self.args.redis_server, Proc).start()
        else:
            self.redis = Proc([self.args.redis_server, "--port", str(self.rport), "--bind"] + binds +
                              ["--dir", d, "--save", "", "--daemonize", "no"] + aof, os.path.join(d, "redis.log"))
            self.redis.start()
            wait_for(lambda: redis_ping(self.rport), 10, "redis-server")
        self.store = Proc([self.args.python, os.path.join(HERE, "store.py"), "--listen", "127.0.0.1:%d" % self.sport,
                           "--log", os.path.join(d, "store.jsonl"), "--mode", self.fencing],
                          os.path.join(d, "store.out")).start()
        wait_for(lambda: self.store_ping(), 10, "fenced store")
        for i in range(NDAEMONS):
            raddr = "127.0.0.%d:%d" % (10 + i, self.rport)
            if self.proxy_mode and not self.topo:
                lp, cp = free_port(), free_port()
                self.rpx.append((self.proxy(raddr, lp, cp, "rpx%d" % i), cp))
                raddr = "127.0.0.1:%d" % lp
            port = free_port()
            backend = self.topo.dlockd_args() if self.topo else ["--redis", raddr]
            argv = [self.args.dlockd, "--listen", "127.0.0.1:%d" % port] + backend + [
                    "--session-ttl", "%dms" % TTL_MS, "--lock-lease", "%dms" % LEASE_MS,
                    "--lock-delay", "%dms" % self.lock_delay, "--log-level", self.args.daemon_log_level]
            p = Proc(argv, os.path.join(d, "dlockd%d.log" % i)).start()
            self.dlockd.append([p, port])
            wait_for(lambda: dlockd_ping(port), 10, "dlockd %d" % i)
            if self.proxy_mode:
                lp, cp = free_port(), free_port()
                self.cpx.append((self.proxy("127.0.0.1:%d" % port, lp, cp, "cpx%d" % i), cp, lp))
        meta = dict(scenario=self.name, seed=self.seed, duration_s=self.duration, fencing=self.fencing,
                    ttl_ms=TTL_MS, heartbeat_ms=HB_MS, lock_lease_ms=LEASE_MS, lock_delay_ms=self.lock_delay,
                    sem_limit=SEM_LIMIT, locks=LOCKS, sem=SEM, clients=NCLIENTS, daemons=NDAEMONS,
                    netns=self.use_nft, proxy=self.proxy_mode, kinds=self.kinds)
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f)
        for j in range(NCLIENTS):
            self.clients["c%d" % j] = [None, -1, j % NDAEMONS, "127.0.1.%d" % (j + 1)]
            self.start_client("c%d" % j)

    def proxy(self, target, lport, cport, name):
        p = Proc([self.args.python, os.path.join(HERE, "proxy.py"), "--listen", "127.0.0.1:%d" % lport,
                  "--target", target, "--control", "127.0.0.1:%d" % cport],
                 os.path.join(self.dir, name + ".out")).start()
        wait_for(lambda: self.ctl(cport, "PING", quiet=True), 10, "proxy " + name)
        return p

    def ctl(self, cport, cmd, quiet=False):
        try:
            c = LineConn(("127.0.0.1", cport), timeout=1.0)
            try:
                return c.request(cmd, 2.0) == "OK"
            finally:
                c.close()
        except (OSError, EOFError, TimeoutError):
            if not quiet:
                self.problems.append("proxy control %d: %s failed" % (cport, cmd))
            return False

    def store_ping(self):
        try:
            c = LineConn(("127.0.0.1", self.sport), timeout=0.5)
        except OSError:
            return False
        try:
            return c.request("PING", 1.0) == "OK"
        except (OSError, EOFError, TimeoutError):
            return False
        finally:
            c.close()

    def start_client(self, cid):
        ent = self.clients[cid]
        ent[1] += 1
        daemon = ent[2]
        order = [daemon] + ([i for i in range(NDAEMONS) if i != daemon] if self.opts.get("resume_any") else [])
        addrs = ",".join("127.0.0.1:%d" % (self.cpx[i][2] if self.cpx else self.dlockd[i][1]) for i in order)
        argv = [self.args.python, os.path.join(HERE, "client.py"), "--id", cid, "--gen", str(ent[1]),
                "--daemon", str(daemon), "--dlockd", addrs,
                "--store", "127.0.0.1:%d" % self.sport, "--src", ent[3],
                "--hist", os.path.join(self.dir, "hist", "%s-%d.jsonl" % (cid, ent[1])),
                "--seed", str(self.seed), "--ttl-ms", str(TTL_MS), "--locks", LOCKS, "--sem", SEM,
                "--sem-limit", str(SEM_LIMIT)]
        ent[0] = Proc(argv, os.path.join(self.dir, "%s-%d.out" % (cid, ent[1]))).start()

    # --- who holds what
    def holders(self):
        """{client id: (held_ms, lock name)} of the clients that hold a lock now, from STATUS on every
        live daemon (empty when nobody can tell)."""
        out = {}
        for p, port in self.dlockd:
            if not p.alive():
                continue
            try:
                c = LineConn(("127.0.0.1", port), src="127.0.0.2", timeout=0.3)
            except OSError:
                continue
            try:
                for name in LOCKS.split(","):
                    rep = c.request("STATUS " + name, 1.0)
                    if rep.startswith("OK "):
                        st = json.loads(rep[3:])
                        for h in st.get("holders", []):
                            if h.get("client") in self.clients:
                                out[h["client"]] = (h.get("held_ms", 0), name)
                c.send("QUIT")
            except (OSError, EOFError, TimeoutError, ValueError):
                pass
            finally:
                c.close()
        return out

    def pick_victim(self, fresh_ms=100):
        """A client that holds a lock, preferably one granted less than fresh_ms ago (so the
        fault lands between its READ and its WRITE); else any client. Seeded choice."""
        best = []
        for _ in range(40):
            hs = {c: ms for c, ms in self.holders().items() if not self.clients[c][0].paused}
            fresh = sorted(c for c, (ms, _) in hs.items() if ms < fresh_ms)
            if fresh:
                return self.rng.choice(fresh)
            best = sorted(hs) or best
            time.sleep(0.025)
        if best:
            return self.rng.choice(best)
        return self.rng.choice(sorted(self.clients))

    # --- nemeses
    def fault(self, kind, scope, t0, **kw):
        kw.update(kind=kind, scope=scope, t0=t0, t1=now_ns())
        self.nem.rec(**kw)

    def sleep(self, s):
        time.sleep(max(0.0, s))

    def n_pause(self):
        cid = self.pick_victim()
        proc = self.clients[cid][0]
        dur = self.rng.uniform(1, 3) * TTL_MS / 1000
        t0 = now_ns()
        proc.pause()
        self.sleep(dur)
        proc.resume()
        self.fault("pause", "client", t0, client=cid, gen=self.clients[cid][1], ms=int(dur * 1000))

    def n_pause_until_taken(self):
        """Pauses a holder only until dlockd has granted its lock to another client, plus a
        moment for that one to READ, then resumes it: its WRITE lands between the new holder's
        READ and WRITE, the case a store that fences only writes gets wrong."""
        cid = self.pick_victim()
        proc = self.clients[cid][0]
        held = self.holders().get(cid)
        t0 = now_ns()
        proc.pause()
        deadline = time.monotonic() + 3 * TTL_MS / 1000
        taken = False
        while held and time.monotonic() < deadline and not taken:
            time.sleep(0.01)
            taken = any(n == held[1] for c, (_, n) in self.holders().items() if c != cid)
        self.sleep(0.03)
        proc.resume()
        self.fault("pause", "client", t0, client=cid, gen=self.clients[cid][1], until_taken=taken,
                   ms=(now_ns() - t0) // 1_000_000)

    def n_kill_client(self):
        cid = self.pick_victim()
        ent = self.clients[cid]
        t0 = now_ns()
        ent[0].kill()
        self.sleep(0.3)
        self.fault("kill-client", "client", t0, client=cid, gen=ent[1])
        self.start_client(cid)

    def n_kill_dlockd(self):
        i = self.rng.randrange(NDAEMONS)
        p, port = self.dlockd[i]
        down = self.rng.uniform(0.2, 1.0)
        t0 = now_ns()
        p.kill()
        self.sleep(down)
        p.start()
        wait_for(lambda: dlockd_ping(port), 10, "dlockd %d after restart" % i)
        self.fault("kill-dlockd", "daemon", t0, daemon=i, ms=int(down * 1000))

    def n_kill_redis(self):
        down = self.rng.uniform(0.2, 1.0)
        t0 = now_ns()
        self.redis.kill()
        self.sleep(down)
        self.redis.start()
        wait_for(lambda: redis_ping(self.rport), 10, "redis-server after restart")
        self.fault("kill-redis", "warned", t0, aof=bool(self.opts.get("aof")), ms=int(down * 1000))

    def n_failover(self):
        t0 = now_ns()
        ms, port = self.topo.fail_over()
        self.fault("failover", "warned", t0, ms=ms, master=port)

    def n_pause_redis(self):
        dur = 2 * TTL_MS / 1000
        t0 = now_ns()
        self.redis.pause()
        self.sleep(dur)
        self.redis.resume()
        self.fault("pause-redis", "warned", t0, ms=int(dur * 1000))

    def n_partition_client(self):
        cid = self.pick_victim()
        src, daemon = self.clients[cid][3], self.clients[cid][2]
        mode = self.rng.choice(["drop", "reject"])
        dur = self.rng.uniform(1, 3) * TTL_MS / 1000
        t0 = now_ns()
        if self.use_nft:
            port = self.dlockd[daemon][1]
            action = "drop" if mode == "drop" else REJECT
            self.net.cut([("ip saddr %s tcp dport %d" % (src, port), action),
                          ("ip daddr %s tcp sport %d" % (src, port), action)])
            self.sleep(dur)
            self.net.heal()
        else:
            cport = self.cpx[daemon][1]
            self.ctl(cport, ("STALL " if mode == "drop" else "REJECT ") + src)
            self.sleep(dur)
            self.ctl(cport, "HEAL " + src)
        self.fault("partition-client", "client", t0, client=cid, mode=mode, ms=int(dur * 1000),
                   via="nft" if self.use_nft else "proxy")

    def n_partition_redis(self):
        i = self.rng.randrange(NDAEMONS)
        mode = self.rng.choice(["drop", "reject"])
        dur = self.rng.uniform(1, 3) * TTL_MS / 1000
        t0 = now_ns()
        if self.use_nft and not self.rpx:
            addr = "127.0.0.%d" % (10 + i)
            action = "drop" if mode == "drop" else REJECT
            self.net.cut([("ip daddr %s tcp dport %d" % (addr, self.rport), action),
                          ("ip saddr %s tcp sport %d" % (addr, self.rport), action)])
            self.sleep(dur)
            self.net.heal()
        else:
            cport = self.rpx[i][1]
            self.ctl(cport, "STALL" if mode == "drop" else "REJECT")
            self.sleep(dur)
            self.ctl(cport, "HEAL")
        self.fault("partition-redis", "warned", t0, daemon=i, mode=mode, ms=int(dur * 1000),
                   via="nft" if self.use_nft and not self.rpx else "proxy")

    def n_latency_redis(self):
        i = self.rng.randrange(NDAEMONS)
        ms = self.rng.randint(20, 400)
        dur = self.rng.uniform(2, 5)
        t0 = now_ns()
        self.ctl(self.rpx[i][1], "DELAY %d" % ms)
        self.sleep(dur)
        self.ctl(self.rpx[i][1], "HEAL")
        self.fault("latency", "none", t0, path="dlockd-redis", daemon=i, delay_ms=ms, ms=int(dur * 1000))

    def n_latency_client(self):
        cid = self.rng.choice(sorted(self.clients))
        src, daemon = self.clients[cid][3], self.clients[cid][2]
        ms = self.rng.randint(20, 400)
        dur = self.rng.uniform(2, 5)
        t0 = now_ns()
        self.ctl(self.cpx[daemon][1], "DELAY %d %s" % (ms, src))
        self.sleep(dur)
        self.ctl(self.cpx[daemon][1], "HEAL %s" % src)
        self.fault("latency", "none", t0, path="client-dlockd", client=cid, delay_ms=ms, ms=int(dur * 1000))

    def n_stall_client(self):
        cid = self.pick_victim()
        src, daemon = self.clients[cid][3], self.clients[cid][2]
        dur = self.rng.uniform(1, 3) * TTL_MS / 1000
        t0 = now_ns()
        self.ctl(self.cpx[daemon][1], "STALL %s" % src)
        self.sleep(dur)
        self.ctl(self.cpx[daemon][1], "HEAL %s" % src)
        self.fault("stall-client", "client", t0, client=cid, ms=int(dur * 1000))

    def n_stall_redis(self):
        i = self.rng.randrange(NDAEMONS)
        dur = self.rng.uniform(1, 3) * TTL_MS / 1000
        t0 = now_ns()
        self.ctl(self.rpx[i][1], "STALL")
        self.sleep(dur)
        self.ctl(self.rpx[i][1], "HEAL")
        self.fault("stall-redis", "warned", t0, daemon=i, ms=int(dur * 1000))

    def run_nemesis(self):
        end = time.monotonic() + self.duration
        self.sleep(1.5)
        n = 0
        while time.monotonic() < end - 1.0:
            kind = self.rng.choice(self.kinds)
            getattr(self, "n_" + kind.replace("-", "_"))()
            n += 1
            self.sleep(min(self.rng.uniform(*self.gap_s), end - time.monotonic()))
        return n

    # --- the end
    def heal_all(self):
        if self.net:
            self.net.heal()
        for _, cp in self.rpx:
            self.ctl(cp, "HEAL")
        for _, cp, _ in self.cpx:
            self.ctl(cp, "HEAL")
        if self.redis.paused:
            self.redis.resume()
        for ent in self.clients.values():
            if ent[0].paused:
                ent[0].resume()

    def finish(self):
        d = self.dir
        self.heal_all()
        time.sleep(1.0)
        stuck = []
        for cid, ent in sorted(self.clients.items()):
            ent[0].signal(signal.SIGTERM)
        for cid, ent in sorted(self.clients.items()):
            st, killed = ent[0].stop(timeout=15.0, term=False)
            if killed:
                stuck.append(cid)
            elif st != 0:
                self.problems.append("client %s-%d exited with status %s (see %s-%d.out)" % (
                    cid, ent[1], st, cid, ent[1]))
        if stuck:
            self.problems.append("clients did not finish within 15 s of SIGTERM: " + ", ".join(stuck))
        try:
            c = LineConn(("127.0.0.1", self.sport), timeout=1.0)
            c.send("DUMP")
            dump = c.readline(10.0)
            c.close()
            with open(os.path.join(d, "store-dump.json"), "w") as f:
                f.write(dump or "")
        except (OSError, EOFError) as e:
            self.problems.append("fenced store DUMP failed: %s" % e)
        self.store.stop()
        for i, (p, _) in enumerate(self.dlockd):
            st, killed = p.stop(timeout=10.0)
            if killed:
                self.problems.append("dlockd %d did not exit within 10 s of SIGTERM" % i)
            elif st != 0:
                self.problems.append("dlockd %d exited with status %s on SIGTERM" % (i, st))
            with open(os.path.join(d, "dlockd%d.log" % i), errors="replace") as f:
                text = f.read()
            for m in SANITIZER_MARKS:
                if m in text:
                    self.problems.append("dlockd %d log has a sanitizer report (%s)" % (i, m))
        for p, _ in self.rpx:
            p.stop()
        for p, _, _ in self.cpx:
            p.stop()
        self.redis.stop()

    def kill_everything(self):
        procs = [ent[0] for ent in self.clients.values()] + [p for p, _ in self.dlockd]
        procs += [p for p, _ in self.rpx] + [p for p, _, _ in self.cpx]
        procs += [getattr(self, "store", None), getattr(self, "redis", None)]
        for p in procs:
            if p is not None:
                try:
                    p.kill()
                except OSError:
                    pass
        if self.net:
            try:
                self.net.heal()
            except (OSError, subprocess.CalledProcessError):
                pass


def run_scenario(name, seed, duration, top, args, use_nft):
    sc = Scenario(name, seed, duration, top, args, use_nft)
    t0 = time.monotonic()
    try:
        sc.start()
        sc.run_nemesis()
        sc.finish()
    except Exception as e:  # a harness failure is a failed scenario, with what we have
        sc.problems.append("harness: %s: %s" % (type(e).__name__, e))
        sc.kill_everything()
        import traceback
        traceback.print_exc()
    res = checker.check(sc.dir)
    res["description"] = sc.desc
    res["wall_s"] = round(time.monotonic() - t0, 1)
    res["network_faults_via"] = "nftables in a network namespace" if use_nft else "userspace proxy"
    informational = SCENARIOS[name][1].get("informational", False)
    if SCENARIOS[name][1].get("expect_lost"):
        bad = [] if res["lost_acknowledged"] else [
            "no lost acknowledged write with writes-only fencing: the test cannot tell the rules apart"]
        bad += ["%s = %d" % (k, res[k]) for k in ("overlap_violations", "sem_limit_violations",
                                                  "token_regressions") if res[k]]
    else:
        bad = [] if informational else checker.verdict(res, control=name == "control")
    if SCENARIOS[name][1].get("expect_overlaps") and not (res["overlaps_seen"] and res["stale_writes_rejected"]):
        bad.append("no overlap seen or no stale write rejected: the pauses did not hit a holder (test ineffective)")
    bad += sc.problems
    res["failures"] = bad
    res["passed"] = not bad
    return res


def fmt_ms(d):
    if d.get("p50") is None:
        return "-"
    return "%d/%d/%d" % (d["p50"], d["p99"], d["max"])


def table(results):
    hdr = ("scenario", "ops", "faults", "stale acc", "tok regr", "lost ack", "overlap viol", "overlaps seen",
           "stale rej", "sem viol", "jeop lost/ovl", "release p50/p99/max ms", "result")
    rows = [hdr]
    for r in results:
        rel = r["release_ms"] if r["release_samples"] else r["daemon_release_ms"]
        rows.append((r["scenario"], str(r["operations"]), str(r["faults_injected"]), str(r["stale_writes_accepted"]),
                     str(r["token_regressions"]), str(r["lost_acknowledged"]), str(r["overlap_violations"]),
                     str(r["overlaps_seen"]), str(r["stale_writes_rejected"]), str(r["sem_limit_violations"]),
                     "%d/%d" % (r["grants_in_jeopardy_lost"], r["jeopardy_grant_overlaps"]),
                     fmt_ms(rel), "ok" if r["passed"] else "FAIL"))
    w = [max(len(row[i]) for row in rows) for i in range(len(hdr))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(row)) for row in rows)


def markdown(results, cmdline):
    out = ["| scenario | operations | faults | stale_writes_accepted | token_regressions | lost_acknowledged | "
           "overlap violations | overlaps seen | stale writes rejected | sem limit violations | "
           "grants in jeopardy: lost / overlapped | release p50 / p99 / max (ms) | wall (s) | result |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in results:
        if r["release_samples"]:
            rel = "%s (n=%d)" % (fmt_ms(r["release_ms"]), r["release_samples"])
        elif r["daemon_release_samples"]:
            rel = "%s (n=%d, dead daemon)" % (fmt_ms(r["daemon_release_ms"]), r["daemon_release_samples"])
        else:
            rel = "-"
        out.append("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d / %d | %s | %.0f | %s |" % (
            r["scenario"], r["operations"], r["faults_injected"], r["stale_writes_accepted"], r["token_regressions"],
            r["lost_acknowledged"], r["overlap_violations"], r["overlaps_seen"], r["stale_writes_rejected"],
            r["sem_limit_violations"], r["grants_in_jeopardy_lost"], r["jeopardy_grant_overlaps"], rel,
            r["wall_s"], "pass" if r["passed"] else "FAIL"))
    out.append("")
    out.append("Command: `%s`" % cmdline)
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tier", choices=sorted(TIERS), default="short")
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    ap.add_argument("--duration", type=float)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FAULTS_SEED", "7")))
    ap.add_argument("--out", default=None, help="directory for the runs (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories of passing runs")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--markdown", help="write the figures table to this file")
    ap.add_argument("--no-netns", action="store_true", help="do not use a network namespace and nftables")
    ap.add_argument("--daemon-log-level", default="info", choices=("debug", "info", "warn", "error"))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        for n, (k, o, desc) in SCENARIOS.items():
            print("%-20s %s" % (n, desc))
        return 0
    args.dlockd = os.environ.get("DLOCKD", os.path.join(HERE, "..", "..", "daemon", "dlockd"))
    args.redis_server = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or "redis-server"
    args.python = os.environ.get("PYTHON") or sys.executable
    if not os.access(args.dlockd, os.X_OK):
        log("no dlockd at %s (set DLOCKD)" % args.dlockd)
        return 2

    use_nft = False
    if not args.no_netns and not args.inner:
        if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("nft") and shutil.which("ip"):
            probe = subprocess.run(["unshare", "--net", "--", "true"], capture_output=True)
            if probe.returncode == 0:
                cmd = ["unshare", "--net", "--", sys.executable, os.path.abspath(__file__), "--inner"] + sys.argv[1:]
                return subprocess.call(cmd)
            log("unshare --net does not work here (%s); network faults go through the userspace proxy"
                % probe.stderr.decode().strip())
        else:
            log("not root, or no unshare/nft/ip: network faults go through the userspace proxy")
    if args.inner:
        use_nft = netns_usable()
        if not use_nft:
            log("nftables does not work in the new network namespace: using the userspace proxy")

    names = args.scenario or TIERS[args.tier][0]
    duration = args.duration or TIERS[args.tier][1]
    top = args.out or tempfile.mkdtemp(prefix="dlockd-faults.")
    os.makedirs(top, exist_ok=True)
    cmdline = "tests/faults/faults.py --tier %s --seed %d%s%s" % (
        args.tier, args.seed, "".join(" --scenario " + n for n in (args.scenario or [])),
        " --duration %g" % args.duration if args.duration else "")
    log("seed %d, %d scenario(s) of %gs, runs in %s, network faults via %s" % (
        args.seed, len(names), duration, top, "nftables (network namespace)" if use_nft else "userspace proxy"))
    results = []
    for n in names:
        log("scenario %s: %s" % (n, SCENARIOS[n][2]))
        r = run_scenario(n, args.seed, duration, top, args, use_nft)
        results.append(r)
        log("scenario %s: %s in %ss: ops=%d faults=%d stale_accepted=%d token_regressions=%d lost_ack=%d "
            "overlap_violations=%d overlaps_seen=%d stale_rejected=%d release(p50/p99/max)=%s" % (
                n, "ok" if r["passed"] else "FAILED", r["wall_s"], r["operations"], r["faults_injected"],
                r["stale_writes_accepted"], r["token_regressions"], r["lost_acknowledged"], r["overlap_violations"],
                r["overlaps_seen"], r["stale_writes_rejected"],
                fmt_ms(r["release_ms"] if r["release_samples"] else r["daemon_release_ms"])))
        for b in r["failures"]:
            log("  FAIL: " + b)
        for dline in r["details"][:10]:
            log("  " + dline)
        if r["passed"] and not args.keep and not args.out:
            shutil.rmtree(os.path.join(top, n), ignore_errors=True)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(seed=args.seed, tier=args.tier, duration_s=duration, command=cmdline,
                           results=results), f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results, cmdline))
    failed = [r["scenario"] for r in results if not r["passed"]]
    if failed:
        log("FAILED: %s (runs kept in %s)" % (", ".join(failed), top))
        return 1
    if not args.out and not args.keep:
        shutil.rmtree(top, ignore_errors=True)
    log("all %d scenario(s) passed" % len(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
