#!/bin/sh
# put-http.sh: one large put over HTTP on a loaded machine (issue 21.5's
# check). Builds stead, starts `stead serve` on a fresh SQLite file (or on
# STEAD_DB when set), writes SIZE_MIB of random bytes, and times
# `stead --db http://… put` of it while LOAD busy loops run beside it;
# then gets it back and compares. Prints the load average before and
# after, the put's time and the outcome.
#
#   bench/reliability/put-http.sh              # 1 GiB, no extra load
#   LOAD=8 SIZE_MIB=1024 bench/reliability/put-http.sh
set -eu
SIZE_MIB=${SIZE_MIB:-1024}
LOAD=${LOAD:-0}
PORT=${PORT:-17170}
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
(cd "$repo" && go build -o "$dir/stead" ./cmd/stead)
head -c "$((SIZE_MIB << 20))" /dev/urandom > "$dir/big.bin"
db=${STEAD_DB:-sqlite://$dir/data/stead.db}
"$dir/stead" --db "$db" --log-level warn serve --addr "127.0.0.1:$PORT" 2> "$dir/serve.log" &
pids="$pids $!"
i=0
until curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; do
	i=$((i + 1)); [ "$i" -lt 100 ] || { cat "$dir/serve.log"; exit 1; }
	sleep 0.1
done
n=0
while [ "$n" -lt "$LOAD" ]; do
	sh -c 'while :; do :; done' &
	pids="$pids $!"
	n=$((n + 1))
done
[ "$LOAD" -eq 0 ] || sleep 30 # let the load average climb
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) (extra busy loops: $LOAD, cores: $(nproc))"
start=$(date +%s.%N)
if key=$("$dir/stead" --db "http://127.0.0.1:$PORT" put "$dir/big.bin" 2> "$dir/put.err"); then
	end=$(date +%s.%N)
	echo "put: ok in $(echo "$end - $start" | bc) s, key $key"
else
	end=$(date +%s.%N)
	echo "put: FAILED after $(echo "$end - $start" | bc) s: $(cat "$dir/put.err")"
	exit 1
fi
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
want="sha256:$(sha256sum "$dir/big.bin" | cut -d' ' -f1)"
[ "$key" = "$want" ] || { echo "key $key, want $want"; exit 1; }
"$dir/stead" --db "http://127.0.0.1:$PORT" get "$key" > "$dir/back.bin"
cmp -s "$dir/big.bin" "$dir/back.bin" && echo "get: identical ($SIZE_MIB MiB)" || { echo "get: DIFFERS"; exit 1; }
