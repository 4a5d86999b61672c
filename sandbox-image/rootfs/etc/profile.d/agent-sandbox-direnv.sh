# direnv loads a directory's .envrc in the agent's shells (FR-024): `sbx env push` writes one beside the
# repository's .env files in /workspace/<repo> and allows it. tmux's and SSH's shells are login shells.
if [ -n "${BASH_VERSION:-}" ] && command -v direnv >/dev/null 2>&1; then
  eval "$(direnv hook bash)"
fi
# A devcontainer.json's containerEnv, written by `sbx start` (KEY='value' lines).
if [ -r "$HOME/.config/agent-sandbox/container.env" ]; then
  set -a
  . "$HOME/.config/agent-sandbox/container.env"
  set +a
fi
