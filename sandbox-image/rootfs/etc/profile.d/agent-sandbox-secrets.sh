# Project secrets (PUT /projects/{id}/secrets/{name}): the tenant's stack writes them to a host directory
# mounted read-only at /run/secrets; login shells (tmux's, SSH's) export the `env` ones. Model-API keys
# delivered by the credential gateway appear here only as a placeholder and a base URL.
if [ -r /run/secrets/agent.env ]; then
  . /run/secrets/agent.env
fi
