#!/usr/bin/env bash
# Runs one scenario with the harness's runner; the runner exits non-zero
# when an expectation of the scenario fails.
set -euo pipefail
exec "$1" "$2" --quiet
