#!/usr/bin/env bash
# .ci/redis.sh — make sure a Redis server answers on ${REDIS_PORT:-6379}.
#
# Idempotent: if `redis-cli ping` already answers PONG it does nothing.
# Otherwise it installs redis-server with apt-get when the binary is missing,
# then starts it daemonized on 127.0.0.1 with persistence disabled
# (no RDB snapshots, no AOF), and waits until it answers.
# Used by the tests of cache/redisstore (REDIS_ADDR defaults to 127.0.0.1:6379).
set -euo pipefail

port="${REDIS_PORT:-6379}"
host=127.0.0.1

ping() {
	command -v redis-cli >/dev/null 2>&1 && [ "$(redis-cli -h "$host" -p "$port" ping 2>/dev/null)" = "PONG" ]
}

if ping; then
	echo "redis.sh: redis already answers on $host:$port"
	exit 0
fi

if ! command -v redis-server >/dev/null 2>&1; then
	echo "redis.sh: installing redis-server"
	sudo=""
	if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq redis-server redis-tools >/dev/null
fi

dir="${TMPDIR:-/tmp}/specgate-redis-$port"
mkdir -p "$dir"
redis-server --port "$port" --bind "$host" --daemonize yes \
	--save '' --appendonly no --dir "$dir" \
	--pidfile "$dir/redis.pid" --logfile "$dir/redis.log"

for _ in $(seq 1 50); do
	if ping; then
		echo "redis.sh: redis started on $host:$port (pid $(cat "$dir/redis.pid" 2>/dev/null || echo ?))"
		exit 0
	fi
	sleep 0.1
done
echo "redis.sh: redis did not answer on $host:$port; log: $dir/redis.log" >&2
tail -n 20 "$dir/redis.log" >&2 || true
exit 1
