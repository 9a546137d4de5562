#!/bin/sh
# Installs the official `openai` npm client into tests/e2e/node_modules (git-ignored) when missing,
# then runs openai_client.mjs against a running `1bit serve`. Usage: run_openai_client.sh BASE_URL MODE
# (MODE: completion | chat). Exit 77 when node or npm is unavailable (the caller skips).
set -e
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null 2>&1 || exit 77
if [ ! -d "$here/node_modules/openai" ]; then
  command -v npm >/dev/null 2>&1 || exit 77
  (cd "$here" && npm install --no-audit --no-fund --silent >/dev/null 2>&1) || exit 77
fi
exec node "$here/openai_client.mjs" "$@"
