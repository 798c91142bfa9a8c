"""A user's login time while one address sprays random usernames, against her login
time alone: the ratio is what the throttle's per-address budget keeps near 1
(tests/admin/test_login_throttle.py asserts the functional part: at most the budget
of hashes is spent on the spray).

Runs in-process through Django's test Client (every middleware) with Django's PBKDF2
at its production iterations, six spraying threads behind one address, on the
database named by DATABASE_URL (migrated; it adds one user) and REDIS_URL's cache.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/durableruns_bench_login \\
        python benchmarks/login_spray.py [--spray 100] [--logins 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")


def _login(address: str, username: str, password: str) -> tuple[int, float]:
    from django.test import Client

    started = time.perf_counter()
    answer = Client(REMOTE_ADDR=address).post(
        "/login/", {"username": username, "password": password}
    )
    return answer.status_code, time.perf_counter() - started


def _logins(count: int) -> list[float]:
    times = []
    for _ in range(count):
        status, seconds = _login(f"10.1.{uuid.uuid4().int % 250}.8", "bench-carol", "carol-pw-1")
        assert status == 302, status
        times.append(seconds)
    return times


def _spray(total: int, address: str) -> list[int]:
    statuses: list[int] = []

    def spray(n: int) -> None:
        for _ in range(n):
            statuses.append(_login(address, f"guess-{uuid.uuid4().hex[:8]}", "wrong")[0])

    threads = [
        threading.Thread(target=spray, args=(total // 6 + (i < total % 6),)) for i in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spray", type=int, default=100)
    parser.add_argument("--logins", type=int, default=5)
    args = parser.parse_args()
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="bench-carol")
    user.set_password("carol-pw-1")
    user.save()
    from django.conf import settings

    budget = settings.DURABLERUNS_LOGIN_ADDRESS_MAX_FAILURES
    address = f"10.2.{uuid.uuid4().int % 250}.66"
    alone = _logins(args.logins)
    print(_line("login alone", alone, alone))
    # The address's budget is hashed (the price of the design); the rest is refused.
    for phase, count in (("hashed", budget), ("refused", args.spray - budget)):
        statuses: list[int] = []
        sprayer = threading.Thread(
            target=lambda n=count, out=statuses: out.extend(_spray(n, address))
        )
        sprayer.start()
        during = _logins(args.logins)
        sprayer.join()
        answers = f"{statuses.count(200)}x200 {statuses.count(429)}x429"
        print(_line(f"during {count} guesses ({phase}: {answers})", during, alone))


def _line(what: str, times: list[float], alone: list[float]) -> str:
    median = statistics.median(times)
    ratio = median / statistics.median(alone)
    return (
        f"{what:48} median {median * 1000:6.0f} ms  max {max(times) * 1000:6.0f} ms  x{ratio:.2f}"
    )


if __name__ == "__main__":
    main()
