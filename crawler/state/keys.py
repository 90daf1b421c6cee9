"""Every Redis key the crawler uses, named in one place (the bottom layer: imports nothing from
``crawler``). A job's keys share the hash tag ``{job}`` so one script may touch any of them on a
Redis Cluster; keys of no job (``c:jobs``, nodes, the beat lock) have no tag, and the wake lists
share one (``WAKE``).

Lua scripts spell the per-job names too where they build keys from data (a host's queue, a
shard's ready set): those take the job's ``prefix`` in ARGV, and the names here and in the
scripts (``crawler.frontier.lua``, ``crawler.dedup.neardup``) must agree.
"""

from __future__ import annotations

import hashlib

JOBS = "c:jobs"  # ids of jobs that may have work to dispatch
ALL_JOBS = "c:jobs:all"  # every job submitted, scored by when (newest last); purge removes it
PERIODIC = "c:periodic"  # ids of periodic jobs, for the beat's cycle check
BEAT_LOCK = "c:beat:lock"  # held by the one beat allowed to send periodic tasks
BEAT_TICKS = "c:beat:ticks"  # cycle checks run, for status and tests
NODES = "c:nodes"  # node name -> its latest heartbeat figures (crawler.state.nodes)
NODE_FETCHED = "c:nodes:fetched"  # node name -> pages it has fetched
SHARDS_DOWN = "c:shards:down"  # shards whose hosts their backups serve (crawler.frontier.liveshards)


def prefix(job: str) -> str:
    """What every key of the job starts with."""
    return f"c:{{{job}}}:"


def role_prefix(job: str, role: str) -> str:
    """What the keys of one part of the job that no frontier script touches start with: a hash
    tag of their own, so on a Redis Cluster one job's memory and commands spread over several
    masters (the Bloom filter, the near-duplicate index, fetched bodies in ``BODY_SLOTS`` parts).
    Each part's script touches its own tag only."""
    return f"c:{{{job}~{role}}}:"


BODY_SLOTS = 16  # tags fetched bodies are spread over
# The job's meta field saying how its Bloom filter and near-duplicate index are laid out. A job
# without it was submitted before they had tags of their own (``role_prefix``): it keeps them
# under its own tag for life, resets included, so a job running across an upgrade loses nothing
# it has seen. "2": both under tags of their own; "3": the near-duplicate index's bands each
# under one more (``neardup_band_prefix``).
LAYOUT_FIELD = "layout"
LAYOUT = "3"
BANDS_APART = "3"  # the first layout whose near-duplicate bands have tags of their own


# The job's meta field naming the parts its frontier is split into (``frontier_part``), comma
# separated: absent, the frontier's records are under the job's own tag, as they always were.
PARTS_FIELD = "fparts"
PART_FIELD = "part"  # set in the meta copy of each part, so its scripts know the job is split
# In a job's record on a Redis Cluster: the names of its near-duplicate index's band tags, by band
# (comma-separated, ``neardup_band_prefix``'s ``band``), chosen to fall on the masters in turn.
BAND_TAGS_FIELD = "ndtags"


def frontier_part(job: str, part: int | str) -> str:
    """The id whose keys (``prefix``) hold one part of a split frontier: the host queues, ready
    sets, leases, retries, host records, exact seen hash, spill, counters and a copy of the status
    of the hosts of one shard, under a hash tag of their own (``c:{job~s2}:``, or ``c:{job~s2.5}:``
    for a name chosen to put the part on a given master: ``crawler.frontier.core.place_parts``),
    so on a Redis Cluster one job's frontier spreads over the masters and each script touches one
    part. Every helper here taking a job builds that part's key from this id. ``part``: the
    part's name, or its shard for the name ``s<shard>``."""
    return f"{job}~{part}" if isinstance(part, str) else f"{job}~s{part}"


def part_names(raw: str) -> list[str]:
    """The part names a job's ``PARTS_FIELD`` holds (a count stands for ``s0`` .. ``s<count-1>``)."""
    return [f"s{p}" for p in range(int(raw))] if raw.isdigit() else raw.split(",")


def job_pattern(job: str) -> str:
    """A SCAN pattern matching every key of the job: its own tag's and its parts' (``role_prefix``)."""
    return "c:{" + job + "[}~]*"


# -- the job's own records (crawler.jobs) --

def meta(job: str) -> str:
    return prefix(job) + "meta"


def counters(job: str) -> str:
    return prefix(job) + "cnt"


def store_error(job: str) -> str:
    """The job's store error while it lasts (crawler.state.store_errors)."""
    return prefix(job) + "storeerr"


def robots_wait(job: str) -> str:
    """``"<origin> <why>"`` scored by when its URLs may ask for its robots.txt again: origins whose
    robots.txt could not be had (pruned as they come due)."""
    return prefix(job) + "robwait"


def cycle(job: str, number: int | str) -> str:
    """Start, end and counters of one cycle of a periodic job."""
    return prefix(job) + f"cyc:{number}"


# -- the frontier (crawler.frontier; record formats in crawler.frontier.records) --

def seen(job: str) -> str:
    """url -> shortest depth found at (or a mark: stored, over budget, skipped)."""
    return prefix(job) + "seen"


def redirect_claims(job: str) -> str:
    """For a job with the exact seen hash: "<target> <page>" -> "1" or "0", the answer each page
    redirected to a target got when it claimed it (``crawler.dedup.seenset``), until the page is
    stored. A Bloom job keeps them in its filter's memo ``REDIRECTS``."""
    return prefix(job) + "rdc"


REDIRECTS = "rd"  # the Bloom filter memo's token for redirect targets (never a lease token's form)


HOST_QUEUE = "q:"  # a host's queue is prefix + HOST_QUEUE + host


def host_queue(job: str, host: str) -> str:
    return prefix(job) + HOST_QUEUE + host


def host_queue_pattern(job: str) -> str:
    """A SCAN pattern matching every host queue of the job."""
    return prefix(job) + HOST_QUEUE + "*"


def ready(job: str, shard: int) -> str:
    """A shard's hosts with queued URLs, scored by when each may next be fetched."""
    return prefix(job) + f"ready:{shard}"


def leases(job: str) -> str:
    """url -> lease value (``records.Lease``)."""
    return prefix(job) + "lease"


def lease_expiry(job: str) -> str:
    """Leased URLs scored by when their lease expires."""
    return prefix(job) + "lexp"


def query_variants(job: str, shape: str) -> str:
    """Digests of the URLs admitted under one query shape of one host (``crawler.dedup.variants``);
    ``shape`` is already a digest."""
    return prefix(job) + "qv:" + shape


def retries(job: str) -> str:
    """``records.Retry`` members scored by when they are due."""
    return prefix(job) + "retry"


def host_inflight(job: str) -> str:
    """host -> requests in flight."""
    return prefix(job) + "inf"


def ip_inflight(job: str) -> str:
    """ip key -> requests in flight to hosts on that address."""
    return prefix(job) + "ipinf"


def host_ip(job: str) -> str:
    """host -> the address it last answered from."""
    return prefix(job) + "ip"


IP_WAIT = "ipwait:"


def ip_wait(job: str, ipkey: str) -> str:
    """``records.IpWait`` members: hosts waiting for a slot of address ``ipkey``."""
    return prefix(job) + IP_WAIT + ipkey


def ip_wait_pattern(job: str) -> str:
    return prefix(job) + IP_WAIT + "*"


def host_next(job: str) -> str:
    """host -> the earliest time it may be fetched again."""
    return prefix(job) + "next"


def host_delays(job: str) -> str:
    """host -> its current delay, where it differs from the job's (adaptive politeness)."""
    return prefix(job) + "delay"


def host_overrides(job: str) -> str:
    """host -> ``"<delay> <per_host>"`` an operator set for it (``-`` for either left to the job)."""
    return prefix(job) + "ovr"


def host_fetched(job: str) -> str:
    """host -> pages fetched from it (for the hosts table of status, the API and the console)."""
    return prefix(job) + "hostf"


def host_errors(job: str) -> str:
    """host -> fetches from it that ended in an error."""
    return prefix(job) + "hoste"


def job_log(job: str) -> str:
    """The job's central log: a capped stream of its warnings, errors and events (crawler.state.joblog)."""
    return prefix(job) + "log"


def host_admitted(job: str) -> str:
    """host -> URLs admitted (the per-host page budget)."""
    return prefix(job) + "hostn"


def spill_staged(job: str) -> str:
    """URLs over their host's Redis queue cap, on their way to the store's frontier table:
    ``"<seq> <host> <entry>"`` scored by when they were staged (crawler.frontier.spill)."""
    return prefix(job) + "spill"


def spill_seq(job: str) -> str:
    """host -> the sequence number of its last URL sent to the store (never reused)."""
    return prefix(job) + "spseq"


def spill_refilled(job: str) -> str:
    """host -> the sequence number of its last URL brought back from the store into its queue."""
    return prefix(job) + "spref"


def spill_lock(job: str) -> str:
    """Held while a refill task for the job is on its way or running."""
    return prefix(job) + "splock"


def pending_links(job: str) -> str:
    """Link batches on their way to dedup, scored by when to send them again."""
    return prefix(job) + "pend"


def pending_link_bodies(job: str) -> str:
    """token -> the links of a pending batch (JSON)."""
    return prefix(job) + "pendb"


def pending_parts(job: str, token: str) -> str:
    """Parts of a big link batch admitted so far."""
    return prefix(job) + f"pendc:{token}"


def body(job: str, token: str, url: str) -> str:
    """A page's body under a key of its own, as fetch tasks kept them before ``body_batch``
    (still read, for messages from then)."""
    # Keyed by URL, not position: one dispatch token is shared by several fetch tasks. Spread
    # over BODY_SLOTS tags by the URL's digest: bodies are most of a crawl's bytes in flight.
    digest = hashlib.blake2b(url.encode(), digest_size=8).digest()
    return role_prefix(job, f"b{digest[0] % BODY_SLOTS}") + f"b:{token}:{digest.hex()}"


def body_batch(job: str, token: str) -> str:
    """A fetch task's bodies: one hash per lease token, a field per page (``body_field``), so a
    task's pages cost one write and one expiry. Spread over BODY_SLOTS tags by the token."""
    digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
    return role_prefix(job, f"b{digest[0] % BODY_SLOTS}") + f"bb:{token}"


def body_field(url: str) -> str:
    return hashlib.blake2b(url.encode(), digest_size=8).hexdigest()


def body_ref(job: str, token: str, url: str) -> str:
    """Where a page's body waits, as messages name it: ``<body_batch>#<body_field>``."""
    return f"{body_batch(job, token)}#{body_field(url)}"


def split_body_ref(ref: str) -> tuple[str, str] | None:
    """(hash, field) of a ``body_ref``; None for a key of its own (``body``)."""
    key, sep, field = ref.rpartition("#")
    # "bb:" right after the hash tag: a job id may hold "#" or ":bb:" itself.
    if not sep or not key.rpartition("}:")[2].startswith("bb:"):
        return None
    return key, field


def sitemaps(job: str) -> str:
    """Origins whose sitemaps the job has queued already."""
    return prefix(job) + "sitemaps"


# One hash tag for every wake list: a dispatcher blocks on several at once (its shards' and its
# own), which a Redis Cluster allows only within one slot.
WAKE = "c:{wake}:"


def wake(shard: int | str) -> str:
    """A shard's wake list: pushed when it may have work, its dispatchers block on it."""
    return f"{WAKE}{shard}"


def wake_one(dispatcher: str) -> str:
    """One dispatcher's own wake list (pushed when it is told to stop)."""
    return f"{WAKE}d:{dispatcher}"


# -- dedup (crawler.dedup) --

BLOOM = "bf"  # the Bloom filter's part (``role_prefix``)


def bloom_prefix(job: str, legacy: bool = False) -> str:
    """What the Bloom filter's keys start with; ``legacy``: those of a filter made before it had a
    tag of its own (under the job's), which its job keeps using (``crawler.dedup.bloom``)."""
    return prefix(job) if legacy else role_prefix(job, BLOOM)


def bloom_meta(job: str, legacy: bool = False) -> str:
    return bloom_prefix(job, legacy) + "bloom"


def bloom_segment(job: str, layer: int | str, segment: int | str, legacy: bool = False) -> str:
    return bloom_prefix(job, legacy) + f"bf:{layer}:{segment}"


def bloom_memo(job: str, token: str, legacy: bool = False) -> str:
    return bloom_prefix(job, legacy) + f"bm:{token}"


SIMHASH_BAND = "sh:"  # every key of the near-duplicate index starts so (crawler.dedup.neardup)
NEARDUP = "nd"  # the near-duplicate index's part (``role_prefix``)


def neardup_prefix(job: str, legacy: bool = False) -> str:
    """What the near-duplicate index's keys start with (its script builds them from it): its
    counter and page records, and its bands in layout "2"; ``legacy``: an index made before it
    had a tag of its own, as ``bloom_prefix``."""
    return prefix(job) if legacy else role_prefix(job, NEARDUP)


def neardup_band_prefix(job: str, band: int | str) -> str:
    """What the keys of one band of the near-duplicate index start with (layout "3" on): a tag
    per band, so the index's lookups spread over a cluster's masters."""
    return role_prefix(job, f"{NEARDUP}{band}")


def neardup_band_mark(job: str, band: int | str) -> str:
    """The number whose share of band ``band`` was forgotten last (a bounded index on a cluster)."""
    return neardup_band_prefix(job, band) + "sh:f"


def neardup_band_epoch(job: str, band: int | str) -> str:
    """The count of resets (``simhash_epoch``) band ``band``'s mark belongs to (a cluster)."""
    return neardup_band_prefix(job, band) + "sh:e"


SIMHASH_BUCKET_BITS = 7  # a band key holds 2**7 band values, one hash field each
SIMHASH_PAGES_PER_KEY = 128  # pages per list of the index's page records


def simhash_band(job: str, band: int | str, bucket: int | str) -> str:
    """Band ``band`` of an unbounded near-duplicate index of today's layout (under the band's own
    tag), for band values ``bucket << SIMHASH_BUCKET_BITS`` on: a hash of band value's low bits
    -> the pages having it."""
    return neardup_band_prefix(job, band) + f"{SIMHASH_BAND}{band}:{bucket}"


def simhash_pages(job: str, bucket: int | str) -> str:
    """Records ("hi lo url") of the near-duplicate index's pages ``bucket * SIMHASH_PAGES_PER_KEY``
    on, in the order they were numbered."""
    return neardup_prefix(job) + f"{SIMHASH_BAND}d:{bucket}"


def simhash_band_pattern(job: str, legacy: bool = False) -> str:
    """A SCAN pattern matching every key of the near-duplicate index (its counter too, but in
    ``legacy``), whichever tags it has (``neardup_prefix``, ``neardup_band_prefix``)."""
    return prefix(job) + SIMHASH_BAND + "*" if legacy else "c:{" + job + "~" + NEARDUP + "*"


def simhash_seq(job: str, legacy: bool = False) -> str:
    """The near-duplicate index's page counter (earlier page = original)."""
    return neardup_prefix(job, legacy) + "shseq"


def simhash_epoch(job: str) -> str:
    """How many times the index was reset (a periodic job's cycles), which a reset keeps: on a
    cluster, an add held up past a reset is known by it (layout "3" on)."""
    return neardup_prefix(job) + SIMHASH_BAND + "e"


def simhash_mark(job: str, legacy: bool = False) -> str:
    """The number whose share of the index's records (and, on one Redis, its bands) was
    forgotten last."""
    return neardup_prefix(job, legacy) + SIMHASH_BAND + "f"


# -- rendering (crawler.render) --

def render_decisions(job: str) -> str:
    """host -> ``yes`` or ``no``: whether render=auto renders the host's pages (absent: sampling)."""
    return prefix(job) + "render"


def render_stats(job: str) -> str:
    """``<host>|<field>`` -> counts behind the decisions: pages compared, pages that gained,
    pages fetched since the last check."""
    return prefix(job) + "renderst"


# -- sessions (crawler.spiders.sessionstate) --

def session(job: str) -> str:
    """The job's session: its generation, whether it is live, login attempts so far."""
    return prefix(job) + "sess"


def session_cookies(job: str) -> str:
    """The session's cookies: cookie key -> the cookie (``crawler.fetch.jar.Cookie``) sealed with
    the workers' key (``crawler.config.secretbox``)."""
    return prefix(job) + "jar"


def session_lock(job: str) -> str:
    """Held by the one worker logging the job in."""
    return prefix(job) + "login"


def session_all(job: str) -> tuple[str, str, str]:
    """Every key of the job's session, deleted when the job ends (``crawler.jobs.stop``, and the
    frontier's ``done_check`` in ``scripts/helpers.lua``, which spells the same names)."""
    return session(job), session_cookies(job), session_lock(job)


# -- fetch --

def robots(origin: str, scope: str) -> str:
    """A parsed robots.txt, shared by the jobs of one network policy ``scope``."""
    return f"c:robots:{scope}:{origin}"


def delivery(task_id: str) -> str:
    return f"c:deliv:{task_id}"
