#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests, end-to-end tests against the real
# server on loopback, and the upstream conformance corpus when ../shared/conformance
# exists beside the clone (reported as skipped otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3; }

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
