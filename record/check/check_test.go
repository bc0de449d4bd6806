package check

import (
	"errors"
	"testing"
	"time"

	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

func TestChecks(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stored := record.Record{ID: "r", Group: "g", Version: 3, Lease: record.Lease{Owner: "a", Incarnation: 2, Expiry: now.Add(time.Minute)}}
	update := stored
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"save create over existing", Save(record.Record{ID: "r", Group: "g"}, stored, true), steaderr.ErrConflict},
		{"save create", Save(record.Record{ID: "r", Group: "g"}, record.Record{}, false), nil},
		{"save update absent", Save(update, record.Record{}, false), steaderr.ErrConflict},
		{"save update", Save(update, stored, true), nil},
		{"save other group", Save(record.Record{ID: "r", Group: "h", Version: 3}, stored, true), steaderr.ErrWrongGroup},
		{"save stale", Save(record.Record{ID: "r", Group: "g", Version: 2, Lease: stored.Lease}, stored, true), steaderr.ErrConflict},
		{"save foreign lease", Save(record.Record{ID: "r", Group: "g", Version: 3, Lease: record.Lease{Owner: "b", Incarnation: 2}}, stored, true), steaderr.ErrConflict},
		{"save release", Save(record.Record{ID: "r", Group: "g", Version: 3}, stored, true), nil},
		{"claim absent", Claim("g", "b", now, record.Record{}, false), steaderr.ErrNotFound},
		{"claim other group", Claim("h", "b", now, stored, true), steaderr.ErrWrongGroup},
		{"claim leased", Claim("g", "b", now, stored, true), steaderr.ErrLeased},
		{"claim by holder", Claim("g", "a", now, stored, true), nil},
		{"claim at expiry", Claim("g", "b", now.Add(time.Minute), stored, true), nil},
		{"renew", Renew(record.RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 2, Now: now}, stored, true), nil},
		{"renew lapsed", Renew(record.RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 2, Now: now.Add(time.Hour)}, stored, true), nil},
		{"renew superseded", Renew(record.RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 1, Now: now}, stored, true), steaderr.ErrLeased},
		{"renew released", Renew(record.RenewParams{ID: "r", Group: "g", Owner: "b", Incarnation: 2, Now: now.Add(time.Hour)}, stored, true), steaderr.ErrConflict},
		{"renew absent", Renew(record.RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 2, Now: now}, record.Record{}, false), steaderr.ErrNotFound},
	} {
		if (tc.want == nil) != (tc.err == nil) || !errors.Is(tc.err, tc.want) && tc.want != nil {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}
