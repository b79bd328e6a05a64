#!/usr/bin/env bash
# Regenerates the manifests that follow the bundled rules/:
#   docker/k8s/base/rules/         a copy of the rule files and the kustomization
#                                  that makes the ConfigMap kadmit-rules of them
#   docker/k8s/base/webhooks.yaml  `kadmit webhook-config rules --service kadmit/kadmit:443`
# Run it after changing rules/, review the diff, commit. The test
# webhook_config::bundled_manifests_match_the_bundled_rules fails while they
# are out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -d rules ]]; then
    echo "sync-manifests: rules/ does not exist; there is nothing to generate from" >&2
    exit 1
fi
KADMIT_BLESS=1 cargo test --quiet --test tests -- --exact \
    webhook_config::bundled_manifests_match_the_bundled_rules
git status --short -- docker/k8s/base/rules docker/k8s/base/webhooks.yaml
