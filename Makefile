# PeerMR Appliance. Quick start: `make run`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT    := DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get

# Flags for `make run`, e.g. make run ARGS="--port 9000".
ARGS ?=

.PHONY: run test test-postgres bench binary migration test-tools clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall when the dependencies change.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test,binary]"
	touch $@

run: $(VENV)/.installed
	$(BIN)/peermr serve $(ARGS)

# Debian packages the tests use as real peers: Chromium drives the browser tests (Playwright's own
# browser downloads are not used), coturn's client tools test the TURN server, Emscripten's emcc
# builds the WebAssembly module of the embind example (it works offline: Debian ships its cache) and
# Node runs the OpenID provider of the single sign-on tests. PostgreSQL, Redis and HAProxy are the
# engines of the tests past one machine, started by the tests themselves (tests/services.py).
test-tools:
	@command -v chromium >/dev/null 2>&1 && command -v turnutils_uclient >/dev/null 2>&1 && command -v emcc >/dev/null 2>&1 && \
		command -v redis-server >/dev/null 2>&1 && [ -x /usr/sbin/haproxy ] && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || \
		{ $(APT) update -qq && $(APT) install -y -qq chromium coturn emscripten postgresql redis-server haproxy >/dev/null; }
	@command -v npm >/dev/null 2>&1 || { $(APT) update -qq && $(APT) install -y -qq nodejs npm >/dev/null; }

# npm's oidc-provider (a certified OpenID provider) for the single sign-on tests, as pinned in its lock file.
tests/oidc/node_modules/.package-lock.json: tests/oidc/package.json tests/oidc/package-lock.json | test-tools
	npm ci --prefix tests/oidc --no-audit --no-fund --silent

# The suite mostly waits (sleeps, timeouts, subprocesses, browsers): its modules run side by side on
# xdist's workers, the browser modules one after the other on a worker of their own (tests/parallel.py).
TEST_WORKERS ?= 3

test: $(VENV)/.installed test-tools tests/oidc/node_modules/.package-lock.json
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -n $(TEST_WORKERS)

# The integration tests against a throwaway PostgreSQL cluster (installs Debian's postgresql if missing).
test-postgres: $(VENV)/.installed
	packaging/postgres-test.sh

# The benchmarks' references: Dask and Spark (which needs a Java runtime).
$(VENV)/.bench: pyproject.toml | $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[test,binary,bench]"
	@command -v java >/dev/null 2>&1 || { $(APT) update -qq && $(APT) install -y -qq default-jre-headless >/dev/null; }
	touch $@

bench: $(VENV)/.installed $(VENV)/.bench test-tools
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

# dist/peermr/ and its tarball; the build's own venv comes from packaging/requirements.lock (built with
# the Python of .venv).
binary: | $(BIN)/python
	PYTHON=$(BIN)/python packaging/build.sh

# New migration for a domain after changing its tables: make migration APP=accounts
migration: $(VENV)/.installed
	PICCOLO_CONF=appliance.piccolo_conf PEERMR_DATA_DIR=$$(mktemp -d) $(BIN)/piccolo migrations new $(APP) --auto

clean:
	rm -rf $(VENV) build dist .pytest_cache
