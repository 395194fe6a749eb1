# bin/env.sh — sourced by bin/run and bin/manage (not run on its own): the
# project's venv first on PATH, and the local SECRET_KEY.
#
# Outside DEBUG the settings refuse to start without a real SECRET_KEY, so unless
# SECRET_KEY or SECRET_KEY_FILE is set this makes a random key once, in
# var/secret_key (mode 600), and passes it as SECRET_KEY_FILE: operator sessions
# survive a restart, and no key shared by every checkout can forge them.
# Expects the current directory to be the project's and bin/setup to have run.

export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
mkdir -p var
if [[ -z "${SECRET_KEY:-}" && -z "${SECRET_KEY_FILE:-}" ]]; then
  if [[ ! -s var/secret_key ]]; then
    printf 'env: making a random SECRET_KEY in var/secret_key (kept for later runs)\n' >&2
    (umask 077 && python -c 'import secrets; print(secrets.token_urlsafe(50))' >var/secret_key.tmp)
    mv var/secret_key.tmp var/secret_key
  fi
  export SECRET_KEY_FILE="$PWD/var/secret_key"
fi
