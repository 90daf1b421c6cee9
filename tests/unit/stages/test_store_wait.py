import random

from crawler.config.settings import Settings
from crawler.stages.retry_policy import store_wait


def test_waits_grow_to_a_cap_below_the_visibility_timeout() -> None:
    s = Settings.from_env({}, visibility_timeout=40, task_time_limit=30)
    rng = random.Random(1)
    waits = [store_wait(k, s, rng) for k in range(12)]
    assert all(w is not None and 0 < w <= 10.0 for w in waits)  # a quarter of 40 s
    assert waits[0] is not None and waits[0] <= 1.5 and max(w for w in waits if w) == 10.0


def test_gives_up_once_the_waits_add_up_to_store_retry_for() -> None:
    s = Settings.from_env({}, store_retry_for=60.0)  # waits 1, 2, 4, 8, 16, 30: 61 s after six
    assert store_wait(5, s) is not None
    assert store_wait(6, s) is None
