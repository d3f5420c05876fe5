# Two commands do all the set-up on a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: setup browser demo airflow test lint docs bench bench-partitions bench-windows bench-rollup bench-page bench-latency clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m airflow_provider_wm.demo

# A real Airflow (its four components, SQLite, LocalExecutor) with the example DAGs and the Watermarks page on
# 127.0.0.1:8080; it prints where to log in.
airflow: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m airflow_provider_wm.demo.standalone

# The browser test (tests/integration/test_airflow_ui.py) drives Debian's chromium: installed when missing.
browser:
	@command -v chromium >/dev/null || apt-get install -y -q chromium >/dev/null \
		|| { apt-get update -q && apt-get install -y -q chromium >/dev/null; } \
		|| { echo "make test needs Debian's chromium: apt-get install chromium (as root)"; exit 1; }

test: setup browser
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pytest -n 3 --maxschedchunk 1

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into site/; --strict: any warning (a broken link, a missing snippet
# file or section, a page left out of the nav) fails the build.
docs: setup
	$(BIN)/mkdocs build --strict --site-dir site

# The bench extra (DuckDB, the controller bench's single-node reference).
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: setup $(BENCH_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/controller_watermark.py

bench-partitions: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/incremental_partitions.py

bench-windows: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/windowed_aggregate.py

bench-rollup: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/rollup.py

bench-page: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/watermarks_page.py

bench-latency: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/task_latency.py

clean:
	rm -rf .demo .airflow .artifacts site build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
