#!/usr/bin/env bash
# Validates every Kubernetes manifest of the project against the Kubernetes
# API schemas (strict: unknown fields are errors):
#   - the output of `kubectl kustomize` for docker/k8s, docker/k8s/cert-manager,
#     docker/k8s/protected-ops and docker/k8s/own-certificate (the last with
#     placeholder certificate files, in a temporary copy: kustomize only
#     base64-encodes them);
#   - the golden webhook configurations tests/webhook_config/*/expected.yaml;
#   - the in-tree policies `kadmit policies rules --partial` writes (the
#     validating ones against 1.30, where ValidatingAdmissionPolicy v1
#     begins, the mutating ones against 1.36, where MutatingAdmissionPolicy
#     v1 begins, both against the newest).
# Each other document is checked against the oldest and the newest Kubernetes
# version kadmit supports. cert-manager's kinds (Certificate, Issuer) are
# skipped by name: kubernetes-validate knows only the built-in API.
#
# Needs python3 (kubernetes-validate is installed from PyPI into
# target/validate-venv) and kubectl with kustomize v5 or newer (kubectl 1.27+).
# Exits non-zero on any failure. Environment:
#   KADMIT_VALIDATE_VERSIONS  Kubernetes versions to check (default "1.27 1.37")
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VALIDATE_VERSION=1.37.0
VERSIONS=${KADMIT_VALIDATE_VERSIONS:-"1.27 1.37"}
VENV=target/validate-venv

fail() {
    echo "validate-manifests: $*" >&2
    exit 1
}

# --- kubectl (for its built-in kustomize) ---------------------------------
if ! command -v kubectl >/dev/null; then
    echo "validate-manifests: kubectl is missing; installing Debian's kubernetes-client" >&2
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client; } >&2 ||
            fail "installing kubernetes-client from Debian failed"
    fi
    command -v kubectl >/dev/null ||
        fail "kubectl is missing and could not be installed (needs root and apt-get); install kubectl 1.27 or newer${CI:+ on the CI machine}"
fi
kustomize_major=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
if [[ -z $kustomize_major || $kustomize_major -lt 5 ]]; then
    fail "$(command -v kubectl) embeds no kustomize v5 or newer (Debian bookworm's kubernetes-client is kubectl 1.20); the kustomizations need kubectl 1.27 or newer"
fi

# --- kubernetes-validate --------------------------------------------------
if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV" || fail "cannot create a Python venv at $VENV (python3 -m venv)"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2 ||
    fail "cannot install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION from PyPI"

# --- render ----------------------------------------------------------------
[[ -f docker/k8s/base/rules/kustomization.yaml ]] ||
    fail "docker/k8s/base/rules/ is missing: run scripts/sync-manifests.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

kubectl kustomize docker/k8s >"$work/k8s.yaml" || fail "kubectl kustomize docker/k8s failed"
kubectl kustomize docker/k8s/cert-manager >"$work/k8s-cert-manager.yaml" ||
    fail "kubectl kustomize docker/k8s/cert-manager failed"
kubectl kustomize docker/k8s/protected-ops >"$work/k8s-protected-ops.yaml" ||
    fail "kubectl kustomize docker/k8s/protected-ops failed"

# own-certificate/ reads tls.crt, tls.key and ca.crt, which are never in the
# repository: build a copy with placeholders.
mkdir -p "$work/tree/docker"
cp -R docker/k8s "$work/tree/docker/"
for file in tls.crt ca.crt; do
    printf -- '-----BEGIN CERTIFICATE-----\nplaceholder\n-----END CERTIFICATE-----\n' \
        >"$work/tree/docker/k8s/own-certificate/$file"
done
printf -- '-----BEGIN PRIVATE KEY-----\nplaceholder\n-----END PRIVATE KEY-----\n' \
    >"$work/tree/docker/k8s/own-certificate/tls.key"
kubectl kustomize "$work/tree/docker/k8s/own-certificate" >"$work/k8s-own-certificate.yaml" ||
    fail "kubectl kustomize docker/k8s/own-certificate failed"

files=("$work"/k8s*.yaml tests/webhook_config/*/expected.yaml)

cargo run --quiet --locked -- policies rules --partial >"$work/policies.yaml" 2>"$work/policies.err" ||
    fail "kadmit policies rules --partial failed: $(cat "$work/policies.err")"
POLICY_VERSIONS=${KADMIT_VALIDATE_POLICY_VERSIONS:-"1.30 ${VERSIONS##* }"}
MUTATING_POLICY_VERSIONS=${KADMIT_VALIDATE_MUTATING_POLICY_VERSIONS:-"1.36 ${VERSIONS##* }"}
MUTATING_KINDS=MutatingAdmissionPolicy,MutatingAdmissionPolicyBinding

# --- validate ----------------------------------------------------------------
read -r -d '' VALIDATE <<'PYTHON' || true
import os
import sys

import yaml
import kubernetes_validate
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

# Custom resources whose schemas kubernetes-validate does not have. Anything
# else without a schema is a failure, not a silent pass.
SKIPPED_GROUPS = {"cert-manager.io"}

versions = sys.argv[1].split()
# Kinds to check (ONLY_KINDS) or to leave to another run (SKIP_KINDS).
only_kinds = set(filter(None, os.environ.get("ONLY_KINDS", "").split(",")))
skip_kinds = set(filter(None, os.environ.get("SKIP_KINDS", "").split(",")))
passed = failed = skipped = 0
for path in sys.argv[2:]:
    name = os.path.basename(path) if path.startswith("/") else path
    with open(path) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    if not documents:
        print(f"FAIL {name}: no documents")
        failed += 1
    for document in documents:
        kind = document.get("kind", "?")
        if (only_kinds and kind not in only_kinds) or kind in skip_kinds:
            continue
        what = f"{name}: {kind}/{document.get('metadata', {}).get('name', '?')}"
        group = document.get("apiVersion", "").rpartition("/")[0]
        if group in SKIPPED_GROUPS:
            print(f"SKIP {what} ({group} is a custom resource; kubernetes-validate has only the built-in API)")
            skipped += 1
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except ValidationError as error:
                location = ".".join(str(p) for p in error.path)
                print(f"FAIL {what} against {version}: {location}: {error.message}")
                failed += 1
            except SchemaNotFoundError as error:
                print(f"FAIL {what} against {version}: {error.message}")
                failed += 1
            else:
                print(f"ok   {what} against {version}")
                passed += 1
print(f"validate-manifests: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or not passed else 0)
PYTHON
"$VENV/bin/python" -c "$VALIDATE" "$VERSIONS" "${files[@]}"
SKIP_KINDS=$MUTATING_KINDS "$VENV/bin/python" -c "$VALIDATE" "$POLICY_VERSIONS" "$work/policies.yaml"
ONLY_KINDS=$MUTATING_KINDS "$VENV/bin/python" -c "$VALIDATE" "$MUTATING_POLICY_VERSIONS" "$work/policies.yaml"
