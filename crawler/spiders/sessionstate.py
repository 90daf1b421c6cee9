"""A job's session in Redis, shared by all its workers: the cookies, a generation number that
each successful login raises, whether the session is live, and the login lock.

Only cookies live here, under the job's own keys (so no job sees another's, and deleting the job
deletes them); credentials never do. Changes are scripts that compare the generation first, so
cookies a worker learnt under an ended session cannot leak into the next one, and many pages
seeing one session end cause one re-login.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from redis import Redis

from crawler import keys
from crawler.fetch.jar import MAX_COOKIES, Cookie, CookieJar
from crawler.redisconn import text

# KEYS: session, cookies. ARGV: generation, max cookies, now, then (key, cookie, expires) per
# cookie. Returns the cookies dropped for the bound, or -1 if the generation is not current.
_SAVE = """
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
if gen ~= ARGV[1] then return -1 end
local max, now, dropped = tonumber(ARGV[2]), tonumber(ARGV[3]), 0
for i = 4, #ARGV, 3 do
  local exp = tonumber(ARGV[i + 2])
  if exp > 0 and exp <= now then
    redis.call('HDEL', KEYS[2], ARGV[i])
  elseif redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 or redis.call('HLEN', KEYS[2]) < max then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  else
    dropped = dropped + 1
  end
end
return dropped
"""

# KEYS: session, cookies, lock. ARGV: lock token, then (key, cookie) per cookie. The login's
# cookies replace the old ones and the generation goes up; only the lock's holder may.
_LIVE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[2])
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'state', 'live')
return redis.call('HINCRBY', KEYS[1], 'gen', 1)
"""

# KEYS: session. ARGV: generation. Ends the session if it is still that generation and live.
_END = """
if (redis.call('HGET', KEYS[1], 'gen') or '0') == ARGV[1] and redis.call('HGET', KEYS[1], 'state') == 'live' then
  redis.call('HSET', KEYS[1], 'state', 'ended')
  return 1
end
return 0
"""

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Status:
    generation: int
    live: bool
    attempts: int  # logins tried so far, failed ones too


class SessionState:
    def __init__(self, redis: Redis, job: str, max_cookies: int = MAX_COOKIES) -> None:
        self.redis = redis
        self.job = job
        self.max_cookies = max_cookies
        self._keys = (keys.session(job), keys.session_cookies(job), keys.session_lock(job))

    def status(self) -> Status:
        gen, state, attempts = self.redis.hmget(self._keys[0], ["gen", "state", "attempts"])
        return Status(int(gen or 0), text(state or b"") == "live", int(attempts or 0))

    def jar(self) -> tuple[int, CookieJar]:
        """(generation, its cookies), read together."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(self._keys[0], "gen")
        pipe.hvals(self._keys[1])
        gen, raw = pipe.execute()
        cookies = (Cookie.decode(r) for r in raw)
        return int(gen or 0), CookieJar((c for c in cookies if c is not None), self.max_cookies)

    def save(self, generation: int, cookies: Iterable[Cookie], now: float) -> int:
        """Share cookies a response set; returns how many the bound dropped (-1: the session
        they belong to is over, so they were not kept)."""
        args: list[str | int | float] = [generation, self.max_cookies, now]
        for c in cookies:
            args += [c.key, c.encode(), c.expires]
        if len(args) == 3:
            return 0
        return int(self.redis.eval(_SAVE, 2, self._keys[0], self._keys[1], *args))

    def lock(self, ttl: float) -> str | None:
        """The login lock's token if this caller got it (it lapses after ``ttl`` seconds)."""
        token = secrets.token_hex(8)
        got = self.redis.set(self._keys[2], token, nx=True, px=max(1, int(ttl * 1000)))
        return token if got else None

    def locked(self) -> bool:
        return bool(self.redis.exists(self._keys[2]))

    def unlock(self, token: str) -> None:
        self.redis.eval(_UNLOCK, 1, self._keys[2], token)

    def attempt(self) -> int:
        """Count one login attempt; returns the attempts so far."""
        return int(self.redis.hincrby(self._keys[0], "attempts", 1))

    def live(self, token: str, jar: CookieJar) -> int:
        """The login holding ``token`` succeeded with ``jar``: returns the new generation (-1 if
        the lock lapsed meanwhile and another worker may be logging in)."""
        args: list[str] = [token]
        for c in jar:
            args += [c.key, c.encode()]
        return int(self.redis.eval(_LIVE, 3, *self._keys, *args))

    def end(self, generation: int) -> bool:
        """End the session of ``generation`` if it is still the live one; True if this call did."""
        return bool(self.redis.eval(_END, 1, self._keys[0], generation))
