# bin/env.sh — sourced by bin/run and bin/manage (not run on its own): the
# project's venv first on PATH, and the local SECRET_KEY.
#
# Outside DEBUG the settings refuse to start without a real SECRET_KEY, so unless
# SECRET_KEY or SECRET_KEY_FILE is set this makes a random key once, in
# var/secret_key (mode 600; the var folder is CONTEXTSVC_VAR_DIR when set, as for
# the settings), and passes it as SECRET_KEY_FILE: operator sessions
# survive a restart, and no key shared by every checkout can forge them.
# Expects the current directory to be the project's and bin/setup to have run.

export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
VAR_DIR="${CONTEXTSVC_VAR_DIR:-$PWD/var}"
[[ "$VAR_DIR" == /* ]] || VAR_DIR="$PWD/$VAR_DIR"
mkdir -p "$VAR_DIR"
if [[ -z "${SECRET_KEY:-}" && -z "${SECRET_KEY_FILE:-}" ]]; then
  if [[ ! -s "$VAR_DIR/secret_key" ]]; then
    printf 'env: making a random SECRET_KEY in %s (kept for later runs)\n' "$VAR_DIR/secret_key" >&2
    (umask 077 && python -c 'import secrets; print(secrets.token_urlsafe(50))' >"$VAR_DIR/secret_key.tmp")
    mv "$VAR_DIR/secret_key.tmp" "$VAR_DIR/secret_key"
  fi
  export SECRET_KEY_FILE="$VAR_DIR/secret_key"
fi
