#!/bin/sh
# s3-fleet.sh: a fleet on a real S3 server (docs/decisions/0045-durable-uploads.md).
# Starts SeaweedFS (`weed server -s3`, the binary in WEED) and two
# `stead serve --registry` on one fresh PostgreSQL database whose bytes tier
# is a bucket of it; pushes a SIZE_MIB layer chunked across both servers
# (POST on one, CHUNK_MIB PATCHes alternating between them, PUT on the
# other), a config and a manifest; pulls the layer back through each
# server and compares; reports the bucket's objects and the database's
# bytes; deletes the image, collects, and checks the bucket is empty of
# the layer.
#
#   WEED=/path/to/weed bench/reliability/s3-fleet.sh
#   (build weed: go build ./weed in a copy of github.com/seaweedfs/seaweedfs)
set -eu
WEED=${WEED:?set WEED to the weed binary}
SIZE_MIB=${SIZE_MIB:-1024}
CHUNK_MIB=${CHUNK_MIB:-256}
PGSERVER=${PGSERVER:-postgres://postgres@127.0.0.1:5432}
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
dbname="stead_s3fleet_$$"
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	sleep 2
	for p in $pids; do kill -9 "$p" 2>/dev/null || true; done # weed may outlive a TERM
	wait 2>/dev/null || true
	psql "$PGSERVER/postgres" -qc "DROP DATABASE IF EXISTS $dbname" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
waitfor() { # url, log
	i=0
	until curl -fsS -o /dev/null "$1" 2>/dev/null; do
		i=$((i + 1)); [ "$i" -lt 300 ] || { cat "$2"; exit 1; }
		sleep 0.1
	done
}
(cd "$repo" && go build -o "$dir/stead" ./cmd/stead)
mkdir -p "$dir/weed"
"$WEED" server -dir="$dir/weed" -ip=127.0.0.1 -master.port=19333 -volume.port=18080 -filer.port=18888 \
	-s3 -s3.port=18333 > "$dir/weed.log" 2>&1 &
pids="$pids $!"
i=0
until curl -fsS -o /dev/null -X PUT http://127.0.0.1:18333/stead-soak 2>/dev/null; do
	i=$((i + 1)); [ "$i" -lt 600 ] || { tail -20 "$dir/weed.log"; exit 1; }
	sleep 0.1
done
psql "$PGSERVER/postgres" -qc "CREATE DATABASE $dbname" >/dev/null
bucket='s3://stead-soak?endpoint=http://127.0.0.1:18333&use_path_style=true&disable_https=true&region=us-east-1&anonymous=true'
enc=$(printf %s "$bucket" | jq -sRr @uri)
db="$PGSERVER/$dbname?sslmode=disable&bytes=$enc"
for port in 17181 17182; do
	"$dir/stead" --db "$db" --log-level warn serve --addr "127.0.0.1:$port" --registry \
		--registry-pending-ttl 1s --gc-interval 0 2> "$dir/serve-$port.log" &
	pids="$pids $!"
	waitfor "http://127.0.0.1:$port/healthz" "$dir/serve-$port.log"
done
A=http://127.0.0.1:17181 B=http://127.0.0.1:17182
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
head -c "$((SIZE_MIB << 20))" /dev/urandom > "$dir/layer"
layer="sha256:$(sha256sum "$dir/layer" | cut -d' ' -f1)"
loc() { tr -d '\r' < "$1" | sed -n 's/^[Ll]ocation: //p' | tail -1; }
start=$(date +%s.%N)
curl -fsS -D "$dir/h" -o /dev/null -X POST "$A/v2/soak/app/blobs/uploads/"
l=$(loc "$dir/h")
off=0 n=0 size=$((SIZE_MIB << 20)) chunk=$((CHUNK_MIB << 20))
while [ "$off" -lt "$size" ]; do
	end=$((off + chunk)); [ "$end" -le "$size" ] || end=$size
	srv=$B; [ $((n % 2)) -eq 0 ] || srv=$A
	tail -c "+$((off + 1))" "$dir/layer" | head -c "$((end - off))" |
		curl -fsS -D "$dir/h" -o /dev/null -X PATCH -H "Content-Type: application/octet-stream" \
			-H "Content-Range: $off-$((end - 1))" --data-binary @- "$srv$l"
	l=$(loc "$dir/h")
	off=$end n=$((n + 1))
done
curl -fsS -o /dev/null -X PUT "$A$l?digest=$layer"
finish=$(date +%s.%N)
echo "chunked push of $SIZE_MIB MiB in $n PATCHes across two servers: $(echo "$finish - $start" | bc) s"
printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}' > "$dir/config"
config="sha256:$(sha256sum "$dir/config" | cut -d' ' -f1)"
curl -fsS -o /dev/null -X POST --data-binary @"$dir/config" "$B/v2/soak/app/blobs/uploads/?digest=$config"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%d}]}' \
	"$config" "$(wc -c < "$dir/config")" "$layer" "$size" > "$dir/manifest"
curl -fsS -o /dev/null -X PUT -H "Content-Type: application/vnd.oci.image.manifest.v1+json" --data-binary @"$dir/manifest" "$B/v2/soak/app/manifests/v1"
for srv in $A $B; do
	curl -fsS -o "$dir/back" "$srv/v2/soak/app/blobs/$layer"
	cmp -s "$dir/layer" "$dir/back" && echo "pull through $srv: identical" || { echo "pull through $srv: DIFFERS"; exit 1; }
done
objects() { curl -fsS "http://127.0.0.1:18333/stead-soak?list-type=2&prefix=o/" | grep -o '<Size>[0-9]*</Size>' | tr -dc '0-9\n' | awk '{n++; s+=$1} END {printf "%d objects, %d bytes\n", n, s}'; }
echo "bucket after the push: $(objects)"
PGOPTIONS=-csearch_path=stead psql "$PGSERVER/$dbname" -Atc "SELECT 'database: ' || (SELECT count(*) FROM blob_chunks) || ' chunk rows, ' ||
	coalesce((SELECT sum(pg_column_size(c.*)) FROM blob_chunks c), 0) + coalesce((SELECT sum(pg_column_size(b.*)) FROM blobs b), 0) +
	coalesce((SELECT sum(pg_column_size(u.*)) FROM blob_uploads u), 0) || ' bytes of blob, chunk and upload rows'"
digest="sha256:$(sha256sum "$dir/manifest" | cut -d' ' -f1)"
curl -fsS -o /dev/null -X DELETE "$A/v2/soak/app/manifests/$digest"
sleep 62 # past --registry-pending-ttl and the servers' put pins (60 s)
for pass in 1 2 3; do
	"$dir/stead" --db "$db" gc --grace 1s > "$dir/gc-$pass.log" 2>&1 || { cat "$dir/gc-$pass.log"; exit 1; }
	sleep 2 # past the grace: the next pass deletes what this one staged
done
for pass in 1 2 3; do echo "collect $pass: $(tail -1 "$dir/gc-$pass.log")"; done
echo "bucket after the collection: $(objects)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
