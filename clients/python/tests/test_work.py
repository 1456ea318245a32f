"""Run once, jobs and shared values through a real ``baton serve`` (``BATON_URL``): one run
of ten duplicate processes, attempts spent to dead, a worker running jobs with retries, values
compared and swapped by racing writers, fences, and the asyncio client.

    BATON_URL=http://127.0.0.1:PORT python3 -m unittest discover -s tests
"""

import asyncio
import os
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
import baton.aio  # noqa: E402

URL = os.environ.get("BATON_URL", "")

DUPLICATE = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
import baton
key, log = sys.argv[2], sys.argv[3]

def charge(turn):
    with open(log, "a") as f:
        f.write(f"ran {turn.fence}\n")
    time.sleep(0.3)

result = baton.Client().once(key, charge, ttl=10)
with open(log, "a") as f:
    f.write(f"verdict {result.verdict}\n")
"""


def fresh(name):
    return f"py/{name}/{uuid.uuid4().hex[:12]}"


@unittest.skipUnless(URL, "BATON_URL is not set: no server to test against")
class Work(unittest.TestCase):
    def setUp(self):
        self.client = baton.Client(URL)

    def test_of_ten_duplicate_processes_one_runs(self):
        key, log = fresh("once"), os.path.join(tempfile.mkdtemp(), "log")
        env = dict(os.environ, BATON_URL=URL)
        parent = os.path.dirname(HERE)
        procs = [
            subprocess.Popen([sys.executable, "-c", DUPLICATE, parent, key, log], env=env)
            for _ in range(10)
        ]
        for proc in procs:
            self.assertEqual(proc.wait(timeout=120), 0)
        with open(log) as f:
            lines = f.read().splitlines()
        self.assertEqual(len([line for line in lines if line.startswith("ran ")]), 1, lines)
        verdicts = sorted(line.split()[1] for line in lines if line.startswith("verdict "))
        self.assertEqual(verdicts, ["run"] + ["skipped"] * 9)
        self.assertEqual(self.client.once(key, lambda t: 1).verdict, "skipped")

    def test_failed_runs_spend_attempts_until_the_key_is_dead(self):
        key = fresh("dead")

        def fail(turn):
            raise RuntimeError("the card was declined")

        for _ in range(2):
            with self.assertRaises(RuntimeError):
                self.client.once(key, fail, max_attempts=2)
        with self.assertRaises(baton.Dead):
            self.client.once(key, fail, max_attempts=2)
        with self.assertRaises(baton.OutOfOrder):
            self.client.once(fresh("steps"), lambda t: None, seq=2)

    def test_a_worker_runs_jobs_retrying_failures(self):
        key, runs, lock = fresh("jobs"), [], threading.Lock()
        for n in range(3):
            self.client.submit(key, {"n": n}, id=f"job-{n}", max_attempts=3, backoff=0.1)

        def handle(run):
            with lock:
                runs.append((run.params["n"], run.attempt, run.fence))
            if run.params["n"] == 1 and run.attempt == 1:
                raise RuntimeError("flaky")

        ran = self.client.worker([key], handle, wait=5, max_jobs=4)
        self.assertEqual(ran, 4)
        self.assertEqual(sorted((n, a) for n, a, _ in runs), [(0, 1), (1, 1), (1, 2), (2, 1)])
        fences = [f for _, _, f in runs]
        self.assertEqual(fences, sorted(set(fences)), "fences rise with every run")
        for n in range(3):
            self.assertEqual(self.client.job(key, f"job-{n}")["state"], "succeeded")
        self.assertEqual(self.client.wait_job(key, "job-1", timeout=5)["state"], "succeeded")

    def test_values_are_compared_and_swapped_by_racing_writers(self):
        name, values = fresh("counter"), self.client.values
        self.assertIsNone(values.get(name))
        values.set(name, "0", if_absent=True)
        with self.assertRaises(baton.PreconditionFailed):
            values.set(name, "0", if_absent=True)

        def add(times):
            for _ in range(times):
                while True:
                    read = values.get(name)
                    try:
                        values.set(name, str(int(read.value) + 1), if_version=read.version)
                        break
                    except baton.PreconditionFailed:
                        continue

        writers = [threading.Thread(target=add, args=(5,)) for _ in range(4)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        self.assertEqual(values.get(name).value, "20", "no update was lost")

        fenced = fresh("fenced")
        values.set(fenced, "new", fence=9)
        with self.assertRaises(baton.StaleFence):
            values.set(fenced, "old", fence=8)
        self.assertEqual(values.get(fenced).value, "new")
        values.delete(fenced)
        self.assertIsNone(values.get(fenced))

    def test_the_asyncio_client(self):
        async def main():
            client = baton.aio.Client(URL)
            key = fresh("aio")
            async with client.turn(key, ttl=10) as t:
                self.assertTrue(t.holds())
                fence = t.fence

            async def work(turn):
                await asyncio.sleep(0.01)
                return turn.fence

            result = await client.once(fresh("aio-once"), work)
            self.assertTrue(result.ran)
            name = fresh("aio-value")
            version = await client.values.set(name, "1")
            self.assertEqual((await client.values.get(name)).version, version)
            return fence

        self.assertGreater(asyncio.run(main()), 0)


if __name__ == "__main__":
    unittest.main()
