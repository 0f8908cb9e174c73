#!/usr/bin/env bash
# Builds the Debian package of the forwarder with cargo-deb (installed once
# into ~/.cache), after generating its man page and shell completions from
# the command line's definition; with --install, installs it with dpkg.
# Prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=2.9.2
CARGO_DEB_ROOT="${HOME}/.cache/outbox-forwarder/cargo-deb-${CARGO_DEB_VERSION}"
if [ ! -x "${CARGO_DEB_ROOT}/bin/cargo-deb" ]; then
    echo "building cargo-deb ${CARGO_DEB_VERSION} into ${CARGO_DEB_ROOT} (once)" >&2
    cargo install cargo-deb --locked --version "${CARGO_DEB_VERSION}" --root "${CARGO_DEB_ROOT}" >&2
fi

cargo build --release -p outbox-forwarder >&2
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
binary="${target_dir}/release/outbox-forwarder"
generated=crates/outbox-forwarder/generated
mkdir -p "${generated}"
"${binary}" manpage > "${generated}/outbox-forwarder.1"
# The packaged configuration: the annotated one, with the checkpoint in the
# service's state directory.
relative='path = "./data/checkpoint"'
grep -qF "${relative}" config/forwarder.toml || { echo "config/forwarder.toml has no ${relative}" >&2; exit 1; }
sed "s#${relative}#path = \"/var/lib/outbox-forwarder/checkpoint\"#" config/forwarder.toml > "${generated}/forwarder.toml"
"${binary}" completions bash > "${generated}/outbox-forwarder.bash"
"${binary}" completions zsh > "${generated}/_outbox-forwarder"
"${binary}" completions fish > "${generated}/outbox-forwarder.fish"

deb="$("${CARGO_DEB_ROOT}/bin/cargo-deb" -p outbox-forwarder --no-build | tail -n 1)"
[ -f "${deb}" ] || { echo "cargo deb did not make a package" >&2; exit 1; }
if [ "${1:-}" = "--install" ]; then
    DEBIAN_FRONTEND=noninteractive dpkg -i "${deb}" >&2
fi
echo "${deb}"
