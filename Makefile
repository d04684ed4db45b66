# Every target builds or refreshes .venv from the project's own files first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
COMPAT := tests/compat
NODE_STAMP := $(COMPAT)/node_modules/.installed
CPP_VENV := $(COMPAT)/cpp/.venv
CPP_STAMP := $(CPP_VENV)/.installed
PY5_VENV := $(COMPAT)/py5/.venv
PY5_STAMP := $(PY5_VENV)/.installed

.PHONY: all venv node compat-cpp compat-py5 chromium etcd demo test test-fast test-pure chaos lint bench bench-peers clean

all: test

# The install builds the compiled codecs (Cython) and generates the gRPC protocol modules in
# place, so their sources are inputs.
$(STAMP): pyproject.toml setup.py src/ferrymq/common/_endian.pxd \
		src/ferrymq/common/record/_crecord.pyx src/ferrymq/remoting/_cheader.pyx \
		src/ferrymq/common/record/crc32_fold.h src/ferrymq/store/_cindex.pyx \
		src/ferrymq/spark/_ccolumns.pyx \
		$(wildcard proto/apache/rocketmq/v2/*.proto)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	@touch $(STAMP)

# Bytecode written ahead for every server, client and Spark worker process the tests and the
# demo start (each would compile ferrymq's sources again where bytecode is not written, as
# with PYTHONDONTWRITEBYTECODE=1): about 0.4 s of CPU a process. Only changed files compile.
venv: $(STAMP)
	@$(PY) -m compileall -q src examples

$(NODE_STAMP): $(COMPAT)/package.json $(COMPAT)/package-lock.json
	cd $(COMPAT) && npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

node: $(NODE_STAMP)

# PyPI `rocketmq` (the RocketMQ C++ client) in a venv of its own: its module name clashes.
$(CPP_STAMP): $(COMPAT)/cpp/requirements.txt
	@test -x $(CPP_VENV)/bin/python || $(PYTHON) -m venv $(CPP_VENV)
	$(CPP_VENV)/bin/python -m pip install --quiet -r $(COMPAT)/cpp/requirements.txt
	@touch $(CPP_STAMP)

compat-cpp: $(CPP_STAMP)

# PyPI `rocketmq-python-client` (the official RocketMQ 5 SDK, gRPC) in a venv of its own: its
# generated protocol modules register the same descriptors as ferrymq's.
$(PY5_STAMP): $(COMPAT)/py5/requirements.txt
	@test -x $(PY5_VENV)/bin/python || $(PYTHON) -m venv $(PY5_VENV)
	$(PY5_VENV)/bin/python -m pip install --quiet -r $(COMPAT)/py5/requirements.txt
	@touch $(PY5_STAMP)

compat-py5: $(PY5_STAMP)

# Debian's headless-capable Chromium for the dashboard's browser tests (marker `browser`).
chromium:
	@command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium)

# Debian's etcd for the controller quorum tests (tests/etcd_cluster.py starts its own members).
etcd:
	@command -v etcd >/dev/null || (apt-get update && apt-get install -y --no-install-recommends etcd-server)

demo: venv
	$(PY) -m examples.pipeline.run

# Two workers, each test file on one of them (its module fixtures stay whole): most tests wait
# on real processes and sockets, so two files at a time keep both cores busy.
XDIST = -n 2 --dist loadfile

test: venv node compat-cpp compat-py5 chromium etcd
	$(PY) -m pytest -q $(XDIST) tests

test-fast: venv
	$(PY) -m pytest -q $(XDIST) tests -m "not spark and not compat and not slow and not browser"

# The fast suite once more on the pure-Python codec, the fallback of an install without the
# compiled one.
test-pure: venv
	FERRYMQ_NO_EXTENSIONS=1 $(PY) -m pytest -q $(XDIST) tests -m "not spark and not compat and not slow and not browser"

# Every replication mode under every fault schedule, several rounds each (tests/chaos); `make
# test` runs a short set of the same.
chaos: venv etcd
	FERRYMQ_CHAOS_LONG=1 $(PY) -m pytest -q tests/chaos -m chaos

lint: venv
	$(VENV)/bin/ruff check src tests bench examples tools
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --explicit-package-bases bench tools examples
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The e2e bench's peers: Redis, NATS JetStream and RabbitMQ from Debian, their clients from PyPI
# (pyproject.toml's bench extra). The bench installs whatever is missing itself too.
bench-peers: venv
	$(PY) -m bench.peer_setup

bench: venv compat-py5 bench-peers
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(COMPAT)/node_modules $(CPP_VENV) $(PY5_VENV) .pytest_cache .mypy_cache build
	rm -f src/ferrymq/common/record/_crecord.c src/ferrymq/common/record/_crecord*.so
	rm -f src/ferrymq/remoting/_cheader.c src/ferrymq/remoting/_cheader*.so
