"""A job's session in Redis, shared by all its workers: the cookies, a generation number that
each successful login raises, whether the session is live, and the login lock.

Only cookies live here, under the job's own keys (so no job sees another's), each sealed with the
workers' key (``crawler.config.secretbox``: Fernet, never in the clear; the hash field, the cookie's
domain, path and name, stays readable so the scripts can replace and bound cookies); credentials
never do. The keys go when the job ends (stopped, failed, finished, or a periodic job's cycle),
and lapse after ``SESSION_TTL`` seconds unused as a backstop; no script writes them once the job
has ended. Changes are scripts that compare the generation first, so cookies a worker learnt
under an ended session cannot leak into the next one, and many pages seeing one session end cause
one re-login.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from redis import Redis

from crawler.config.secretbox import SecretBox, require_box
from crawler.fetch.jar import MAX_COOKIES, Cookie, CookieJar
from crawler.state import keys
from crawler.state.conn import text

SESSION_TTL = 86400  # seconds a session nobody reads or writes is kept (a backstop: the job's end deletes it)

# A job whose status is one of these has ended (a periodic one waits for its next cycle): its
# session is deleted and nothing may write it again.
_OVER = "local st = redis.call('HGET', KEYS[#KEYS], 'status')\n" \
        "if st == 'done' or st == 'stopped' or st == 'waiting' then return -2 end\n"

# KEYS: session, cookies, meta. ARGV: generation, max cookies, now, ttl (ms), then (key, sealed
# cookie, expires) per cookie. Returns the cookies dropped for the bound, -1 if the generation is
# not current, -2 if the job has ended.
_SAVE = _OVER + """
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
if gen ~= ARGV[1] then return -1 end
local max, now, dropped = tonumber(ARGV[2]), tonumber(ARGV[3]), 0
for i = 5, #ARGV, 3 do
  local exp = tonumber(ARGV[i + 2])
  if exp > 0 and exp <= now then
    redis.call('HDEL', KEYS[2], ARGV[i])
  elseif redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 or redis.call('HLEN', KEYS[2]) < max then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  else
    dropped = dropped + 1
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return dropped
"""

# KEYS: session, cookies, lock, meta. ARGV: lock token, ttl (ms), then (key, sealed cookie) per
# cookie. The login's cookies replace the old ones and the generation goes up; only the lock's
# holder may, and only while the job runs (-2 once it has ended).
_LIVE = _OVER + """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[2])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'state', 'live')
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return gen
"""

# KEYS: session, meta. ARGV: ttl (ms). Counts one login attempt.
_ATTEMPT = _OVER + """
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
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

# KEYS: cookies. ARGV: (key, value) per cookie that did not open: removed unless rewritten since.
_FORGET = """
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return 0
"""


@dataclass(frozen=True)
class Status:
    generation: int
    live: bool
    attempts: int  # logins tried so far, failed ones too


class SessionState:
    """The job's session in Redis, its cookies sealed with ``box`` (default: this worker's key;
    NoSessionKey if it has none)."""

    def __init__(self, redis: Redis, job: str, max_cookies: int = MAX_COOKIES, box: SecretBox | None = None,
                 ttl: float = SESSION_TTL) -> None:
        self.redis = redis
        self.job = job
        self.max_cookies = max_cookies
        self.box = require_box() if box is None else box
        self.ttl_ms = max(1, int(ttl * 1000))
        self._keys = (keys.session(job), keys.session_cookies(job), keys.session_lock(job))
        self._meta = keys.meta(job)
        self.unreadable = 0  # cookies the last ``jar`` read could not open (another key, tampered)

    def status(self) -> Status:
        gen, state, attempts = self.redis.hmget(self._keys[0], ["gen", "state", "attempts"])
        return Status(int(gen or 0), text(state or b"") == "live", int(attempts or 0))

    def jar(self) -> tuple[int, CookieJar]:
        """(generation, its cookies), read together (and kept another ``ttl``). A cookie that
        does not open is left out, removed from Redis, and counted in ``unreadable``."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(self._keys[0], "gen")
        pipe.hgetall(self._keys[1])
        pipe.pexpire(self._keys[0], self.ttl_ms)
        pipe.pexpire(self._keys[1], self.ttl_ms)
        gen, raw, _, _ = pipe.execute()
        cookies, bad = [], []
        for field, sealed in raw.items():
            opened = self.box.open(sealed)
            cookie = Cookie.decode(opened) if opened is not None else None
            if cookie is None:
                bad += [field, sealed]
            else:
                cookies.append(cookie)
        self.unreadable = len(bad) // 2
        if bad:
            self.redis.eval(_FORGET, 1, self._keys[1], *bad)
        return int(gen or 0), CookieJar(cookies, self.max_cookies)

    def save(self, generation: int, cookies: Iterable[Cookie], now: float) -> int:
        """Share cookies a response set; returns how many the bound dropped (-1: the session
        they belong to is over, or the job is, so they were not kept)."""
        args: list[str | int | float | bytes] = [generation, self.max_cookies, now, self.ttl_ms]
        for c in cookies:
            args += [c.key, self.box.seal(c.encode().encode()), c.expires]
        if len(args) == 4:
            return 0
        return max(-1, int(self.redis.eval(_SAVE, 3, self._keys[0], self._keys[1], self._meta, *args)))

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
        """Count one login attempt; returns the attempts so far (-2: the job has ended, log in
        no more)."""
        return int(self.redis.eval(_ATTEMPT, 2, self._keys[0], self._meta, self.ttl_ms))

    def live(self, token: str, jar: CookieJar) -> int:
        """The login holding ``token`` succeeded with ``jar``: returns the new generation (-1 if
        the lock lapsed meanwhile and another worker may be logging in, -2 if the job has
        ended)."""
        args: list[str | int | bytes] = [token, self.ttl_ms]
        for c in jar:
            args += [c.key, self.box.seal(c.encode().encode())]
        return int(self.redis.eval(_LIVE, 4, *self._keys, self._meta, *args))

    def end(self, generation: int) -> bool:
        """End the session of ``generation`` if it is still the live one; True if this call did."""
        return bool(self.redis.eval(_END, 1, self._keys[0], generation))
