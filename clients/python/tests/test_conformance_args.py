"""The conformance tool's load arguments (tools/conformance.py, docs/routing-protocol.md §6)
without a server: --retry-limit and --backoff-max-ms (their defaults the Router's, integers 0
or more, anything else a usage error with exit status 2) reach the Router, and a multi-host
read-write shard DSN passes through unchanged; bench takes one side or both, side by side in
slices Router, direct, direct, Router."""
import contextlib
import importlib.util
import io
import os
import unittest

TOOL = os.path.join(os.path.dirname(__file__), os.pardir, "tools", "conformance.py")
spec = importlib.util.spec_from_file_location("conformance_tool", TOOL)
conformance = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conformance)

LOAD_ARGS = ["--routes", "host=h user=u dbname=d", "--shard", "a=host=h port=1 user=u", "--table", "t",
             "--sequence", "q", "--owners", "10", "--seconds", "1", "--log", os.devnull]
FAILOVER_DSN = ("host=127.0.0.1,127.0.0.1 port=5435,5436 user=postgres dbname=postgres "
                "target_session_attrs=read-write connect_timeout=2")


class RouterNotMade(Exception):
    pass


class LoadArgumentsTest(unittest.TestCase):
    def test_defaults_are_the_routers(self):
        args, _ = conformance.parse_load(LOAD_ARGS)
        self.assertEqual((args.retry_limit, args.backoff_max_ms), (20, 200))

    def test_given_values(self):
        args, shards = conformance.parse_load(
            LOAD_ARGS + ["--retry-limit", "200", "--backoff-max-ms", "0", "--shard", "b=" + FAILOVER_DSN])
        self.assertEqual((args.retry_limit, args.backoff_max_ms), (200, 0))
        self.assertEqual(shards["b"], FAILOVER_DSN)

    def test_bad_values_are_usage_errors(self):
        for flag in ("--retry-limit", "--backoff-max-ms"):
            for bad in ("-1", "1.5", "x", "", "+3", "٣"):
                with self.subTest(flag=flag, value=bad), contextlib.redirect_stderr(io.StringIO()):
                    with self.assertRaises(SystemExit) as exit_:
                        conformance.parse_load(LOAD_ARGS + [flag, bad])
                    self.assertEqual(exit_.exception.code, 2)

    def test_the_router_gets_them(self):
        made = {}

        def router(routes, shards, **kwargs):
            made.update(kwargs, shards=shards)
            raise RouterNotMade("the test ends here")

        saved = conformance.Router
        conformance.Router = router
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                status = conformance.load(LOAD_ARGS + ["--retry-limit", "7", "--backoff-max-ms", "1500",
                                                       "--shard", "b=" + FAILOVER_DSN])
        finally:
            conformance.Router = saved
        self.assertEqual(status, 1)  # (the routes could not be read)
        self.assertEqual((made["retry_limit"], made["backoff_max"]), (7, 1.5))
        self.assertEqual(made["shards"]["b"], FAILOVER_DSN)


class BenchSidesTest(unittest.TestCase):
    BENCH_ARGS = [a for i, a in enumerate(LOAD_ARGS) if a != "--log" and LOAD_ARGS[i - 1] != "--log"] + ["--mode", "tx"]

    def test_one_side_or_both(self):
        args, _ = conformance.parse_load(self.BENCH_ARGS + ["--side-by-side"], "conformance bench")
        self.assertEqual((args.side_by_side, args.direct), (True, False))
        with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit) as exit_:
            conformance.parse_load(self.BENCH_ARGS + ["--side-by-side", "--direct"], "conformance bench")
        self.assertEqual(exit_.exception.code, 2)
        self.assertIn("not allowed with argument", err.getvalue())
        self.assertEqual(args.warm_up_seconds, 0.5)
        args, _ = conformance.parse_load(self.BENCH_ARGS + ["--warm-up-seconds", "2.5"], "conformance bench")
        self.assertEqual(args.warm_up_seconds, 2.5)
        for bad in ("-1", "nan", "3601", "x"):
            with self.subTest(bad=bad), contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
                conformance.parse_load(self.BENCH_ARGS + ["--warm-up-seconds", bad], "conformance bench")

    def test_slices_go_router_direct_direct_router(self):
        # A clock that each operation moves on by 1/16 s: two operations a slice of 0.1 s.
        now = [100.0]
        done = []

        def one(direct):
            done.append(direct)
            now[0] += 0.0625

        self.assertEqual(conformance.SIDE_BY_SIDE, [False, True, True, False])
        measured = conformance.run_slices(one, conformance.SIDE_BY_SIDE, 1.0, clock=lambda: now[0])
        R, D = False, True
        self.assertEqual(done, [R, R, D, D, D, D, R, R, R, R, D, D, D, D, R, R])
        self.assertEqual(measured, {R: (8, 0.5), D: (8, 0.5)})

    def test_every_side_runs_even_in_no_time(self):
        done = []
        measured = conformance.run_slices(done.append, conformance.SIDE_BY_SIDE, 0)
        self.assertEqual(done, [False, True, True, False])
        self.assertEqual((measured[False][0], measured[True][0]), (2, 2))

    def test_an_error_ends_it(self):
        def down(_):
            raise RuntimeError("down")

        with self.assertRaisesRegex(RuntimeError, "down"):
            conformance.run_slices(down, [True], conformance.SLICE_SECONDS)


if __name__ == "__main__":
    unittest.main()
