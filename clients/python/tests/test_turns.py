"""The Python client against a real ``baton serve`` (``BATON_URL``), started by the test
command over SQLite and PostgreSQL: exclusion with fences across processes, a holder killed
and taken over after its lease, a lost lease stopping the work, timeouts, waits past the
server's ``--turn-wait``.

    BATON_URL=http://127.0.0.1:PORT python3 -m unittest discover -s tests
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import baton  # noqa: E402
from baton import _clock  # noqa: E402

URL = os.environ.get("BATON_URL", "")


def read(path):
    with open(path) as f:
        return f.read()


def fresh_key(name):
    return f"py/{name}/{uuid.uuid4().hex[:12]}"


HOLDER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
import baton
client = baton.Client()
key, log, turns = sys.argv[2], sys.argv[3], int(sys.argv[4])
for _ in range(turns):
    with client.turn(key, ttl=10, context=f"pid {os.getpid()}") as t:
        with open(log, "a") as f:
            f.write(f"start {t.fence}\n")
        time.sleep(0.05)
        with open(log, "a") as f:
            f.write(f"end {t.fence}\n")
"""

SLEEPER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import baton
t = baton.Client().turn(sys.argv[2], ttl=2).acquire()
with open(sys.argv[3], "w") as f:
    f.write(str(t.fence))
time.sleep(120)
"""


class Proxy:
    """A TCP forwarder that can turn into a black hole: it then takes bytes and answers
    nothing, as a cut network does."""

    def __init__(self, upstream, delay=0.0):
        host, port = upstream.split("//", 1)[1].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.black_hole = threading.Event()
        #: Seconds every answer is held back (a late reply).
        self.delay = delay
        #: Answers to drop: the request reached the server, the client's connection is closed.
        self.lose_replies = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            client, _ = self.listener.accept()
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        if self.black_hole.is_set():
            return self._swallow(client)
        server = socket.create_connection(self.upstream)
        threading.Thread(target=self._answer, args=(server, client), daemon=True).start()
        self._pipe(client, server)

    def _answer(self, server, client):
        if self.lose_replies > 0:
            first = server.recv(65536)
            if first:
                self.lose_replies -= 1
                for s in (client, server):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
                return
        self._pipe(server, client, self.delay)

    def _pipe(self, source, sink, delay=0.0):
        try:
            while True:
                data = source.recv(65536)
                if not data or self.black_hole.is_set():
                    break
                time.sleep(delay)
                sink.sendall(data)
        except OSError:
            pass
        if self.black_hole.is_set():
            return self._swallow(source)
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _swallow(self, conn):
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass
        conn.close()


@unittest.skipUnless(URL, "BATON_URL is not set: no server to test against")
class Turns(unittest.TestCase):
    def setUp(self):
        self.client = baton.Client(URL)
        self.dir = tempfile.mkdtemp()

    def spawn(self, script, *args):
        env = dict(os.environ, BATON_URL=URL)
        parent = os.path.dirname(HERE)
        return subprocess.Popen([sys.executable, "-c", script, parent, *args], env=env)

    def test_turns_exclude_each_other_across_processes_and_fences_rise(self):
        key, log = fresh_key("exclusion"), os.path.join(self.dir, "log")
        workers = [self.spawn(HOLDER, key, log, "3") for _ in range(4)]
        for worker in workers:
            self.assertEqual(worker.wait(timeout=120), 0)
        with open(log) as f:
            lines = [line.split() for line in f.read().splitlines()]
        self.assertEqual(len(lines), 24)
        fences = []
        for start, end in zip(lines[0::2], lines[1::2]):
            self.assertEqual((start[0], end[0]), ("start", "end"), "turns never overlap")
            self.assertEqual(start[1], end[1])
            fences.append(int(start[1]))
        self.assertEqual(fences, sorted(set(fences)), "fences rise with every grant")

    def test_a_holder_killed_is_taken_over_after_its_lease(self):
        key, held = fresh_key("killed"), os.path.join(self.dir, "held")
        sleeper = self.spawn(SLEEPER, key, held)
        deadline = time.time() + 60
        while not (os.path.exists(held) and read(held)):
            self.assertLess(time.time(), deadline, "the holder got its turn")
            time.sleep(0.05)
        os.kill(sleeper.pid, signal.SIGKILL)
        sleeper.wait()
        started = time.time()
        with self.client.turn(key, ttl=10, timeout=30) as t:
            self.assertGreater(t.fence, int(read(held)))
        self.assertLess(time.time() - started, 20, "taken over about a lease after the kill")

    def test_a_lease_cut_off_from_the_server_is_lost_before_anyone_else_holds(self):
        key, proxy = fresh_key("lost"), Proxy(URL)
        t = baton.Client(proxy.url).turn(key, ttl=2).acquire()
        proxy.black_hole.set()
        self.assertTrue(t.lost.wait(10), "the turn is lost once renewals cannot land")
        lost_at = _clock.now()
        with self.client.turn(key, ttl=10, timeout=30) as next_turn:
            granted_at = _clock.now()
            self.assertGreater(next_turn.fence, t.fence)
        self.assertLessEqual(lost_at, granted_at, "the work stopped before the next holder began")
        t.release()  # a lost turn is not released: nothing is sent, nothing hangs

    def test_a_grant_answered_too_late_is_lost_and_given_back(self):
        key, late = fresh_key("late"), Proxy(URL, delay=2.5)
        started = _clock.now()
        with self.assertRaises(baton.Lost):
            baton.Client(late.url).turn(key, ttl=2).acquire()
        self.assertGreater(_clock.now() - started, 2.0, "the answer came after the lease")
        # The key is free for the next: the late grant was never used, only given back.
        with self.client.turn(key, ttl=10, timeout=1) as t:
            self.assertGreater(t.fence, 0)

    def test_a_lost_answer_is_asked_again_as_the_same_ticket(self):
        key, lossy = fresh_key("lost-answer"), Proxy(URL)
        lossy.lose_replies = 1
        with baton.Client(lossy.url).turn(key, ttl=30) as t:
            self.assertEqual(lossy.lose_replies, 0, "the first answer was lost")
            self.assertTrue(self.client.check(key, t.fence)["holds"])
            with self.assertRaises(baton.TimedOut):
                self.client.turn(key, timeout=0.3).acquire()
        # No second ticket (a ghost would hold the key for its 30 s lease).
        with self.client.turn(key, timeout=2):
            pass

    def test_a_wait_past_its_timeout_raises_timed_out(self):
        key = fresh_key("timeout")
        with self.client.turn(key):
            with self.assertRaises(baton.TimedOut) as caught:
                self.client.turn(key, timeout=0.5).acquire()
            self.assertEqual(caught.exception.status, 408)

    def test_a_block_that_raises_ends_the_turn_as_failed(self):
        key = fresh_key("failed")
        with self.assertRaises(RuntimeError):
            with self.client.turn(key) as t:
                raise RuntimeError("the deploy broke")
        self.assertFalse(self.client.check(key, t.fence)["holds"])
        with self.client.turn(key, timeout=0) as again:
            self.assertGreater(again.fence, t.fence)

    def test_a_long_wait_resumes_and_is_renewed_before_use(self):
        key, got = fresh_key("wait"), []
        first = self.client.turn(key).acquire()
        waiter = threading.Thread(target=lambda: got.append(self.client.turn(key).acquire()))
        waiter.start()
        time.sleep(2.5)  # past the test server's --turn-wait of 1s: answered 202, resumed
        self.assertEqual(got, [])
        first.release()
        waiter.join(30)
        second = got[0]
        self.assertTrue(second.holds())
        self.assertGreater(second.fence, first.fence)
        self.assertTrue(self.client.check(key, second.fence, min_left="1s")["holds"])
        second.release()

    def test_bad_input_says_what_to_write(self):
        with self.assertRaises(baton.Error) as caught:
            self.client.turn(fresh_key("bad"), ttl="forever").acquire()
        self.assertEqual(caught.exception.status, 400)
        self.assertIn("ttl", caught.exception.message)
        # A URL nothing listens on is said at once, not retried.
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        url = "http://127.0.0.1:%d" % closed.getsockname()[1]
        closed.close()
        started = time.time()
        with self.assertRaises(baton.Error) as caught:
            baton.Client(url).turn(fresh_key("nowhere")).acquire()
        self.assertLess(time.time() - started, 5)
        self.assertIn("is baton serve running", caught.exception.message)


if __name__ == "__main__":
    unittest.main()
