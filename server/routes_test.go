package server_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/testing/apicheck"
	"github.com/steadkit/stead/server"
)

// TestEveryRoute sends success and error cases to every operation of
// docs/openapi.yaml through a server behind apicheck, which fails the
// test on any status, header or body the document does not list. Each
// documented operation must have a case here.
func TestEveryRoute(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	doc := apicheck.Load(t)
	srv := httptest.NewServer(doc.Wrap(t, server.New(st, server.Options{Token: "tok", Logger: quiet, MaxBlobSize: 1 << 20})))
	t.Cleanup(srv.Close)
	auth := map[string]string{"Authorization": "Bearer tok"}
	value := "every route"
	key := blob.KeyOf([]byte(value)).String()
	absent := blob.KeyOf([]byte("never stored")).String()
	putSet := `{"value":"` + base64.StdEncoding.EncodeToString([]byte(value)) + `","refs":[{"name":`
	var set, setnum string // the upload of the upload cases, its id and its chunk set
	upload := func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/v1/uploads?lease=1m", "", auth)
		var up struct{ ID string }
		mustJSON(t, a.body, &up)
		n, err := strconv.ParseUint(up.ID, 16, 64)
		if err != nil {
			t.Fatalf("begin = %s", a.body)
		}
		set, setnum = up.ID, strconv.FormatUint(n, 10)
	}
	var lease string // the sweep lease of the GC step cases
	takeLease := func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/v1/gc/lease", `{"holder":"every-route-steps"}`, auth)
		var l struct{ ID string }
		mustJSON(t, a.body, &l)
		lease = l.ID
	}
	cases := []routeCase{
		{op: "GET /healthz", method: "GET", path: "/healthz", status: 200},
		{op: "GET /readyz", method: "GET", path: "/readyz", status: 200},
		{op: "GET /metrics", method: "GET", path: "/metrics", header: auth, status: 200},
		{op: "GET /metrics", method: "GET", path: "/metrics", status: 401},
		{op: "GET /v1/info", method: "GET", path: "/v1/info", header: auth, status: 200},
		{op: "GET /v1/info", method: "GET", path: "/v1/info", header: map[string]string{"Authorization": "Bearer wrong"}, status: 401},
		{op: "GET /v1/schema", method: "GET", path: "/v1/schema", header: auth, status: 200},
		{op: "POST /v1/schema/migrate", method: "POST", path: "/v1/schema/migrate", header: auth, status: 200},
		{op: "POST /v1/bytes-tier/check", method: "POST", path: "/v1/bytes-tier/check", header: auth, status: 200},
		{op: "POST /v1/bytes-tier/check", method: "POST", path: "/v1/bytes-tier/check", status: 401},

		{op: "PUT /v1/blobs", method: "PUT", path: "/v1/blobs", header: auth, body: value, status: 201},
		{op: "PUT /v1/blobs", method: "PUT", path: "/v1/blobs", header: auth, body: value, status: 200},
		{op: "PUT /v1/blobs", method: "PUT", path: "/v1/blobs", header: map[string]string{"Authorization": "Bearer tok", "Content-Digest": "sha-256=:nope:"}, body: value, status: 400},
		{op: "POST /v1/blobs", method: "POST", path: "/v1/blobs", header: map[string]string{"Authorization": "Bearer tok", "Content-Type": "text/plain"}, body: value, status: 200},
		{op: "POST /v1/blobs", method: "POST", path: "/v1/blobs", header: auth, body: strings.Repeat("x", 1<<20+1), status: 413},
		{op: "GET /v1/blobs", method: "GET", path: "/v1/blobs?limit=1", header: auth, status: 200},
		{op: "GET /v1/blobs", method: "GET", path: "/v1/blobs?limit=banana", header: auth, status: 400},
		{op: "PUT /v1/blobs/{key}", method: "PUT", path: "/v1/blobs/" + key, header: auth, body: value, status: 200},
		{op: "PUT /v1/blobs/{key}", method: "PUT", path: "/v1/blobs/" + absent, header: auth, body: value, status: 400},
		{op: "PUT /v1/blobs/{key}", method: "PUT", path: "/v1/blobs/" + key + "?owner=o&ttl=1m", header: auth, body: value, status: 200},
		{op: "GET /v1/blobs/{key}", method: "GET", path: "/v1/blobs/" + key, header: auth, status: 200},
		{op: "GET /v1/blobs/{key}", method: "GET", path: "/v1/blobs/" + key, header: map[string]string{"Authorization": "Bearer tok", "Range": "bytes=0-1"}, status: 206},
		{op: "GET /v1/blobs/{key}", method: "GET", path: "/v1/blobs/" + key, header: map[string]string{"Authorization": "Bearer tok", "Range": "bytes=0-1,3-4"}, status: 206},
		{op: "GET /v1/blobs/{key}", method: "GET", path: "/v1/blobs/" + key, header: map[string]string{"Authorization": "Bearer tok", "Range": "bytes=-0"}, status: 416},
		{op: "GET /v1/blobs/{key}", method: "GET", path: "/v1/blobs/" + key, header: map[string]string{"Authorization": "Bearer tok", "If-None-Match": `"` + key + `"`}, status: 304},
		{op: "GET /v1/blobs/{key}", method: "GET", path: "/v1/blobs/" + absent, header: auth, status: 404},
		{op: "GET /v1/blobs/{key}", method: "GET", path: "/v1/blobs/sha256:bad", header: auth, status: 400},
		{op: "HEAD /v1/blobs/{key}", method: "HEAD", path: "/v1/blobs/" + key, header: auth, status: 200},
		{op: "HEAD /v1/blobs/{key}", method: "HEAD", path: "/v1/blobs/" + absent, header: auth, status: 404},
		{op: "HEAD /v1/blobs/{key}", method: "HEAD", path: "/v1/blobs/" + key, status: 401},
		{op: "DELETE /v1/blobs/{key}", method: "DELETE", path: "/v1/blobs/" + key, header: auth, status: 409},
		{op: "DELETE /v1/blobs/{key}", method: "DELETE", path: "/v1/blobs/" + absent, header: auth, status: 404},
		{op: "GET /v1/blobs/{key}/stored", method: "GET", path: "/v1/blobs/" + key + "/stored", header: auth, status: 200},
		{op: "GET /v1/blobs/{key}/stored", method: "GET", path: "/v1/blobs/" + absent + "/stored", header: auth, status: 404},
		{op: "POST /v1/blobs/{key}/pins", method: "POST", path: "/v1/blobs/" + key + "/pins", header: auth, body: `{"owner":"p","ttl":"1m"}`, status: 200},
		{op: "POST /v1/blobs/{key}/pins", method: "POST", path: "/v1/blobs/" + absent + "/pins", header: auth, body: `{"owner":"p","ttl":"1m"}`, status: 404},
		{op: "POST /v1/blobs/{key}/pins", method: "POST", path: "/v1/blobs/" + key + "/pins", header: auth, body: `{"owner":"p","ttl":"48h"}`, status: 400},
		{op: "PUT /v1/blobs/{key}/pins/{owner}", method: "PUT", path: "/v1/blobs/" + key + "/pins/p", header: auth, body: `{"ttl":"1m"}`, status: 200},
		{op: "PUT /v1/blobs/{key}/pins/{owner}", method: "PUT", path: "/v1/blobs/" + key + "/pins/p", header: auth, body: `{"ttl":1}`, status: 400},
		{op: "DELETE /v1/blobs/{key}/pins/{owner}", method: "DELETE", path: "/v1/blobs/" + key + "/pins/p", header: auth, status: 204},
		{op: "POST /v1/blobs/delete", method: "POST", path: "/v1/blobs/delete", header: auth, body: `{"keys":["` + absent + `"]}`, status: 200},
		{op: "POST /v1/blobs/delete", method: "POST", path: "/v1/blobs/delete", header: auth, body: `{"keys":["sha256:bad"]}`, status: 400},

		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-latest", header: map[string]string{"Authorization": "Bearer tok", "If-None-Match": "*"}, body: `{"key":"` + key + `","ttl":"1h"}`, status: 201},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-latest", header: map[string]string{"Authorization": "Bearer tok", "If-None-Match": "*"}, body: `{"key":"` + key + `"}`, status: 412},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-set", header: auth, body: `{"key":"` + key + `"}`, status: 201},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-set", header: auth, body: `{"key":"` + key + `"}`, status: 200},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-latest", header: map[string]string{"Authorization": "Bearer tok", "If-Match": `"1"`}, body: `{"key":"` + key + `","ttl":"1h"}`, status: 200},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-other", header: auth, body: `{"key":"` + absent + `"}`, status: 404},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-zero", header: auth, body: `{"key":"` + key + `","ttl":"0s"}`, status: 400},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-zero", header: auth, body: `{"key":"` + key + `","ttl":"-1s"}`, status: 400},
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-%FF", header: auth, body: `{"key":"` + key + `"}`, status: 400},
		{op: "GET /v1/refs/{name}", method: "GET", path: "/v1/refs/app-latest?touch=2h", header: auth, status: 200},
		{op: "GET /v1/refs/{name}", method: "GET", path: "/v1/refs/app-absent", header: auth, status: 404},
		{op: "PATCH /v1/refs/{name}", method: "PATCH", path: "/v1/refs/app-latest", header: auth, body: `{"ttl":"3h"}`, status: 200},
		{op: "PATCH /v1/refs/{name}", method: "PATCH", path: "/v1/refs/app-latest", header: auth, body: `{"ttl":"-1h"}`, status: 400},
		// "ttl": null is the member left out: a set that never expires, a
		// renewal without its TTL.
		{op: "PUT /v1/refs/{name}", method: "PUT", path: "/v1/refs/app-null", header: auth, body: `{"key":"` + key + `","ttl":null}`, status: 201},
		{op: "PATCH /v1/refs/{name}", method: "PATCH", path: "/v1/refs/app-null", header: auth, body: `{"ttl":null}`, status: 400},
		{op: "PATCH /v1/refs/{name}", method: "PATCH", path: "/v1/refs/app-null", header: auth, body: `{}`, status: 400},
		{op: "GET /v1/refs", method: "GET", path: "/v1/refs?prefix=app-&limit=10", header: auth, status: 200},
		{op: "GET /v1/refs", method: "GET", path: "/v1/refs?limit=0", header: auth, status: 400},
		{op: "GET /v1/usage", method: "GET", path: "/v1/usage?prefix=app-", header: auth, status: 200},
		{op: "GET /v1/usage", method: "GET", path: "/v1/usage?prefix=a%00", header: auth, status: 400},
		{op: "GET /v1/usage", method: "GET", path: "/v1/usage", status: 401},
		{op: "DELETE /v1/refs/{name}", method: "DELETE", path: "/v1/refs/app-latest", header: auth, status: 204},
		{op: "DELETE /v1/refs/{name}", method: "DELETE", path: "/v1/refs/app-latest", header: auth, status: 404},

		{op: "POST /v1/blobs/{key}/refs", method: "POST", path: "/v1/blobs/" + key + "/refs?owner=o&ttl=1m", header: auth, body: putSet + `"app-putset","if_absent":true}]}`, status: 200},
		{op: "POST /v1/blobs/{key}/refs", method: "POST", path: "/v1/blobs/" + key + "/refs?owner=o&ttl=1m", header: auth, body: putSet + `"app-putset","if_absent":true}]}`, status: 412},
		{op: "POST /v1/blobs/{key}/refs", method: "POST", path: "/v1/blobs/" + absent + "/refs?owner=o&ttl=1m", header: auth, body: putSet + `"app-putset"}]}`, status: 400},
		{op: "POST /v1/blobs/{key}/refs", method: "POST", path: "/v1/blobs/" + key + "/refs?owner=o&ttl=1m", header: auth, body: `{"value":"","refs":[]}`, status: 400},
		{op: "POST /v1/gc/sweep", method: "POST", path: "/v1/gc/sweep", header: auth, body: `{"dry_run":true}`, status: 200},
		{op: "POST /v1/gc/sweep", method: "POST", path: "/v1/gc/sweep", header: auth, body: `{"dry_run":1}`, status: 400},
		{op: "GET /v1/gc/explain/{key}", method: "GET", path: "/v1/gc/explain/" + key, header: auth, status: 200},
		{op: "GET /v1/gc/explain/{key}", method: "GET", path: "/v1/gc/explain/sha256:bad", header: auth, status: 400},
		{op: "GET /v1/gc/sources", method: "GET", path: "/v1/gc/sources", header: auth, status: 200},
		{op: "PUT /v1/gc/sources", method: "PUT", path: "/v1/gc/sources", header: auth, body: `{"schema":"s","table":"t","column":"c"}`, status: 400},
		{op: "DELETE /v1/gc/sources", method: "DELETE", path: "/v1/gc/sources", header: auth, body: `{"name":"f"}`, status: 400},
		{op: "GET /v1/pins", method: "GET", path: "/v1/pins", header: auth, status: 200},
		{op: "POST /v1/gc/reap", before: takeLease, method: "POST", path: "/v1/gc/reap", header: auth, body: `{"lease":"{lease}","dry_run":true}`, status: 200},
		{op: "POST /v1/gc/reap", method: "POST", path: "/v1/gc/reap", header: auth, body: `{"dry_run":true}`, status: 400},
		{op: "PUT /v1/gc/window", method: "PUT", path: "/v1/gc/window", header: auth, body: `{"lease":"{lease}","keys":["` + absent + `"]}`, status: 204},
		{op: "PUT /v1/gc/window", method: "PUT", path: "/v1/gc/window", header: auth, body: `{"lease":"{lease}","keys":["` + absent + `"],"visible_after":"9999-01-01T00:00:00Z"}`, status: 400},
		{op: "PUT /v1/gc/window", method: "PUT", path: "/v1/gc/window", header: auth, body: `{"keys":["` + absent + `"]}`, status: 400},
		{op: "GET /v1/gc/pass", method: "GET", path: "/v1/gc/pass", header: auth, status: 200},
		{op: "GET /v1/gc/declared", method: "GET", path: "/v1/gc/declared", header: auth, status: 200},
		{op: "GET /v1/gc/stored", method: "GET", path: "/v1/gc/stored", header: auth, status: 200},
		{op: "GET /v1/gc/stored", method: "GET", path: "/v1/gc/stored", status: 401},
		{op: "POST /v1/gc/stage", method: "POST", path: "/v1/gc/stage", header: auth, body: `{"lease":"{lease}","dry_run":true,"grace":"1h","limit":10}`, status: 200},
		{op: "POST /v1/gc/orphans", method: "POST", path: "/v1/gc/orphans", header: auth, body: `{"lease":"{lease}","dry_run":true,"grace":"1h","limit":10}`, status: 200},
		{op: "POST /v1/gc/orphans", method: "POST", path: "/v1/gc/orphans", header: auth, body: `{"lease":"gone","grace":"1h","limit":10}`, status: 409},
		{op: "POST /v1/gc/orphans", method: "POST", path: "/v1/gc/orphans", header: auth, body: `{"lease":"{lease}","grace":"1h","limit":1001}`, status: 400},
		{op: "POST /v1/gc/take", method: "POST", path: "/v1/gc/take", header: auth, body: `{"lease":"{lease}","dry_run":true,"limit":10}`, status: 200},
		{op: "POST /v1/gc/take", method: "POST", path: "/v1/gc/take", header: auth, body: `{"lease":"{lease}","limit":2147483648}`, status: 400},
		{op: "POST /v1/gc/take", method: "POST", path: "/v1/gc/take", header: auth, body: `{"lease":"gone","dry_run":true,"limit":10}`, status: 409},
		{op: "POST /v1/gc/arbitrate", method: "POST", path: "/v1/gc/arbitrate", header: auth, body: `{"lease":"{lease}","dry_run":true,"keys":["` + absent + `"]}`, status: 200},
		{op: "POST /v1/gc/arbitrate", method: "POST", path: "/v1/gc/arbitrate", header: auth, body: `{"lease":"{lease}","keys":["sha256:bad"]}`, status: 400},
		{op: "PUT /v1/gc/lease/{id}", method: "PUT", path: "/v1/gc/lease/{lease}", header: auth, status: 204},
		{op: "POST /v1/gc/lease", method: "POST", path: "/v1/gc/lease", header: auth, body: `{"holder":""}`, status: 400},
		{op: "PUT /v1/gc/lease/{id}", method: "PUT", path: "/v1/gc/lease/none", header: auth, status: 409},
		{op: "DELETE /v1/gc/lease/{id}", method: "DELETE", path: "/v1/gc/lease/none", header: auth, status: 204},

		{op: "POST /v1/uploads", method: "POST", path: "/v1/uploads?lease=1m", header: auth, status: 201},
		{op: "POST /v1/uploads", method: "POST", path: "/v1/uploads?lease=banana", header: auth, status: 400},
		{op: "PUT /v1/uploads/{id}/{off}", before: upload, method: "PUT", path: "/v1/uploads/{set}/0?lease=1m", header: auth, body: value, status: 200},
		{op: "PUT /v1/uploads/{id}/{off}", method: "PUT", path: "/v1/uploads/{set}/0?lease=1m", header: auth, body: value, status: 409},
		{op: "PUT /v1/uploads/{id}/{off}", method: "PUT", path: "/v1/uploads/{set}/x?lease=1m", header: auth, body: value, status: 400},
		{op: "PUT /v1/uploads/{id}/{off}", method: "PUT", path: "/v1/uploads/{set}/11?lease=1m", header: auth, body: strings.Repeat("x", 1<<20), status: 413},
		{op: "GET /v1/uploads/{id}", method: "GET", path: "/v1/uploads/{set}", header: auth, status: 200},
		{op: "GET /v1/uploads/{id}", method: "GET", path: "/v1/uploads/{set}?upload_owner=other", header: auth, status: 409},
		{op: "GET /v1/uploads/{id}", method: "GET", path: "/v1/uploads/{set}?upload_owner=%FF", header: auth, status: 400},
		{op: "GET /v1/chunks/{chunks}/{off}", method: "GET", path: "/v1/chunks/{setnum}/0", header: auth, status: 200},
		{op: "GET /v1/chunks/{chunks}/{off}", method: "GET", path: "/v1/chunks/1/0", header: auth, status: 404},
		{op: "GET /v1/chunks/{chunks}/{off}", method: "GET", path: "/v1/chunks/x/0", header: auth, status: 400},
		{op: "POST /v1/uploads/{id}/publish", method: "POST", path: "/v1/uploads/{set}/publish?owner=o&ttl=1m", header: auth, body: fmt.Sprintf(`{"key":%q,"size":%d}`, absent, len(value)), status: 400},
		{op: "POST /v1/uploads/{id}/publish", method: "POST", path: "/v1/uploads/{set}/publish?owner=o&ttl=1m", header: auth, body: fmt.Sprintf(`{"key":%q,"size":%d}`, key, 1<<40), status: 409},
		{op: "POST /v1/uploads/{id}/publish", method: "POST", path: "/v1/uploads/{set}/publish?owner=o&ttl=1m", header: auth, body: fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)+1), status: 409},
		{op: "POST /v1/uploads/{id}/publish", method: "POST", path: "/v1/uploads/{set}/publish?owner=o&ttl=1m", header: auth, body: fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), status: 200},
		{op: "DELETE /v1/uploads/{id}", method: "DELETE", path: "/v1/uploads/{set}", header: auth, status: 204},
		{op: "POST /v1/uploads/{id}/publish", method: "POST", path: "/v1/uploads/{set}/publish?owner=o&ttl=1m", header: auth, body: fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), status: 409},
		{op: "POST /v1/uploads/reap", method: "POST", path: "/v1/uploads/reap", header: auth, status: 200},

		{op: "POST /v1/locks/{name}/acquire", method: "POST", path: "/v1/locks/job%2Fone/acquire", header: auth, body: `{"owner":"a","ttl":"1m"}`, status: 200},
		{op: "POST /v1/locks/{name}/acquire", method: "POST", path: "/v1/locks/job%2Fone/acquire", header: auth, body: `{"owner":"b","ttl":"1m"}`, status: 409},
		{op: "POST /v1/locks/{name}/acquire", method: "POST", path: "/v1/locks/job%2Fone/acquire", header: auth, body: `{"owner":"\ud800","ttl":"1m"}`, status: 400},
		{op: "POST /v1/locks/{name}/renew", method: "POST", path: "/v1/locks/job%2Fone/renew", header: auth, body: `{"owner":"a","token":1,"ttl":"1m"}`, status: 200},
		{op: "GET /v1/locks", method: "GET", path: "/v1/locks?prefix=job%2F&limit=1", header: auth, status: 200},
		{op: "GET /v1/locks", method: "GET", path: "/v1/locks?limit=0", header: auth, status: 400},
		{op: "GET /v1/locks", method: "GET", path: "/v1/locks", status: 401},
		{op: "POST /v1/locks/{name}/renew", method: "POST", path: "/v1/locks/job%2Fone/renew", header: auth, body: `{"owner":"a","token":9,"ttl":"1m"}`, status: 409},
		{op: "POST /v1/locks/{name}/renew", method: "POST", path: "/v1/locks/job%2Fone/renew", header: auth, body: `{"owner":"a",`, status: 400},
		{op: "POST /v1/locks/{name}/release", method: "POST", path: "/v1/locks/job%2Fone/release", header: auth, body: `{"owner":"a","token":1}`, status: 200},
		{op: "POST /v1/locks/{name}/release", method: "POST", path: "/v1/locks/job%2Fone/release", header: auth, body: `{"owner":"a","token":1}`, status: 409},

		{op: "GET /v1/groups/{group}", method: "GET", path: "/v1/groups/g", header: auth, status: 404},
		{op: "PUT /v1/groups/{group}", method: "PUT", path: "/v1/groups/g", header: auth, status: 200},
		{op: "GET /v1/groups/{group}", method: "GET", path: "/v1/groups/g", header: auth, status: 200},
		{op: "PUT /v1/records/{id}", method: "PUT", path: "/v1/records/r", header: map[string]string{"Authorization": "Bearer tok", "If-None-Match": "*"}, body: `{"group":"g","status":"paused"}`, status: 201},
		{op: "PUT /v1/records/{id}", method: "PUT", path: "/v1/records/r", header: map[string]string{"Authorization": "Bearer tok", "If-Match": `"1"`}, body: `{"group":"g","status":"active"}`, status: 200},
		{op: "PUT /v1/records/{id}", method: "PUT", path: "/v1/records/r", header: map[string]string{"Authorization": "Bearer tok", "If-Match": `"1"`}, body: `{"group":"g","status":"active"}`, status: 412},
		{op: "PUT /v1/records/{id}", method: "PUT", path: "/v1/records/r", header: map[string]string{"Authorization": "Bearer tok", "If-Match": `W/"1"`}, body: `{"group":"g","status":"active"}`, status: 400},
		{op: "PUT /v1/records/{id}", method: "PUT", path: "/v1/records/r", header: auth, body: `{"group":"g","status":"active"}`, status: 428},
		{op: "PUT /v1/records/{id}", method: "PUT", path: "/v1/records/s", header: map[string]string{"Authorization": "Bearer tok", "If-None-Match": "*"}, body: `{"group":"nogroup","status":"active"}`, status: 409},
		{op: "GET /v1/records/{id}", method: "GET", path: "/v1/records/r", header: auth, status: 200},
		{op: "GET /v1/records/{id}", method: "GET", path: "/v1/records/absent", header: auth, status: 404},
		{op: "GET /v1/groups/{group}/claimable", method: "GET", path: "/v1/groups/g/claimable", header: auth, status: 200},
		{op: "GET /v1/groups/{group}/claimable", method: "GET", path: "/v1/groups/g/claimable?limit=-1", header: auth, status: 400},
		{op: "GET /v1/groups/{group}/leased", method: "GET", path: "/v1/groups/g/leased?limit=1", header: auth, status: 200},
		{op: "GET /v1/groups/{group}/leased", method: "GET", path: "/v1/groups/g/leased?after=%0a", header: auth, status: 400},
		{op: "GET /v1/groups/{group}/probe", method: "GET", path: "/v1/groups/g/probe", header: auth, status: 200},
		{op: "GET /v1/groups/{group}/wait", method: "GET", path: "/v1/groups/g/wait?timeout=0s", header: auth, status: 200},
		{op: "GET /v1/groups/{group}/wait", method: "GET", path: "/v1/groups/g/wait?timeout=banana", header: auth, status: 400},
		{op: "POST /v1/records/{id}/claim", method: "POST", path: "/v1/records/r/claim", header: auth, body: `{"group":"g","owner":"w","ttl":"1m"}`, status: 200},
		{op: "POST /v1/records/{id}/claim", method: "POST", path: "/v1/records/r/claim", header: auth, body: `{"group":"g","owner":"x","ttl":"1m"}`, status: 409},
		{op: "POST /v1/records/{id}/claim", method: "POST", path: "/v1/records/absent/claim", header: auth, body: `{"group":"g","owner":"x","ttl":"1m"}`, status: 404},
		{op: "POST /v1/records/{id}/renew", method: "POST", path: "/v1/records/r/renew", header: auth, body: `{"group":"g","owner":"w","incarnation":1,"ttl":"1m"}`, status: 200},
		{op: "POST /v1/records/{id}/renew", method: "POST", path: "/v1/records/r/renew", header: auth, body: `{"owner":"w","incarnation":1,"ttl":"1m"}`, status: 400},
		{op: "POST /v1/groups/{group}/claim-next", method: "POST", path: "/v1/groups/g/claim-next", header: auth, body: `{"owner":"w","ttl":"1m","n":5}`, status: 200},
		{op: "POST /v1/groups/{group}/claim-next", method: "POST", path: "/v1/groups/g/claim-next", header: auth, body: `{"owner":"w","ttl":"1m","n":5000}`, status: 400},
		{op: "DELETE /v1/records/{id}", method: "DELETE", path: "/v1/records/r", header: auth, status: 204},

		{op: "", method: "GET", path: "/v1/nosuchroute", header: auth, status: 404},
		{op: "", method: "PATCH", path: "/v1/records/r", header: auth, status: 405},
	}
	// A ref's name with literal slashes, at every documented depth.
	for n := 2; n <= wire.RefDepth; n++ {
		op := "/v1/refs"
		for i := 1; i < n; i++ {
			op += fmt.Sprintf("/{s%d}", i)
		}
		op += "/{name}"
		path := "/v1/refs/" + strings.Repeat("deep/", n-1) + "x"
		cases = append(cases, []routeCase{
			{op: "PUT " + op, method: "PUT", path: path, header: auth, body: `{"key":"` + key + `"}`, status: 201},
			{op: "GET " + op, method: "GET", path: path, header: auth, status: 200},
			{op: "PATCH " + op, method: "PATCH", path: path, header: auth, body: `{"ttl":"1h"}`, status: 200},
			{op: "DELETE " + op, method: "DELETE", path: path, header: auth, status: 204},
			{op: "GET " + op, method: "GET", path: path, header: auth, status: 404},
		}...)
	}
	covered := map[string]bool{}
	for _, c := range cases {
		if c.before != nil {
			c.before(t)
		}
		covered[c.op] = true
		path := strings.NewReplacer("{setnum}", setnum, "{set}", set, "{lease}", lease).Replace(c.path)
		a := do(t, c.method, srv.URL+path, strings.ReplaceAll(c.body, "{lease}", lease), c.header)
		if a.status != c.status {
			t.Errorf("%s %s = %d %s, want %d", c.method, path, a.status, a.body, c.status)
		}
	}
	for _, op := range doc.Operations() {
		if !covered[op] {
			t.Errorf("no case for %s", op)
		}
	}
}

// routeCase is one request of TestEveryRoute and the status it must get.
type routeCase struct {
	op           string // the documented operation
	method, path string
	header       map[string]string
	body         string
	status       int
	before       func(t *testing.T)
}

// TestCheckerCatches: apicheck fails an answer the document does not
// list: an undocumented status, header, member or media type, or a 2xx to
// a request the document refuses.
func TestCheckerCatches(t *testing.T) {
	t.Parallel()
	doc := apicheck.Load(t)
	for _, c := range []struct {
		name, method, path, body string
		handler                  http.HandlerFunc
		want                     string
	}{
		{"status", "GET", "/v1/info", "", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }, "status 418 is not documented"},
		{"header", "GET", "/v1/info", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Undocumented", "1")
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"cluster":false,"reason":"r"}`))
		}, "header X-Undocumented is not documented"},
		{"member", "GET", "/v1/info", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"cluster":false,"reason":"r","extra":1}`))
		}, "extra"},
		{"media type", "GET", "/v1/info", "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<p>`))
		}, "text/html"},
		{"body where none", "DELETE", "/v1/records/r", "", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
			w.Write([]byte(`x`))
		}, "a body"},
		{"accepted a refused request", "POST", "/v1/locks/l/acquire", `{"owner":1}`, func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"name":"l","token":1}`))
		}, "accepted a request the document refuses"},
		{"no operation", "GET", "/v1/nowhere", "", func(w http.ResponseWriter, r *http.Request) {}, "no operation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			catch := &catcher{TB: t}
			srv := httptest.NewServer(doc.Wrap(catch, c.handler))
			defer srv.Close()
			do(t, c.method, srv.URL+c.path, c.body, nil)
			srv.Close()
			got := catch.text()
			if !strings.Contains(got, c.want) {
				t.Errorf("caught %q, want an error naming %q", got, c.want)
			}
		})
	}
}

// catcher is a testing.TB whose Errorf records instead of failing.
type catcher struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (c *catcher) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *catcher) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}

// TestEveryRouteRefuses sends every operation of docs/openapi.yaml the
// requests a client gets wrong, and the requests a store cannot serve,
// through apicheck, which fails the test on any answered status the
// document does not declare: without the token, with a bad path
// parameter, query and body, to a server whose store is closed, and to
// one whose engine fails every call.
func TestEveryRouteRefuses(t *testing.T) {
	t.Parallel()
	doc := apicheck.Load(t)
	// serve serves a store whose engine calls, once broken is set, fail
	// with an error no sentinel names (an internal error).
	var broken atomic.Bool
	serve := func(t *testing.T, closed, breaks bool) string {
		inner, err := stead.Open(context.Background(), "mem://")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inner.Close() })
		eng := faultengine.New(inner.Engine(), faultengine.Func(func(faultengine.Op) error {
			if breaks && broken.Load() {
				return errors.New("the engine broke")
			}
			return nil
		}))
		st, err := stead.New(context.Background(), eng)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if closed {
			st.Close()
		}
		srv := httptest.NewServer(doc.Wrap(t, server.New(st, server.Options{Token: "tok", Logger: quiet})))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	live, closed, failing := serve(t, false, false), serve(t, true, false), serve(t, false, true)
	broken.Store(true)
	auth := map[string]string{"Authorization": "Bearer tok"}
	absent := blob.KeyOf([]byte("never stored")).String()
	// Each path parameter's value in a well-formed request, and in one
	// the server must refuse.
	good := map[string]string{"key": absent, "chunks": "1", "off": "0", "id": "0123456789abcdef"}
	bad := map[string]string{"key": "sha256:bad", "chunks": "x", "off": "x", "name": "%FF", "owner": "%FF", "id": "%FF", "group": "%FF"}
	fill := func(path string, values map[string]string) string {
		segs := strings.Split(path, "/")
		for i, s := range segs {
			if p, ok := strings.CutPrefix(s, "{"); ok {
				p = strings.TrimSuffix(p, "}")
				v, ok := values[p]
				if !ok {
					v = p
				}
				segs[i] = v
			}
		}
		return strings.Join(segs, "/")
	}
	const badQuery = "?limit=x&timeout=x&lease=x&touch=x&ttl=x&owner=&after=%FF"
	for _, op := range doc.Operations() {
		method, path, _ := strings.Cut(op, " ")
		public := path == "/healthz" || path == "/readyz"
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			if a := do(t, method, live+fill(path, good), "{}", nil); !public && a.status != http.StatusUnauthorized {
				t.Errorf("without the token: %d %s, want 401", a.status, a.body)
			}
			do(t, method, live+fill(path, good)+badQuery, "{", auth)
			if fill(path, bad) != fill(path, good) {
				do(t, method, live+fill(path, bad), "{}", auth)
			}
			do(t, method, closed+fill(path, good), "{}", auth)
			do(t, method, failing+fill(path, good), "{}", auth)
		})
	}
}
