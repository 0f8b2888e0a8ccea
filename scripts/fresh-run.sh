#!/usr/bin/env bash
# fresh-run.sh COMMAND [ARGS...] - run COMMAND as a new machine and a background launcher would
# (docs/testing.md "The fresh machine"): HOME a new empty directory, so every per-user cache
# (~/.cache: jedi's, parso's, matplotlib's fonts; ~/.npm; ~/.local; ~/.jupyter) starts empty;
# SIGINT and SIGQUIT ignored, as a background job of a non-interactive shell and `nohup ... &`
# leave them (and SIGHUP, as nohup does); stdin closed. The ignored dispositions survive exec,
# so everything COMMAND starts inherits them. .ci/run runs `make test` through this.
#
# The machine-wide caches stay: the guest image and snapshot templates (content-addressed, under
# /var/cache and /var/tmp; rebuilt when their inputs change) and Debian's packages.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: fresh-run.sh COMMAND [ARGS...]" >&2; exit 2; }

home=$(mktemp -d "${TMPDIR:-/tmp}/cellvm-fresh-home.XXXXXX")
chmod 0700 "$home"
trap 'rm -rf "$home"' EXIT

# Per-user places that would otherwise point back at the old HOME's caches and config.
unset XDG_CACHE_HOME XDG_CONFIG_HOME XDG_DATA_HOME XDG_STATE_HOME MPLCONFIGDIR \
      JUPYTER_CONFIG_DIR JUPYTER_DATA_DIR JUPYTER_RUNTIME_DIR IPYTHONDIR PYTHONSTARTUP \
      PYTHONPYCACHEPREFIX npm_config_cache
export HOME="$home"
echo "fresh-run: HOME=$home, SIGINT/SIGQUIT/SIGHUP ignored, stdin closed: $*"

# Not exec: the trap above removes the HOME afterwards. The child starts with the three
# signals ignored (a subshell's `trap '' SIG` is an inherited SIG_IGN, unlike a handler).
rc=0
(trap '' INT QUIT HUP; exec "$@") </dev/null || rc=$?
exit "$rc"
