#!/usr/bin/env bash
# Builds the forwarder's image from the Dockerfile (the workspace and
# librdkafka compiled in its build stage: about 15 minutes on 2 cores with
# no cache), tags it NAME:VERSION and NAME:VERSION-COMMIT, and prints the
# local image's id (with --push, the registry's digest). For a release job:
#
#   IMAGE=registry.example.com/outbox-forwarder scripts/image.sh [--push] [-- BUILD OPTIONS]
#
# VERSION is the workspace's (Cargo.toml), COMMIT the checkout's short hash
# (with "-dirty" when it has uncommitted changes; --push refuses those).
# --push pushes both tags and prints the registry's digest (what a
# Kubernetes manifest pins: NAME@sha256:...). Docker or podman
# (CONTAINER_ENGINE picks one). Options after `--` go to the build (e.g.
# --build-arg BUILD_IMAGE=... from a mirror).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-outbox-forwarder}"
PUSH=""
BUILD_OPTIONS=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --push) PUSH=1; shift ;;
        --) shift; BUILD_OPTIONS=("$@"); break ;;
        *) echo "usage: IMAGE=name $0 [--push] [-- build options]" >&2; exit 2 ;;
    esac
done
ENGINE="${CONTAINER_ENGINE:-$(command -v docker >/dev/null 2>&1 && echo docker || echo podman)}"

VERSION="$(awk -F'"' '/^\[workspace.package\]/ { in_package = 1 } in_package && /^version *=/ { print $2; exit }' Cargo.toml)"
[ -n "$VERSION" ] || { echo "no [workspace.package] version in Cargo.toml" >&2; exit 1; }
COMMIT="$(git rev-parse --short=12 HEAD)"
if [ -n "$(git status --porcelain)" ]; then
    [ -z "$PUSH" ] || { echo "the checkout has uncommitted changes: commit them before pushing an image" >&2; exit 1; }
    COMMIT="${COMMIT}-dirty"
fi

started=$SECONDS
"$ENGINE" build --build-arg "VERSION=${VERSION}" --build-arg "COMMIT=${COMMIT}" \
    --tag "${IMAGE}:${VERSION}" --tag "${IMAGE}:${VERSION}-${COMMIT}" \
    ${BUILD_OPTIONS[@]+"${BUILD_OPTIONS[@]}"} . >&2
echo "built ${IMAGE}:${VERSION} and ${IMAGE}:${VERSION}-${COMMIT} in $((SECONDS - started)) s" >&2

if [ -n "$PUSH" ]; then
    "$ENGINE" push "${IMAGE}:${VERSION}" >&2
    if [ "$(basename "$ENGINE")" = podman ]; then
        # podman may compress the layers as it pushes: the digest is the
        # registry's manifest's, which it writes out.
        digest_file="$(mktemp)"
        "$ENGINE" push --digestfile "$digest_file" "${IMAGE}:${VERSION}-${COMMIT}" >&2
        echo "${IMAGE}@$(cat "$digest_file")"
        rm -f "$digest_file"
    else
        "$ENGINE" push "${IMAGE}:${VERSION}-${COMMIT}" >&2
        # The registry's digest of this repository, as `NAME@sha256:...`.
        "$ENGINE" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' \
            "${IMAGE}:${VERSION}-${COMMIT}" | grep -m1 "^${IMAGE}@sha256:"
    fi
else
    # The local image's id (a digest of its configuration; podman prints
    # it without the `sha256:`).
    "$ENGINE" image inspect --format '{{.Id}}' "${IMAGE}:${VERSION}-${COMMIT}"
fi
