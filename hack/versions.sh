# shellcheck shell=bash
# Sourced, not run: the pins of versions.env, each overridable from the environment
# as NIGHTSHIFT_<KEY> (e.g. NIGHTSHIFT_KUBERNETES_VERSION=v1.37.2 with
# NIGHTSHIFT_KUBERNETES_STAGING_VERSION=v0.37.2 for a bench bed on another release).
# The prefix keeps a KUBERNETES_VERSION some other tool exported from changing ours.
# localcluster's paths.read_versions applies the same rule.
# shellcheck source=versions.env
. "$(dirname "${BASH_SOURCE[0]}")/versions.env"
while IFS='=' read -r _key _; do
  _over="NIGHTSHIFT_$_key"
  if [ -n "${!_over:-}" ]; then printf -v "$_key" '%s' "${!_over}"; fi
done < <(grep -E '^[A-Z_]+=' "$(dirname "${BASH_SOURCE[0]}")/versions.env")
unset _key _over
