#!/bin/sh
# Installs the official `openai` npm client into tests/e2e/node_modules (git-ignored) when missing,
# then runs openai_client.mjs against a running `1bit serve`. Usage: run_openai_client.sh BASE_URL MODE
# [ARGS] (MODE: completion | chat | embedding | sampling OUT.json PROMPT_IDS BANNED_ID). Exit 77 when node or npm is
# unavailable (the caller skips).
set -e
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null 2>&1 || exit 77
# Tests run in parallel: one install at a time (flock), and the check again once we hold the lock.
# The marker is written only after a whole install, so a half-extracted package never counts.
marker="$here/node_modules/.onebit-installed"
if [ ! -f "$marker" ]; then
  command -v npm >/dev/null 2>&1 || exit 77
  exec 9>"${TMPDIR:-/tmp}/onebit-npm-install-$(id -u).lock"
  flock 9
  if [ ! -f "$marker" ]; then
    (cd "$here" && npm install --no-audit --no-fund --silent >/dev/null 2>&1) || exit 77
    touch "$marker"
  fi
  flock -u 9
fi
exec node "$here/openai_client.mjs" "$@"
