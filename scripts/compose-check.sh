#!/usr/bin/env bash
# Runs the docker compose stack (specgate + Redis) on a machine that reaches
# no container registry, and checks the cache end to end:
#   MISS -> HIT-EXACT -> HIT-SEMANTIC -> restart specgate -> HIT-EXACT (from Redis).
#
# What it needs (Debian bookworm; run as root):
#   apt-get install docker.io docker-compose debootstrap
# It starts dockerd when none answers (vfs storage, no iptables, no default
# bridge: what works inside a VM without privileges for overlayfs or
# netfilter), builds the base images the Dockerfile names from debootstrap
# roots (debian:bookworm-slim; golang:1.26-bookworm with the host's Go;
# Redis), then `docker-compose build` and `up`. A full build took
# about 11 minutes on 2 cores.
#
#   scripts/compose-check.sh            # port 8080 (SPECGATE_PORT=18080 to move it)
#   KEEP=1 scripts/compose-check.sh     # leave the stack running afterwards
#   IMAGES_ONLY=1 scripts/compose-check.sh  # only make the base images
#   SKIP_BUILD=1 scripts/compose-check.sh   # reuse specgate:latest if it exists
set -euo pipefail
cd "$(dirname "$0")/.."
export SPECGATE_PORT=${SPECGATE_PORT:-8080}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=${WORK:-/var/tmp/specgate-compose}
mkdir -p "$WORK"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
compose() { docker-compose -p specgate -f docker-compose.yml -f scripts/compose-offline.yml "$@"; }

started_dockerd=""
if ! docker info >/dev/null 2>&1; then
	log "starting dockerd (vfs, --iptables=false, --bridge=none)"
	dockerd --storage-driver vfs --iptables=false --bridge=none >"$WORK/dockerd.log" 2>&1 &
	started_dockerd=$!
	for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
	docker info >/dev/null 2>&1 || { echo "dockerd did not start; see $WORK/dockerd.log"; exit 1; }
fi
cleanup() {
	if [ -z "${KEEP:-}" ]; then
		compose down -v >/dev/null 2>&1 || true
		if [ -n "$started_dockerd" ]; then kill "$started_dockerd" 2>/dev/null || true; fi
	fi
}
trap cleanup EXIT

# Base images from debootstrap roots (no registry).
root_image() { # TAG INCLUDES [GO]
	local tag=$1 include=$2 go=${3:-}
	if docker image inspect "$tag" >/dev/null 2>&1; then return; fi
	local dir="$WORK/root-${tag//[:\/]/-}"
	rm -rf "$dir"
	log "debootstrap $tag ($include)"
	debootstrap --variant=minbase --include="$include" bookworm "$dir" "$MIRROR" >"$dir.log" 2>&1
	rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/archives/*.deb
	local change=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
	if [ -n "$go" ]; then
		cp -a "$(go env GOROOT)" "$dir/usr/local/go"
		change=(--change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
			--change 'ENV GOPATH=/go' --change 'ENV GOTOOLCHAIN=local')
	fi
	tar -C "$dir" -c . | docker import "${change[@]}" - "$tag" >/dev/null
	rm -rf "$dir"
}
root_image debian:bookworm-slim ca-certificates,curl &
root_image golang:1.26-bookworm ca-certificates,gcc,libc6-dev,git go &
root_image specgate-redis:local redis-server &
wait
for img in debian:bookworm-slim golang:1.26-bookworm specgate-redis:local; do
	docker image inspect "$img" >/dev/null 2>&1 || { echo "base image $img missing; see $WORK/root-*.log"; exit 1; }
done
# The build stage fetches modules over TLS: give it the host's CA bundle, so
# that a machine behind a TLS-inspecting proxy (as this one is) works too.
host_ca() { # TAG
	local tag=$1 crt=/etc/ssl/certs/ca-certificates.crt sum
	[ -f "$crt" ] || return 0
	sum=$(sha256sum "$crt" | cut -c1-16)
	if [ "$(docker image inspect --format '{{index .Config.Labels "specgate.host-ca"}}' "$tag")" = "$sum" ]; then return; fi
	log "adding the host's CA bundle to $tag"
	local ctx="$WORK/ca-ctx"
	rm -rf "$ctx" && mkdir -p "$ctx" && cp "$crt" "$ctx/ca-certificates.crt"
	printf 'FROM %s\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\nLABEL specgate.host-ca=%s\n' "$tag" "$sum" >"$ctx/Dockerfile"
	docker build -q -t "$tag" "$ctx" >/dev/null
}
host_ca golang:1.26-bookworm
if [ -n "${IMAGES_ONLY:-}" ]; then log "base images ready"; exit 0; fi

if [ -n "${SKIP_BUILD:-}" ] && docker image inspect specgate:latest >/dev/null 2>&1; then
	log "SKIP_BUILD: using the specgate:latest image built before"
else
	log "docker-compose build"
	t0=$(date +%s)
	compose build specgate
	log "build took $(( $(date +%s) - t0 )) s"
fi

log "docker-compose up"
compose up -d specgate redis
base="http://127.0.0.1:$SPECGATE_PORT"
ready() {
	for _ in $(seq 120); do curl -fsS "$base/readyz" >/dev/null 2>&1 && return 0; sleep 1; done
	compose logs --tail 50 specgate; return 1
}
ready
ask() { # prints the X-Cache header of a chat completion
	curl -sS -o /dev/null -D - "$base/v1/chat/completions" -H 'Content-Type: application/json' \
		-d "{\"model\":\"specgate-target\",\"max_tokens\":16,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}]}" |
		tr -d '\r' | awk -F': ' 'tolower($1)=="x-cache"{print $2}'
}
q="What does ephemeral mean? $(date +%s)"
seq=("$(ask "$q")" "$(ask "$q")" "$(ask "${q/What does/what does}")")
log "restarting specgate"
compose restart specgate >/dev/null
ready
seq+=("$(ask "$q")")
echo "X-Cache sequence: ${seq[*]}"
want=(MISS HIT-EXACT HIT-SEMANTIC HIT-EXACT)
for i in 0 1 2 3; do
	# a lower-cased paraphrase may normalise to the exact key: either hit counts
	if [ "$i" = 2 ] && [[ "${seq[2]}" == HIT-* ]]; then continue; fi
	if [ "${seq[$i]}" != "${want[$i]}" ]; then
		echo "FAIL: request $((i + 1)) got ${seq[$i]}, want ${want[$i]}"
		exit 1
	fi
done
echo "ok: MISS -> HIT -> restart -> HIT"
